"""KeyedProcessing: a bolt SPU's processing part for a bolt's PEs (per key, or one instance).

Hot path: a DataBatch arrives as columns; each (key, value) goes to its key's
PE through one reused Tuple view; emits land in the output router's buffers.
After the batch, buffers leave as one DataBatch per destination and the
batch's acks (one XOR value per tree, not per tuple) as one AckUpdate.

Besides the batches it runs the receiver's side of a key hand-off (tuples of
arriving keys held until their state and the downstream's MarkerSeen are in,
docs/PROTOCOLS.md), PE snapshots and restores, when PEs tick and the
idle-expiry scan. The PE table, its services (`PeTicks` among them) and parked
states are the actor's (a chain SPU's declaration instance lives there too);
this part uses them.
"""

from __future__ import annotations

from random import getrandbits
from time import thread_time
from typing import Any, Callable

from esault.checkpoint.saveable import key_owner
from esault.checkpoint.snapshots import Snapshot
from esault.checkpoint.store import bucket_of
from esault.datapath.ack_router import UNREACHABLE
from esault.datapath.context import log
from esault.datapath.pe_class import NO_BUCKET
from esault.datapath.pending_snapshot import PendingSnapshot
from esault.datapath.processing import Handlers, PartOfSpu
from esault.dsl.bolt import Bolt
from esault.dsl.tuple import Tuple
from esault.errors import SerializationError, UnsaveableState
from esault.keyhash import key_hash
from esault.messages.data import DataBatch
from esault.messages.handoff import (
    ForwardMarker,
    HandoffFinished,
    MarkerSeen,
    PeersLost,
    PrepareReceive,
    Prepared,
    StateHandoff,
)
from esault.migration import handoff
from esault.migration.handoff import GiverHandoff, HeldBatch, ReceiverHandoff, chunk_states
from esault.migration.retirement import RetireWait
from esault.transport.codec import decode, encode, encoder, raw_encoder
from esault.transport.state_chunks import pack_states, unpack_states

_NEVER = object()
"""A stamp no PE carries: the batch loop's old stamp when no snapshot is pending."""

GATE_SAMPLE = 16
"""The batch loop's gate times one encode in this many (KeyedProcessing._encode_now)."""

SETTLE_SLICE_KEYS = 256
"""Moved-in keys whose PEs one tick makes (~1-2 ms of the SPU's thread); the rest wait for the next tick or
their first tuple."""


