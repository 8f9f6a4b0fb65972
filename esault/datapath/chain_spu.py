"""ChainProcessing: a bolt SPU's processing part for one S2J chain worker, its links real messages.

A join chain's SPUs are bolt SPUs (`BoltSpuActor`) whose `Processing` part is
this one instead of `KeyedProcessing` (esault.datapath.actors picks it for a
bolt class with `esault_chain = True`). The protocol is
`esault.joins.node.ChainNode` (pure); this part translates:
entry batches (R at the head, S at the tail) into `enter`, `ChainLink`
messages from the neighbours into `receive`, checkpoint alignment into the
node's quiescing, and the unit's split/merge messages into tail changes.

Delivery (docs/JOINS.md, "A chain of SPUs"): an input's pairs with older
tuples come out wherever the two cross. Pairs made at entry are in the
input's tree, which completes once it entered (the checkpointed chain has it);
pairs made on a link leave unanchored, which exactly_once covers (a rollback
restores every SPU and the sink together) and at_least_once could not, so a
chain join refuses it. The entry SPU counts the inputs still owed pairs (its
`inflight`) until a flush round, run once its input pauses, says they are
out; completion needs that count at zero and emitted and processed to agree.
"""

from __future__ import annotations

import time as _time
from bisect import bisect_right
from typing import Any

from esault.checkpoint.saveable import CHAIN_FIX
from esault.checkpoint.store import instance_slot
from esault.joins.node import ChainNode, ChainProtocolError
from esault.joins.protocol import Flushed, Handoff, Joined, Link, Send, from_wire, to_wire
from esault.checkpoint.snapshots import Snapshot
from esault.migration.handoff import GiverHandoff
from esault.datapath.context import log
from esault.datapath.inbox import ControlFirstInbox
from esault.datapath.processing import Handlers, PartOfSpu
from esault.messages.chains import ChainLink, ChainMembers
from esault.messages.checkpoints import Barrier, CheckpointStart
from esault.messages.data import DataBatch
from esault.messages.handoff import HandoffFinished, PeersLost, PrepareReceive, Prepared


class ChainInbox(ControlFirstInbox):
    """A chain SPU's mailbox: its neighbours' link messages also go ahead of queued entries (FIFO among
    themselves, so each link stays FIFO): a block's ack round trip then does not wait behind the SPU's
    backlog of entry batches, which capped what a link moves (docs/JOINS.md, "Where a chain SPU's time
    goes"). Any interleaving of entries and link messages is one the protocol allows (tests/unit/test_chain_nodes.py)."""

    def _put(self, item: Any) -> None:
        if type(getattr(item, "message", None)) is ChainLink:
            self._urgent.append(item)
        else:
            super()._put(item)


