"""AckServerActor: the job's reliability desk in the driver; trees are tracked by their spout SPUs.

Each spout SPU tracks the trees it roots (Storm's XOR tracking,
reliability/ack_tracker) and the SPUs that process its batches ack it
directly (esault.datapath.ack_router), so no round's start, ack or outcome
waits on the driver. What stays here: where each spout SPU is (RegisterOwner),
told to a worker that asks (FindOwner -> OwnerAt) and used to relay the few
acks sent before the answer came; failing every spout SPU's trees at once
when a worker dies or the job rolls back (FailPending); the spouts' progress;
the dead-letter file; and the blocks of a shared source's space
(esault.reliability.shared_ranges), leased to the spout SPUs that ask.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import pykka

from esault.metrics import registry as metrics
from esault.reliability.roots import by_owner, owner_key, owner_of
from esault.reliability.shared_ranges import STALE, RangeLeases
from esault.datapath.ack_router import GONE, UNREACHABLE, tell_owner
from esault.datapath.context import JobContext, log
from esault.messages.acking import (
    AckFail,
    AckUpdate,
    DeadLettered,
    FailPending,
    FindOwner,
    OwnerAt,
    OwnerGone,
    RangeGrant,
    RangeRequest,
    RegisterOwner,
    SpoutProgress,
)
from esault.messages.data import Tick
from esault.thread_names import name_os_thread

MAX_HELD = 100_000
"""Relayed acks kept for owners that have not registered yet (a race at a spout's start); more are dropped
(their trees time out and replay, or the rollback covers them), so a flood cannot grow the driver."""


class AckServerActor(pykka.ThreadingActor):
    """One per job, in the driver process."""

    def __init__(self, job: JobContext) -> None:
        super().__init__()
        self.job = job
        self.owners: dict[int, Any] = {}
        """spout SPU id -> its mailbox (range grants, FailPending)."""
        self.routes: dict[int, Any] = {}
        """owner key (esault.reliability.roots) -> the mailbox its acks go to; GONE once it is unreachable."""
        self.ranges = RangeLeases()
        self._held: dict[int, deque[tuple[float, Any]]] = {}  # owner key -> (deadline, ack) until it registers
        self._asked: dict[int, set[str]] = {}  # owner key -> processes that asked where it is before it registered
        self.relayed = 0
        """Acks (one per owner they name) relayed because an SPU did not know the owner yet: a few per owner and
        process, at its start. Counted once when received, however long one waits for its owner."""
        self.dropped = 0
        """Relayed acks dropped: their owner was gone, never registered within message_timeout, or MAX_HELD."""
        metrics.init_unknown_message_series("AckServerActor")

    def on_start(self) -> None:
        name_os_thread("acker")

    def on_receive(self, message: Any) -> Any:
        try:
            kind = type(message)
            if kind is AckUpdate:
                for key, part in by_owner(message.deltas).items():
                    self.relayed += 1
                    self._relay(key, AckUpdate(part))
            elif kind is AckFail:
                self.relayed += 1
                self._relay(owner_of(message.root), message)
            elif kind is FindOwner:
                self._find(message)
            elif kind is Tick:
                self._expire_held()
            elif kind is FailPending:
                self._fail_pending(message)
            elif kind is DeadLettered:
                self._dead_letter(message)
            elif kind is SpoutProgress:
                self.job.spout_progress[message.spu_id] = message
            elif kind is RangeRequest:
                self._lease(message)
            elif kind is RegisterOwner:
                self._register(message)
            elif kind is OwnerGone:
                self._gone(message)
            else:
                metrics.count_unknown_message("AckServerActor")
        except Exception:
            log.exception("ack server failed handling %s", type(message).__name__)
        return None

    # --- where spout SPUs are --------------------------------------------------

    def _register(self, msg: RegisterOwner) -> None:
        key = owner_key(msg.owner)
        self.owners[msg.owner] = msg.mailbox
        self.routes[key] = msg.mailbox
        if self.job.process is None:  # the driver's own SPUs ack it directly too
            self.job.acks.learn(key, msg.mailbox)
        for process in self._asked.pop(key, ()):
            self._answer(key, process)
        held = self._held.pop(key, None)
        if held:
            if not self._held:
                self._ticking(False)
            for _, ack in held:
                self._relay(key, ack)

    def _gone(self, msg: OwnerGone) -> None:
        """A spout SPU stopped (it says so as it stops): forget it, so a rollback's FailPending and the acks
        still on their way for its trees are not sent to a mailbox nothing reads. A mailbox other than the one
        registered (a later SPU's, or none) leaves the registration as it is. (A registered owner has no held
        acks and no open question: registering answered both.)"""
        if msg.owner in self.owners and self.owners[msg.owner] == msg.mailbox:
            self._forget(msg.owner)

    def _forget(self, spu_id: int) -> None:
        """A spout SPU that stopped or cannot be reached: no FailPending or grant goes to it, its acks are
        dropped."""
        self.owners.pop(spu_id, None)
        self.routes[owner_key(spu_id)] = GONE

    def _find(self, msg: FindOwner) -> None:
        key = msg.owner
        if key in self.routes:
            self._answer(key, msg.process)
        else:
            self._asked.setdefault(key, set()).add(msg.process)

    def _answer(self, key: int, process: str) -> None:
        mailbox = self.routes.get(key)
        if mailbox is None or mailbox is GONE:
            return  # gone: the worker keeps relaying, and the acks are dropped here
        host = self.job.worker_host
        if host is None:
            return
        try:
            host(process).tell(OwnerAt(self.job.name, key, mailbox))
        except Exception as exc:  # noqa: BLE001 - that worker is gone, or the owner cannot be named to it
            log.debug("ack server: where spout SPU %d is was not told to %s: %r", key, process, exc)

    # --- relaying ----------------------------------------------------------------

    def _relay(self, key: int, ack: Any) -> None:
        told = tell_owner(self.routes, key, ack)
        if told is False:
            self.dropped += 1
        elif told is None:  # not registered yet: held until it does, or message_timeout
            held = sum(map(len, self._held.values()))  # a few, at a spout's start
            if held >= MAX_HELD:
                self.dropped += 1
                return
            if not held:  # ticks only while something waits: an idle ack server wakes for nothing
                self._ticking(True)
            deadline = self.job.clock.now() + self.job.config.message_timeout
            self._held.setdefault(key, deque()).append((deadline, ack))

    def _expire_held(self) -> None:
        if not self._held:
            return
        now = self.job.clock.now()
        for key in list(self._held):
            held = self._held[key]
            while held and held[0][0] <= now:
                held.popleft()
                self.dropped += 1
            if not held:
                del self._held[key]
        if not self._held:
            self._ticking(False)

    def _ticking(self, on: bool) -> None:
        ticker = self.job.ticker
        if ticker is not None:
            (ticker.subscribe if on else ticker.unsubscribe)(self.actor_ref)

    def _fail_pending(self, msg: FailPending) -> None:
        """Every spout SPU fails the trees it has in flight (a worker died, or the job rolled back)."""
        for spu_id, mailbox in list(self.owners.items()):
            try:
                mailbox.tell(msg)
            except UNREACHABLE:  # stopped, or on the dead worker
                self._forget(spu_id)

    def _lease(self, msg: RangeRequest) -> None:
        """The next block of the unit's shared space to the SPU that asked, or why not."""
        mailbox = self.owners.get(msg.owner)
        if mailbox is None:
            log.warning("ack server: range request from spout SPU %d, which never registered; ignored", msg.owner)
            return
        try:
            if msg.unit not in {u.name for u in self.job.topology.units if u.is_spout}:
                raise ValueError(f"range request names {msg.unit!r:.60}, which is no spout of topology "
                                 f"{self.job.name!r}")
            got = self.ranges.lease(msg.unit, msg.generation, msg.size, msg.done, msg.block, msg.owner,
                                    msg.replaces)
        except ValueError as exc:
            reply = RangeGrant(msg.generation, None, None, str(exc))
        else:
            if got is STALE:
                return  # a discarded instance's: the new ones have their own pool
            start, end = got if got is not None else (None, None)
            reply = RangeGrant(msg.generation, start, end)
        try:
            mailbox.tell(reply)
        except UNREACHABLE:  # stopping, or its worker died: a rollback re-leases it
            self._forget(msg.owner)

    def _dead_letter(self, msg: DeadLettered) -> None:
        """A bolt gave a tuple up: the job's dead-letter file (in the driver) records it."""
        if self.job.dead_letters is not None:
            self.job.dead_letters.write(topology=self.job.name, unit=msg.unit, msg_id=msg.msg_id, key=msg.key,
                                        value=msg.value, error=msg.error, attempts=msg.attempts)