class KeyedProcessing(PartOfSpu):
    """The `Processing` of a bolt SPU that runs the bolt's own PEs; only the actor's thread touches it.

    It keeps its own references to the actor's parts the per-tuple loops use (PE table, stats, faults,
    router), so a tuple costs no extra attribute load; what belongs to the batch's trees (roots, held
    anchors, acks) and the probe count stay on the actor (`spu`).
    """

    def __init__(self, spu: Any) -> None:
        """`spu`: the BoltSpuActor that holds this part (typed loosely: its module imports this one)."""
        super().__init__(spu)
        self.spec = spu.spec
        self.parked = spu.parked
        self.sampler = spu.sampler
        self._send_acks = spu._send_acks
        self.save_state = spu.save_state
        self.state_lost = spu.state_lost
        self._state_of = spu._state_of
        self._encode_state = spu._encode_state
        self._save_key = spu._save_key
        self._error_log = spu._error_log
        self._early = spu._early  # shared with the giver's steps
        self._view = Tuple()
        self._receiving: ReceiverHandoff | None = None
        self._retire_wait: RetireWait | None = None  # a non-keyed SPU retiring under exactly_once
        # on_batch_end() is called only for bolts that are not key grouped and define it (a combiner)
        spec = self.spec
        self._calls_batch_end = not spec.per_key and getattr(spec.cls, "on_batch_end", None) is not Bolt.on_batch_end
        self._last_expiry_scan = self.job.clock.now()
        self._pending: PendingSnapshot | None = None  # a snapshot still being encoded in slices
        self._snapshot_seconds = 0.0  # this thread's time encoding snapshots (stats.snapshot_us, in microseconds)
        self._gate_calls = 0  # the batch loop's gate's encodes: it times one in GATE_SAMPLE
        self._input_ended = False
        self._slice_keys = self.job.config.snapshot_slice_keys
        self._packer = encoder()  # one Packer for every entry this SPU's snapshots encode
        self._pack = raw_encoder()  # the same without the wrapper, for _encode_keys's loop
        self.pes.install = self._install_moved
        # A moved-in key's PE is made on first use or between batches (PeManager.arrived) when the bolt keeps
        # Bolt's state methods and has no on_tick(): a restore_state() of its own may do what its author
        # expects at the move (re-ask for ticks, reopen a resource), and a ticking PE's timers must not wait.
        self._lazy_install = (spu.state_is_dict  # Bolt's snapshot_state()
                              and getattr(spec.cls, "restore_state", None) is Bolt.restore_state
                              and getattr(spec.cls, "on_tick", Bolt.on_tick) is Bolt.on_tick)

    def install(self, handlers: Handlers) -> None:
        """The receiver's messages of a key hand-off."""
        handlers.update({StateHandoff: self._on_state, MarkerSeen: self._on_marker_seen})

    # --- checkpoints: end of input, snapshot, restore ----------------------------

    def ready_to_seal(self, epoch: int) -> bool:
        """Every barrier is in, so every input before them is processed: seal now."""
        return True

    def sealed(self, epoch: int, final: bool) -> None:
        """Nothing waits for the barrier to leave."""

    def end_input(self) -> None:
        """The final checkpoint aligned: no input follows. The previous epoch's snapshot is finished now, and
        the final one is encoded at its barrier (nothing runs after it to encode slices). What PEs emit at
        the end of the input they emit from finish() (finish_input)."""
        self.finish_pending()
        self._input_ended = True

    def finish_input(self) -> None:
        """Every PE's finish() (parked keys woken first: each key's input ended), or the instance's. A finished
        PE is dirty: what finish() changed is in the final snapshot. A class without finish() costs nothing."""
        self.finish_pending()  # finish() changes PEs: their states at the last barrier first
        if getattr(self.spec.cls, "finish", Bolt.finish) is Bolt.finish:
            return
        if not self.spec.per_key:
            self._finish(None, self.pes.single())
            return
        self.stats.close_errors += self.spu.wake_parked("finish")
        for key, pe in list(self.pes.items()):
            self._finish(key, pe)
            self.pes.mark(pe)

    def _finish(self, key: Any, pe: Any) -> None:
        try:
            pe.finish()
        except Exception as exc:  # counted: the run fails (its final output may be missing)
            log.error("topology %r: bolt %r finish() raised %r (key %r)", self.job.name, self.unit_name, exc, key)
            self.stats.close_errors += 1

    def _timed(self, encode: Callable[..., None], *args: Any) -> None:
        """Run one step of snapshot encoding and count the thread's CPU it took (stats.snapshot_us: the part of
        a checkpoint the processing thread pays; the SnapshotWriter's thread writes)."""
        started = thread_time()
        try:
            encode(*args)
        finally:
            self._count_snapshot(thread_time() - started)

    def _count_snapshot(self, seconds: float) -> None:
        """Add `seconds` and publish the total (with what the batch loop's gate added since)."""
        self._snapshot_seconds += seconds
        self.stats.snapshot_us = int(self._snapshot_seconds * 1e6)

    def snapshot(self, snapshot: Snapshot) -> None:
        """The instance's state, or the changed PEs' states (and the ones parked since the last snapshot) in
        bucket rows, encoded in slices: the parked ones and a first slice now, the rest a slice per tick after
        the barrier left (datapath/pending_snapshot.py). Only exactly_once snapshots, and it marks changed keys
        (PeManager's touched mode)."""
        self._timed(self._take_snapshot, snapshot)

    def _take_snapshot(self, snapshot: Snapshot) -> None:
        epoch = snapshot.ack.epoch
        self._finish_pending()  # the previous epoch's first: the writer acks in order
        if not self.spec.per_key:
            self.spu.snapshot_instance(self.unit_name, self.pes.single(), snapshot)
            return
        parked: dict[int, list] = {}
        self.parked.snapshot_into(parked, epoch)
        dirty = self.pes.end_period()
        config = self.job.config  # slices of one per tick, done within ~40% of the interval
        ticks = max(1, int(0.4 * config.checkpoint_interval / config.tick_interval))
        pending = PendingSnapshot(snapshot, dirty, max(self._slice_keys, -(-len(dirty) // ticks)),
                                  self.pes.last_period)
        for bucket, flat in parked.items():
            for key, state in zip(flat[::2], flat[1::2]):
                self._encode_entry(pending, bucket, key, state)
        self._pending = pending
        if self._input_ended:
            self._finish_pending()
            return
        self._encode_slice(pending)
        if self._pending is pending:  # more than a slice: the rest a slice per tick (on_tick)
            snapshot.deferred = True

    def finish_pending(self) -> None:
        """Encode what is left of the pending snapshot now and submit it (a gate every key may pass)."""
        if self._pending is not None:
            self._timed(self._finish_pending)

    def _finish_pending(self) -> None:
        pending = self._pending
        if pending is not None:
            self._encode_pes(pending, pending.take_rest())
            self._complete(pending)

    def _encode_slice(self, pending: PendingSnapshot) -> None:
        """The next `pending.slice` keys; the snapshot goes to the writer after its last one."""
        if pending.left <= pending.slice:
            self._finish_pending()
            return
        self._encode_pes(pending, pending.take_slice())

    def _encode_keys(self, pending: PendingSnapshot, keys: Any) -> None:
        """_encode_pes for the PEs these keys have here (the ticking keys)."""
        get = self.pes.get
        self._encode_pes(pending, [pe for pe in map(get, keys) if pe is not None])

    def _encode_pes(self, pending: PendingSnapshot, pes: list[Any]) -> None:
        """The states of those of these PEs still pending (they still carry `pending.stamp`: unchanged since the
        barrier, and still here: a PE that expires or moves away is encoded first); each one's stamp is
        cleared, so it is encoded once.

        One loop with everything in locals: a word count's SPU encodes ~45k keys per checkpoint, and a
        function call per step of a key was a third of a key's cost (bench/snapshot_encode.py). A key
        the loop cannot take as it is (a state the bolt makes itself, a key without a bucket, a value
        msgpack refuses) goes the careful way, _encode_pe."""
        stamp = pending.stamp
        if not self.spu.state_is_dict:
            for pe in pes:
                if pe._esault_mark is stamp:
                    self._encode_pe(pending, pe.key, pe)
            return
        read = self.spu.read_state  # None: the state is the PE's __dict__
        pack = self._pack
        entries = pending.entries
        rows = entries.get
        for pe in pes:
            if pe._esault_mark is not stamp:  # encoded already, run since the barrier, or left
                continue
            pe._esault_mark = None
            key = pe.key
            bucket = pe._esault_bucket
            if bucket == NO_BUCKET:  # found, or its error raised, the careful way
                self._encode_pe(pending, key, pe)
                continue
            try:
                entry = pack(key) + pack(pe.__dict__ if read is None else read(pe))
            except Exception:  # what msgpack refuses is reported the careful way
                self._encode_pe(pending, key, pe)
                continue
            row = rows(bucket)
            if row is None:
                entries[bucket] = [entry]
            else:
                row.append(entry)

    def _packed_state(self, pe: Any) -> bytes | None:
        """`pe`'s state packed the fast way (the runtime reads it itself); None: it goes the careful way (a state
        the bolt makes itself, or one msgpack refuses, which that way reports)."""
        if not self.spu.state_is_dict:
            return None
        read = self.spu.read_state  # None: the state is the PE's __dict__
        try:
            return self._pack(pe.__dict__ if read is None else read(pe))
        except Exception:
            return None

    def _encode_now(self, pending: PendingSnapshot, key: Any, pe: Any) -> None:
        """A pending key whose PE is about to run: its state at the barrier, packed now (the batch loop's gate;
        _encode_keys's loop for one key).

        Its time (stats.snapshot_us, published with the next slice's) is sampled: one call in GATE_SAMPLE by
        the thread's CPU clock, counted GATE_SAMPLE times. A call takes ~2 us (a word count meets ~10k of its
        ~45k changed keys here per checkpoint); the wall clock would also count the other threads' turns with
        the GIL (measured: twice the CPU), and reading the CPU clock on every call would add a third to it."""
        calls = self._gate_calls = self._gate_calls + 1
        timed = not calls % GATE_SAMPLE
        if timed:
            started = thread_time()
        pe._esault_mark = None
        bucket = pe._esault_bucket
        state = self._packed_state(pe) if bucket != NO_BUCKET else None
        if state is None:
            self._encode_pe(pending, key, pe)
        else:
            pending.add(bucket, self._pack(key) + state)
        if timed:
            self._snapshot_seconds += (thread_time() - started) * GATE_SAMPLE

    def _encode_pe(self, pending: PendingSnapshot, key: Any, pe: Any) -> None:
        """The careful way for one pending PE (its stamp cleared: encoded once)."""
        pe._esault_mark = None
        state = pe.__dict__ if self.spu.state_is_dict and self.spu.read_state is None else self._state_of(key, pe)
        bucket = pe._esault_bucket  # the key's, kept since its PE was made (datapath/pe_class.py)
        if bucket == NO_BUCKET:
            bucket = bucket_of(key_hash(key))
        self._encode_entry(pending, bucket, key, state)

    def _encode_entry(self, pending: PendingSnapshot, bucket: int, key: Any, state: Any) -> None:
        """One key/state pair into its bucket's row; a state that cannot be encoded is saved as None after
        state_lost() (this snapshot is then refused), a key that cannot be is left out after it."""
        pack = self._packer
        try:
            pending.add(bucket, pack(key) + pack(state))
        except Exception:
            if self._save_key(key) is None:
                return
            if self.save_state(state, key_owner(self.unit_name, key)) is None:
                state = None
            pending.add(bucket, pack(key) + pack(state))

    def _complete(self, pending: PendingSnapshot) -> None:
        self._pending = None
        snapshot = pending.snapshot
        snapshot.rows[self.unit_name] = pending.rows()
        if snapshot.deferred:  # the barrier left without it
            self.spu.submit_snapshot(snapshot)

    def restore(self, epoch: int) -> None:
        """This SPU's key range of checkpoint `epoch` (or its instance's state)."""
        self._pending = None
        if self.spec.per_key:
            states: dict[Any, Any] = {}
            for lo, hi in self.spu.cfg.intervals or ():
                states.update(self.spu.checkpoint_store().read_range(self.unit_name, epoch, lo, hi))
            for key, state in states.items():
                pe = self.pes.create(key)
                if state is not None:
                    pe.restore_state(dict(state))
            self.pes.end_period()  # restored PEs equal the checkpoint: not dirty
            self.stats.pes = len(self.pes)
        else:
            self.spu.restore_instance(self.unit_name, self.pes.single())

    # --- the hot path -----------------------------------------------------

    def process_data(self, msg: DataBatch) -> None:
        keys, values, edges = msg.keys, msg.values, msg.edges
        receiving = self._receiving
        if receiving is not None:
            keys, values, held_k, held_v = receiving.divide(keys, values, key_hash)
            if held_k:  # the held part stays in the batch's trees under edge ids of its own
                own = [self._new_edge() for _ in msg.roots]
                receiving.buffer(HeldBatch(msg.source, held_k, held_v, msg.roots, own), self.job.clock.now())
                edges = [e ^ o for e, o in zip(edges, own)]
        self._run_batch(msg.source, keys, values, msg.roots, edges)
        self._send_acks()

    @staticmethod
    def _new_edge() -> int:
        return getrandbits(64) | 1

    def _run_batch(self, source: str, keys: list[Any], values: list[Any], roots: list[int], edges: list[int]) -> None:
        """Process one batch, flush its emits into the same trees, and record (or hold) its acks."""
        spu = self.spu  # the batch's trees, held anchors and acks are the actor's (its _defer and flush use them)
        spu._roots = roots
        if keys:
            if self.spec.per_key:
                self._process_keyed(source, keys, values)
            else:
                self._process_single(source, keys, values)
                if self._calls_batch_end:
                    self._end_batch()
            n = len(keys)
            self.stats.processed += n
            spu.processed_since_probe += n
        sent, xors = self.router.flush(roots)
        self.count_sent(sent)
        hold, spu._hold = spu._hold, None
        spu._roots = []
        if not roots:
            if hold is not None:
                hold.seal({})
            return
        if hold is not None:
            hold.seal({root: edge ^ x for root, edge, x in zip(roots, edges, xors)})
            return
        acks = spu._acks
        for root, edge, x in zip(roots, edges, xors):
            acks[root] = acks.get(root, 0) ^ edge ^ x

    def _process_keyed(self, source: str, keys: list[Any], values: list[Any]) -> None:
        # A key still pending in a snapshot is encoded before its PE runs: its state at the barrier. Only a PE
        # the loop meets for the first time since the barrier can be one, so the check rides on the stamp
        # check, once per PE and epoch (a PE an older generation gives back is checked as it is woken).
        pending = self._pending
        old_stamp = pending.stamp if pending is not None else _NEVER
        view = self._view
        view.source = source
        pe_table = self.pes
        pes = pe_table.active
        period = pe_table.period  # None unless exactly_once: no PE is stamped with anything else then
        marked = pe_table.marked.append
        for key, value in zip(keys, values):
            try:
                pe = pes[key]
            except KeyError:
                if pending is not None:  # waking stamps it: a pending PE's state at the barrier first
                    woken = self.pes.get(key)  # rare: a PE back from an older generation
                    if woken is not None and woken._esault_mark is old_stamp:
                        self._encode_now(pending, key, woken)
                pe = self._open_pe(key, value, source)
                if pe is None:
                    continue
            except TypeError:  # an unhashable key (a list, say): it has no PE
                self.faults.give_up(key, value, TypeError(f"unhashable key type {type(key).__name__}"), "routing", 1)
                continue
            stamp = pe._esault_mark
            if stamp is not period:  # its first tuple since the checkpoint: dirty (PeManager.mark)
                if stamp is old_stamp:  # pending: its state at the barrier first
                    self._encode_now(pending, key, pe)
                pe._esault_mark = period
                marked(pe)
            view.key = key
            view.value = value
            try:
                pe.process(view)
            except Exception as exc:
                self.faults.retry(pe, view, key, value, source, exc)
        pe_table.used(self.job.clock.now())
        self.sampler.record_many(keys)

    def _process_single(self, source: str, keys: list[Any], values: list[Any]) -> None:
        view = self._view
        view.source = source
        pe = self.pes.single()
        process = pe.process
        for key, value in zip(keys, values):
            view.key = key
            view.value = value
            try:
                process(view)
            except Exception as exc:
                self.faults.retry(pe, view, key, value, source, exc)

    def _end_batch(self) -> None:
        try:
            self.pes.single().on_batch_end()
        except Exception as exc:
            self.stats.user_errors += 1
            self._error_log("topology %r: bolt %r on_batch_end() raised %r", self.job.name, self.unit_name, exc,
                            exc=exc)

    def _open_pe(self, key: Any, value: Any, source: str) -> Any:
        """The key's first tuple: create its PE; on a failing open() the tuple is given up."""
        try:
            return self.pes.wake_or_create(key)
        except Exception as exc:
            self.stats.user_errors += 1
            self.faults.give_up(key, value, exc, "open()", 1)
            return None

    # --- timers -----------------------------------------------------------

    def next_tick(self, now: float) -> float | None:
        """When on_tick() next has work: at once while a snapshot is encoded in slices, moved-in keys settle or
        PEs asked for ticks; else at the next expiry scan if PEs could expire; None with nothing to expire."""
        if self._pending is not None or self.pes.arrived or self.services.ticking:
            return now
        timeout = self.pes.idle_timeout
        if timeout is None or not len(self.pes):
            return None
        return self._last_expiry_scan + min(timeout / 4, 1.0)

    def on_tick(self, now: float) -> None:
        """PE ticks, paused while keys arrive in a hand-off (their held tuples must run before time-driven
        work, a window firing, judges them); every min(idle timeout / 4, 1 s) the expiry scan."""
        pending = self._pending
        if pending is not None:  # one slice per tick: the encoding takes a bounded share of the SPU's time
            self._timed(self._encode_slice, pending)
        if self.pes.arrived and self._receiving is None:  # moved-in keys' PEs, a slice per tick
            self.pes.settle(SETTLE_SLICE_KEYS)
        if self.services.ticking and self._receiving is None:
            if self._pending is not None:  # a tick may change the ticking PEs: their states at the barrier first
                self._timed(self._encode_keys, self._pending, list(self.services.ticking))
            self.ticks.tick(now)
        timeout = self.pes.idle_timeout
        if timeout is None or now - self._last_expiry_scan < min(timeout / 4, 1.0):
            return
        self._last_expiry_scan = now
        if self._pending is not None and self.services.ticking:  # keep_ticking stamps them: barrier states first
            self._timed(self._encode_keys, self._pending, list(self.services.ticking))
        self.ticks.keep_ticking(now)
        expired = self.pes.idle(now)
        if not expired:
            return
        pending = self._pending
        if pending is not None:  # their states at the barrier, before they are parked
            self._timed(self._encode_expired, pending, expired)
        for key, pe in expired:
            try:
                pe.on_expire()
            except Exception as exc:
                self._error_log("topology %r: bolt %r on_expire() raised %r (key %r)",
                                self.job.name, self.unit_name, exc, key, exc=exc)
        self.parked.park(expired)
        self.stats.pes = len(self.pes)
        self.flush()

    def _encode_expired(self, pending: PendingSnapshot, expired: list[tuple[Any, Any]]) -> None:
        for key, pe in expired:
            if pe._esault_mark is pending.stamp:
                self._encode_pe(pending, key, pe)

    # --- key hand-off (docs/PROTOCOLS.md) ----------------------------------

    def routes_installed(self) -> None:
        if self._retire_wait is not None:
            self._retire_wait.downstream_changed(self.router.downstream_spus())
            self._retired_if_all_saw()
        if self._receiving is not None:  # a downstream unit's SPUs changed while this receives keys
            self._receiving.downstream_changed(self.router.downstream_spus())
            self._release_ready()

    def peers_lost(self, msg: PeersLost) -> None:
        """SPUs died with their worker mid hand-off (no exactly_once): a lost giver's keys and every giver
        whose marker only a lost downstream SPU still owed go live now (migration/handoff.py)."""
        receiving = self._receiving
        if receiving is not None and receiving.reconfig_id == msg.reconfig_id:
            receiving.peers_lost(msg.spus)
            self._release_ready()

    def cancel(self, reconfig_id: int) -> None:
        """Called off before the switch: no marker came and no moved key was held, so forgetting is all."""
        if self._receiving is not None and self._receiving.reconfig_id == reconfig_id:
            self._receiving = None

    def give(self, giving: GiverHandoff, mailboxes: dict[int, Any]) -> None:
        """Gives: every upstream SPU switched: the moved keys' state is final; each receiver gets its ranges'."""
        if giving.retire and not self.spec.per_key and self.job.exactly_once:
            self._retire(giving.reconfig_id)
            return
        self.finish_pending()  # the moved keys' states at the barrier are this SPU's to checkpoint
        self.flush()
        receivers = {r: mailboxes[r] for r in giving.by_receiver() if r in mailboxes}
        # In band behind this SPU's last output of the moved keys: each downstream SPU tells the receivers.
        self.router.broadcast(ForwardMarker(giving.reconfig_id, self.spu_id, receivers))
        moved = 0
        for receiver_id, ranges in giving.by_receiver().items():
            states: list[tuple[Any, bytes]] = []
            if self.spec.per_key:
                for lo, hi in ranges:
                    self._encode_moving(self.pes.take_range(lo, hi), states)
                    states.extend(self.pes.take_arrived(lo, hi))  # moved in, not used since: as they came
                    states.extend(self.parked.take(lo, hi))
            moved += len(states)
            receiver = mailboxes.get(receiver_id)
            if receiver is not None:
                self._send_states(receiver, giving.reconfig_id, states)
        self.stats.pes = len(self.pes)
        self.sampler.clear()
        self.unit_ref.tell(HandoffFinished(giving.reconfig_id, self.spu_id, "giver", moved, 0.0))

    def _retire(self, reconfig_id: int) -> None:
        """A non-keyed SPU retires (migration/retirement.py): close() now, its output flushed, then a marker
        naming this SPU behind it on every channel; done once every downstream SPU has answered."""
        self.finish_pending()
        self.spu.close_pes()
        self._retire_wait = RetireWait(reconfig_id, self.router.downstream_spus())
        # Its actor ref, not its address: a downstream SPU on this worker gets the marker without the wire's
        # decoding (an Address cannot be told); the codec names a registered ref by address for the others.
        self.router.broadcast(ForwardMarker(reconfig_id, self.spu_id, {self.spu_id: self.spu.actor_ref}))
        self._retired_if_all_saw()

    def _retired_if_all_saw(self) -> None:
        wait = self._retire_wait
        if wait is not None and wait.done:
            self._retire_wait = None
            self.unit_ref.tell(HandoffFinished(wait.reconfig_id, self.spu_id, "giver", 0, 0.0))

    def _encode_moving(self, pes: list[tuple[Any, Any]], out: list[tuple[Any, bytes]]) -> None:
        """Each moving PE's (key, encoded state) into `out`, the fast way where it can (a hand-off's time is the
        moved keys' pause)."""
        for key, pe in pes:
            state = self._packed_state(pe)
            out.append((key, self._snapshot(key, pe) if state is None else state))

    def _send_states(self, receiver: Any, reconfig_id: int, states: list[tuple[Any, bytes]]) -> None:
        """The moved keys' states in chunks under the frame cap; the last chunk says the hand-off is done."""
        chunks = chunk_states(states, handoff.HANDOFF_CHUNK_BYTES)
        for i, chunk in enumerate(chunks):
            message = StateHandoff(reconfig_id, self.spu_id, pack_states(chunk), i == len(chunks) - 1)
            try:
                receiver.tell(message)
            except UNREACHABLE as exc:  # its worker died: the unit goes on without it (SpusLost) or rolls back
                log.warning("topology %r: %s SPU %d: the receiver of a hand-off is unreachable (%r); its %d key(s) "
                            "are not sent", self.job.name, self.unit_name, self.spu_id, exc, len(states))
                return
            except SerializationError as exc:  # one key's state alone is over the frame cap
                self.state_lost(UnsaveableState(
                    f"bolt {self.unit_name!r} cannot move the state of key(s) {[k for k, _ in chunk][:5]} ({exc}); "
                    "keep a key's state under the transport's max_frame_bytes"))
                receiver.tell(StateHandoff(reconfig_id, self.spu_id, pack_states([(k, encode(None)) for k, _ in chunk]),
                                           message.last))

    def _snapshot(self, key: Any, pe: Any) -> bytes:
        """A PE's state, encoded to move with its key (encode(None) if it cannot be: see state_lost())."""
        return self._encode_state(key, self._state_of(key, pe))

    def on_prepare_receive(self, msg: PrepareReceive) -> None:
        self._receiving = ReceiverHandoff(msg.reconfig_id, msg.ranges, self.router.downstream_spus())
        if self.unit_ref is not None:
            self.unit_ref.tell(Prepared(msg.reconfig_id, self.spu_id, "receiver"))
        for giver, sender in self._early.seen.pop(msg.reconfig_id, ()):
            self._receiving.marker_seen(giver, sender)
        early = self._early.handoffs.pop(msg.reconfig_id, None)
        for chunk in early or ():
            self._on_state(chunk)
        self._release_ready()

    def _on_state(self, msg: StateHandoff) -> None:
        receiving = self._receiving
        if receiving is None or receiving.reconfig_id != msg.reconfig_id:
            if not self._early.keep_handoff(msg):
                log.warning("topology %r: bolt %r SPU %d dropped a late hand-off chunk of SPU %d: its part of that "
                            "reconfiguration is over", self.job.name, self.unit_name, self.spu_id, msg.giver_id)
            return
        if msg.giver_id not in receiving.pending_givers:  # a lost giver's chunk after its keys went live
            log.warning("topology %r: bolt %r SPU %d dropped a late hand-off chunk of lost SPU %d: its keys "
                        "went on without it", self.job.name, self.unit_name, self.spu_id, msg.giver_id)
            return
        try:
            states = unpack_states(msg.states)
        except ValueError as exc:
            self.state_lost(UnsaveableState(f"bolt {self.unit_name!r} SPU {self.spu_id} cannot read a hand-off "
                                            f"from SPU {msg.giver_id}: {exc}; its keys restart empty"))
            states = {}
        if self._lazy_install:
            self.pes.arrived.update(states)  # the PEs are made on first use or between batches (on_tick)
        else:
            for key, blob in states.items():
                self._install_moved(key, blob)
        receiving.moved += len(states)
        self.pes.used(self.job.clock.now())
        if msg.last:  # that giver's keys stay held until its last chunk and the downstream answers
            receiving.state_done(msg.giver_id)
            self._release_ready()

    def _install_moved(self, key: Any, blob: bytes) -> Any:
        """The PE of a key that moved in, its state restored from the giver's bytes (PeManager.install).
        A state that cannot be restored leaves the PE as its constructor and open() made it; a PE that cannot
        be made is None (its key's next tuple makes it again, or meets open()'s error); both logged."""
        pe = None
        try:
            pe = self.pes.create(key)
            state = decode(blob)
            if state is not None:
                pe.restore_state(dict(state))
        except Exception as exc:
            log.error("topology %r: bolt %r could not restore state of key %r: %r",
                      self.job.name, self.unit_name, key, exc)
        return pe

    def _on_marker_seen(self, msg: MarkerSeen) -> None:
        if msg.giver == self.spu_id:  # an answer to this SPU's own retire marker
            if self._retire_wait is not None:
                self._retire_wait.seen(msg.reconfig_id, msg.sender)
                self._retired_if_all_saw()
            return
        receiving = self._receiving
        if receiving is None or receiving.reconfig_id != msg.reconfig_id:
            self._early.keep_seen(msg.reconfig_id, msg.giver, msg.sender)
            return
        receiving.marker_seen(msg.giver, msg.sender)
        self._release_ready()

    def _release_ready(self) -> None:
        """Run what is held for each giver whose state is in and whose downstream all saw its marker."""
        receiving = self._receiving
        if receiving is None:
            return
        now = self.job.clock.now()
        for giver in receiving.ready_givers():
            for held in receiving.release(giver, now, key_hash, self._new_edge):
                self._run_batch(held.source, held.keys, held.values, held.roots, held.edges)
        self.stats.pes = len(self.pes)
        self.flush()
        if not receiving.done:
            return
        self._receiving = None
        self._early.forget(receiving.reconfig_id)  # what comes for it from now on is late
        self.unit_ref.tell(
            HandoffFinished(receiving.reconfig_id, self.spu_id, "receiver", receiving.moved, receiving.paused)
        )