class ChainProcessing(PartOfSpu):
    """The `Processing` of one worker of a join chain; only the actor's thread touches it. The SPU's one
    instance (a ChainJoinBolt, in the actor's PE table) holds the join's declaration.

    It keeps its own references to the actor's parts its entry loop and links use (stats, faults, router,
    the emit path); the probe count and the checkpoint alignment stay on the actor (`spu`).
    """

    inbox = ChainInbox  # the actor's mailbox for this kind (BoltSpuActor._create_actor_inbox)

    def __init__(self, spu: Any) -> None:
        """`spu`: the BoltSpuActor that holds this part (typed loosely: its module imports this one)."""
        super().__init__(spu)
        self.emit_path = spu.emit_path
        self.acking = spu.acking
        self.acks = spu.job.acks
        self.node: ChainNode | None = None
        self.members: list[int] = []
        self.mailboxes: dict[int, Any] = {}
        self._linked = False  # knows its neighbours (ChainMembers, or the old tail's Link)
        self._waiting: list[Any] = []  # what came before that, in arrival order
        self._unsent: dict[int, list] = {}  # link messages to an SPU whose mailbox is not known yet
        self._restore_epoch: int | None = None
        self._owed: dict[str, list[int]] = {"R": [], "S": []}  # seqs of inputs still owed pairs (ascending)
        self._round: dict[str, int | None] = {"R": None, "S": None}  # bound of this SPU's flush round in flight
        self._last_round = {"R": 0.0, "S": 0.0}
        self._last_entry = 0.0
        self._stopped_at_final = False  # quiet after the final checkpoint (a stop)
        self._owed_since = {"R": 0.0, "S": 0.0}  # when the oldest input still owed pairs entered (about)
        self._receiving_from: int | None = None  # a new tail: the old tail that links it
        self._receive_op: int | None = None
        self._absorbing: tuple[int, int] | None = None  # (reconfig, tail): the tail merges into this SPU
        self._absorb_held: list[DataBatch] = []  # S entries that wait for that merge
        self._retire_op: int | None = None
        self._policy = None
        self._period_start = _time.perf_counter()
        self._busy_mark = 0.0  # busy seconds counted up to the last sample

    def install(self, handlers: Handlers) -> None:
        """The links' messages; entries and checkpoint messages wait for the neighbours."""
        handlers.update({ChainLink: self._on_link, ChainMembers: self._on_members})
        for kind in (DataBatch, Barrier, CheckpointStart):
            handlers[kind] = self._once_linked(handlers[kind])

    def _once_linked(self, handler: Any) -> Any:
        """`handler`, but what comes before this SPU knows its neighbours waits (in order) until it does."""

        def gated(message: Any) -> None:
            if self._linked:
                handler(message)
            else:
                self._waiting.append(message)
        return gated

    # --- set-up ---------------------------------------------------------------

    def _chain(self) -> ChainNode:
        if self.node is None:
            bolt = self.pes.single()
            self.node = ChainNode(self.spu_id, bolt.queries, bolt.window, bolt.zeta)
            if bolt.shed_config:
                self._policy = bolt.new_shed_policy()
        return self.node

    def restore(self, epoch: int) -> None:
        """Restored once the members are known: which checkpointed workers this one takes depends on them
        (bolts fused after the join restore now, per instance, as on any SPU)."""
        self._restore_epoch = epoch

    def _on_members(self, msg: ChainMembers) -> None:
        self.mailboxes.update(msg.spus)
        if self.spu_id in msg.spus:
            self.members = sorted(msg.spus)
        node = self._chain()
        if not self._linked and self._receiving_from is None and self.spu_id in msg.spus:
            i = self.members.index(self.spu_id)
            owed = self._restore_chain(i, len(self.members)) if self._restore_epoch is not None else []
            left = self.members[i - 1] if i else None
            right = self.members[i + 1] if i + 1 < len(self.members) else None
            self._apply(owed + node.link(left, right))
            self._set_linked()
        elif self._linked and not node.retired:
            self._relink_lost()
        self._send_links({})

    def _relink_lost(self) -> None:
        """A neighbour vanished without a hand-off (its worker died; guarantee "none" replaces it empty)."""
        node = self.node
        merging = self._absorbing[1] if self._absorbing is not None else None  # leaves by the protocol
        lost = [n for n in (node.left, node.right) if n is not None and n not in self.members and n != merging]
        if not lost or self.spu_id not in self.members:
            return
        i = self.members.index(self.spu_id)
        left = self.members[i - 1] if i else None
        right = self.members[i + 1] if i + 1 < len(self.members) else None
        dropped = node.worker.drop_in_flight()
        log.error("topology %r: join chain %r SPU %d lost neighbour(s) %s with their tuples and %d in flight "
                  "(guarantee %r keeps no copy); it links to %s/%s", self.job.name, self.unit_name, self.spu_id,
                  lost, dropped, self.job.config.guarantee, left, right)
        self._apply(node.link(left, right))

    def _restore_chain(self, rank: int, size: int) -> list:
        """This SPU's part of checkpoint `epoch`: the worker of its rank, and if it is the tail, every worker
        the checkpoint had beyond it (merged in order, with the pairs they owe each other)."""
        epoch, self._restore_epoch = self._restore_epoch, None
        store = self.spu.checkpoint_store()
        first = store.read_slot(self.unit_name, epoch, instance_slot(0))
        if first is None:
            return []
        states = [first] + [store.read_slot(self.unit_name, epoch, instance_slot(j)) for j in range(1, first["size"])]
        if any(s is None or s["epoch"] != first["epoch"] for s in states):
            raise RuntimeError(f"checkpoint {epoch} of join chain {self.unit_name!r} is missing workers' states")
        node = self.node
        owed: list = []
        if rank < len(states):
            node.restore(states[rank])
            if rank == size - 1:
                for later in states[rank + 1:]:
                    owed += node.absorb(later)
        for state in states:
            node.adopt_sequences(state)
        return owed

    def _set_linked(self) -> None:
        self._linked = True
        self._replay()

    def _replay(self) -> None:
        """What waited (for the chain's members, a Link or a merge) runs now, in arrival order."""
        waiting, self._waiting = self._waiting, []
        run = self.spu._run_now
        for message in waiting:
            run(message)

    # --- entries ----------------------------------------------------------------

    def process_data(self, msg: DataBatch) -> None:
        bolt = self.pes.single()
        node = self.node
        if self._absorbing is not None and msg.source == bolt.right:
            self._absorb_held.append(msg)  # S enters here once the old tail's tuples are merged in
            return
        side = "R" if msg.source == bolt.left else "S"
        policy = self._policy
        started = _time.perf_counter()
        effects: list = []
        entered = 0
        time_of = bolt.time
        for i, (key, value) in enumerate(zip(msg.keys, msg.values)):
            if policy is not None and not i % 32:
                self._observe(bolt, started)
            if policy is not None and not policy.admit():
                self.stats.shed += 1
                continue
            try:
                ts = float(time_of(value))
            except Exception as exc:
                self.faults.give_up(key, value, exc, "event time of the join", 1)
                continue
            effects += node.enter(side, ts, value, key)
            entered += 1
        n = len(msg.keys)
        self.stats.processed += n
        self.spu.processed_since_probe += n
        sends, flushed = self._effects(effects)
        sent, xors = self.router.flush(msg.roots)  # pairs made at entry: in the input's trees
        self.count_sent(sent)
        self._send_links(sends)
        if msg.roots and self.acking:  # entered: the chain's state (checkpointed) has the input now
            self.acks.update({root: edge ^ x for root, edge, x in zip(msg.roots, msg.edges, xors)})
        if entered and (node.right if side == "R" else node.left) is not None:
            if not self._owed[side]:
                self._owed_since[side] = _time.monotonic()
            self._owed[side].append(node.seq[side])  # owed pairs with older tuples still on their way
        self._last_entry = _time.monotonic()
        for f in flushed:
            self._release(f.side, f.bound)
        self._count_inflight()

    def _observe(self, bolt: Any, batch_started: float) -> None:
        """One utilisation sample per shed period: this SPU's busy fraction (S2J's tau at an entry worker),
        counting the batch in progress (one batch may be the whole backlog)."""
        now = _time.perf_counter()
        elapsed = now - self._period_start
        if elapsed < bolt.shed_period or elapsed <= 0:
            return
        busy_total = self.stats.busy_us / 1e6 + (now - batch_started)
        busy, self._busy_mark = busy_total - self._busy_mark, busy_total
        self._period_start = now
        self._policy.observe(busy / elapsed, max(len(self.members), 1))

    # --- flush rounds: when an input's pairs are all out ---------------------------

    def _maybe_flush(self, now: float) -> None:
        """A flush round for the inputs still owed pairs, once no tuple entered here for flush_interval, or
        when the oldest has waited max_delay while few entered (a trickle never pauses, and balance moves
        tuples only once 2 zeta more arrived). Not under load: a round pushes its tuples to the far end,
        piling the chain's work onto its ends; there tuples cross by balance (SIZE_CHG) as they come."""
        bolt = self.pes.single()
        node = self.node
        if node is None or not self._linked or node.retiring or self._stopped_at_final:
            return
        paused = now - self._last_entry >= bolt.flush_interval
        trickle = 2 * bolt.zeta * max(1, len(self.members) - 1)  # fewer owed than balance would move on
        for side in ("R", "S"):
            owed = self._owed[side]
            if owed and self._round[side] is None and (
                    paused or (now - self._owed_since[side] >= bolt.max_delay and len(owed) < trickle)):
                self._round[side] = node.seq[side]
                self._last_round[side] = now
                self._apply(node.start_flush(side))

    def _release(self, side: str, bound: int) -> None:
        """Flushed(side, bound): the inputs of seq <= bound owe no pair."""
        owed = self._owed[side]
        del owed[:bisect_right(owed, bound)]
        self._owed_since[side] = _time.monotonic()  # the rest entered after the round began
        if self._round[side] is not None and self._round[side] <= bound:
            self._round[side] = None
        self._count_inflight()

    def _count_inflight(self) -> None:
        self.stats.inflight = len(self._owed["R"]) + len(self._owed["S"]) + len(self._absorb_held)

    def on_tick(self, now: float) -> None:
        """The instance's ticks if it asked for them; flush rounds, on this process's monotonic clock (`now`,
        the job clock, is for the ticks)."""
        if self.services.ticking:
            self.ticks.tick(now)
        if self._linked:
            now = _time.monotonic()
            self._maybe_flush(now)
            for side, bound in self._round.items():
                if bound is not None and now - self._last_round[side] > 10.0:
                    self._last_round[side] = now
                    node = self.node
                    log.warning("topology %r: join chain %r SPU %d: flush round %s<=%d unanswered for 10 s, a "
                                "chain far behind its input or a stuck link (tokens %s, paused %s, left %s, right %s)", self.job.name, self.unit_name,
                                self.spu_id, side, bound, node.tokens, node.worker.paused, node.left, node.right)

    # --- links ---------------------------------------------------------------------

    def _on_link(self, msg: ChainLink) -> None:
        """A neighbour's link messages; the time counts as busy (a middle SPU's whole work arrives here)."""
        started = _time.perf_counter()
        try:
            self._handle_link(msg)
        finally:
            self.stats.busy_us += int((_time.perf_counter() - started) * 1e6)

    def _handle_link(self, msg: ChainLink) -> None:
        if not self._linked and msg.sender != self._receiving_from:
            self._waiting.append(msg)
            return
        node = self._chain()
        effects: list = []
        for raw in msg.items:
            try:
                item = from_wire(raw)
            except ValueError as exc:
                log.error("topology %r: join chain %r SPU %d dropped a malformed link message from SPU %d: %s",
                          self.job.name, self.unit_name, self.spu_id, msg.sender, exc)
                continue
            if type(item) is Link:
                effects += self._accept_link(msg.sender, item)
                continue
            direction = node.direction_of(msg.sender)
            if direction is None:
                log.warning("topology %r: join chain %r SPU %d ignored %s from SPU %d, not its neighbour",
                            self.job.name, self.unit_name, self.spu_id, type(item).__name__, msg.sender)
                continue
            try:
                effects += node.receive(direction, item)
            except ChainProtocolError as exc:
                log.error("topology %r: join chain %r SPU %d dropped %s from SPU %d: %s", self.job.name,
                          self.unit_name, self.spu_id, type(item).__name__, msg.sender, exc)
                continue
            if type(item) is Handoff:  # its effects leave before the S entries that waited run
                self._apply(effects)
                effects = []
                self._absorbed(item.state)
        self._apply(effects)
        self._count_inflight()
        if self._retire_op is not None and node.retired:
            self.unit_ref.tell(HandoffFinished(self._retire_op, self.spu_id, "giver", sum(node.stored()), 0.0))
            self._retire_op = None
        self.spu.barriers.check()  # quiet links may complete a checkpoint's alignment

    def _effects(self, effects: list) -> tuple[dict[int, list], list[Flushed]]:
        """Emit the pairs; (link messages per neighbour, in order; finished rounds)."""
        sends: dict[int, list] = {}
        flushed: list[Flushed] = []
        node = self.node
        emit = self.emit_path
        for e in effects:
            kind = type(e)
            if kind is Joined:
                r, s = e.r, e.s
                emit(r[3], {"query": e.query, "left": r[2], "right": s[2]})
            elif kind is Send:
                to = node.neighbour(e.direction)
                message = e.message
                if type(message) is Handoff:  # the inputs still owed pairs go with the state to the new tail
                    message = Handoff({**message.state, "owed": self._owed})
                    self._owed = {"R": [], "S": []}
                sends.setdefault(to, []).append(to_wire(message))
            elif kind is Flushed:
                flushed.append(e)
        return sends, flushed

    def _apply(self, effects: list) -> None:
        """Outside an entry batch: pairs leave unanchored, before the link messages that follow them."""
        sends, flushed = self._effects(effects)
        self.flush()
        self._send_links(sends)
        for f in flushed:
            self._release(f.side, f.bound)

    def _send_links(self, sends: dict[int, list]) -> None:
        for to, items in list(self._unsent.items()) + list(sends.items()):
            mailbox = self.mailboxes.get(to)
            if mailbox is None:
                if items is not self._unsent.get(to):
                    self._unsent.setdefault(to, []).extend(items)
                continue
            self._unsent.pop(to, None)
            try:
                mailbox.tell(ChainLink(self.spu_id, items))
            except Exception as exc:  # noqa: BLE001 - its process died: a rollback (or a replacement) follows
                log.warning("topology %r: join chain %r SPU %d cannot reach SPU %d: %r", self.job.name,
                            self.unit_name, self.spu_id, to, exc)

    # --- checkpoints: align, quiesce the links, snapshot ------------------------------

    def ready_to_seal(self, epoch: int) -> bool:
        """Aligned, the links quiesce: sealed once the neighbours' Marks and the acks of the blocks
        sent are in (a link message's arrival checks again)."""
        node = self.node
        if node.quiescing != epoch:
            self._apply(node.begin_quiesce(epoch))
        return node.quiet()

    def end_input(self) -> None:
        """The job stops at this checkpoint: what crossed after it would be output past its last checkpoint
        (a restart from it makes those pairs again), so no flush round starts any more."""
        self._stopped_at_final = True

    def finish_input(self) -> None:
        """A join chain has nothing to finish: its pairs leave as they are made (end_input ends the rounds)."""

    def snapshot(self, snapshot: Snapshot) -> None:
        """The node's state, in the slot of this SPU's rank in the chain."""
        epoch = snapshot.ack.epoch
        rank = self.members.index(self.spu_id)
        state = {**self.node.snapshot(), "rank": rank, "size": len(self.members), "epoch": epoch}
        blob = self.spu.save_state(state, f"join {self.unit_name!r} (chain SPU {self.spu_id}) cannot save its state",
                                   CHAIN_FIX)
        if blob is not None:  # else lost: send_barrier refuses this snapshot
            snapshot.rows[self.unit_name] = [(instance_slot(rank), blob)]

    def sealed(self, epoch: int, final: bool) -> None:
        """The barrier left: the links resume (not after the final checkpoint: the job stops there)."""
        if not final:
            self._apply(self.node.end_quiesce())

    # --- chain changes at the tail (the unit's split and merge) ---------------------------

    def give(self, giving: GiverHandoff, mailboxes: dict[int, Any]) -> None:
        """Gives: every upstream SPU switched: no S enters here any more."""
        self.mailboxes.update(mailboxes)
        receiver = giving.ranges[0][2]
        node = self.node
        if giving.retire:
            self._retire_op = giving.reconfig_id
            self._apply(node.retire())  # its Handoff leaves once the link to its left neighbour is empty
            return
        self._apply(node.link_new_tail(receiver))
        self.unit_ref.tell(HandoffFinished(giving.reconfig_id, self.spu_id, "giver", 0, 0.0))

    def on_prepare_receive(self, msg: PrepareReceive) -> None:
        giver = msg.ranges[0][2]
        self._chain()
        if not self._linked:  # a new tail: the old one links it (Link, first on the new link)
            self._receiving_from, self._receive_op = giver, msg.reconfig_id
        else:  # the tail merges into this SPU
            self._absorbing = (msg.reconfig_id, giver)
        self.unit_ref.tell(Prepared(msg.reconfig_id, self.spu_id, "receiver"))

    def _accept_link(self, sender: int, link: Link) -> list:
        if sender != self._receiving_from or self._linked:
            log.error("topology %r: join chain %r SPU %d got a Link from SPU %d it does not wait for",
                      self.job.name, self.unit_name, self.spu_id, sender)
            return []
        effects = self.node.accept_link(sender, link)
        self._receiving_from = None
        self.unit_ref.tell(HandoffFinished(self._receive_op, self.spu_id, "receiver", 0, 0.0))
        self._receive_op = None
        self._apply(effects)
        self._set_linked()  # the S entries that waited for the link run now
        return []

    def _absorbed(self, state: dict) -> None:
        """The old tail's state is merged in (its owed pairs are in the node's effects): S enters here now."""
        for side, seqs in (state.get("owed") or {}).items():
            self._owed[side] = sorted(self._owed[side] + [int(q) for q in seqs])
        rid, _tail = self._absorbing
        self._absorbing = None
        moved = len(state["worker"]["r"]) + len(state["worker"]["s"])
        self.unit_ref.tell(HandoffFinished(rid, self.spu_id, "receiver", moved, 0.0))
        held, self._absorb_held = self._absorb_held, []
        self._waiting = held + self._waiting
        self._replay()

    def cancel(self, reconfig_id: int) -> None:
        """Called off: S entries held for a merge into this SPU enter here after all."""
        if self._absorbing is not None and self._absorbing[0] == reconfig_id:
            self._absorbing = None
            self._waiting = self._absorb_held + self._waiting
            self._absorb_held = []
            self._replay()

    def peers_lost(self, msg: PeersLost) -> None:
        """Nothing waits here: a chain's hand-off goes over its neighbours' links, and a lost member is relinked
        through ChainMembers (_relink_lost); the giver's markers are the shared GiverSide's."""

    def routes_installed(self) -> None:
        """A chain's links do not follow the output routes."""
