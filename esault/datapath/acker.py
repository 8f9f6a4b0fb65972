"""AckServerActor: the paper's ack server, Storm's XOR tree tracking (reliability/ack_tracker).

Tells each spout SPU the outcome of the trees it rooted, in batches, writes
the tuples bolts gave up on to the job's dead-letter file, and leases the
blocks of a shared source's space (esault.reliability.shared_ranges) to the
spout SPUs that ask: it already knows every spout SPU's mailbox.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pykka

from esault.metrics import registry as metrics
from esault.reliability.ack_tracker import AckTracker, TreeOutcome
from esault.reliability.shared_ranges import STALE, RangeLeases
from esault.datapath.context import JobContext, log
from esault.messages.acking import (
    AckFail,
    AckInit,
    AckUpdate,
    DeadLettered,
    FailPending,
    GetPending,
    RangeGrant,
    RangeRequest,
    RegisterOwner,
    SpoutProgress,
    TreesDone,
)
from esault.messages.data import Tick
from esault.thread_names import name_os_thread


class AckServerActor(pykka.ThreadingActor):
    """One per job, in the driver process."""

    def __init__(self, job: JobContext) -> None:
        super().__init__()
        self.job = job
        self.tracker = AckTracker(job.clock, job.config.message_timeout)
        self.owners: dict[int, Any] = {}
        self.ranges = RangeLeases()
        metrics.init_unknown_message_series("AckServerActor")

    def on_start(self) -> None:
        name_os_thread("acker")

    def on_receive(self, message: Any) -> Any:
        try:
            kind = type(message)
            if kind is AckUpdate:
                self._send(self.tracker.update_many(message.deltas.items()))
            elif kind is AckInit:
                start = self.tracker.start
                owner = message.owner
                out = [o for o in (start(root, owner, xor) for root, xor in message.roots) if o is not None]
                self._send(out)
            elif kind is AckFail:
                outcome = self.tracker.fail(message.root, message.reason)
                if outcome is not None:
                    self._send([outcome])
            elif kind is Tick:
                self._send(self.tracker.expire())
            elif kind is FailPending:
                self._send(self.tracker.fail_all(message.reason))
            elif kind is DeadLettered:
                self._dead_letter(message)
            elif kind is SpoutProgress:
                self.job.spout_progress[message.spu_id] = message
            elif kind is RangeRequest:
                self._lease(message)
            elif kind is RegisterOwner:
                self.owners[message.owner] = message.mailbox
            elif kind is GetPending:
                return self.tracker.pending
            else:
                metrics.count_unknown_message("AckServerActor")
        except Exception:
            log.exception("ack server failed handling %s", type(message).__name__)
        return None

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
        except (pykka.ActorDeadError, LookupError):  # stopping, or its worker died: a rollback re-leases it
            self.owners.pop(msg.owner, None)

    def _dead_letter(self, msg: DeadLettered) -> None:
        """A bolt gave a tuple up: the job's dead-letter file (in the driver) records it."""
        if self.job.dead_letters is not None:
            self.job.dead_letters.write(topology=self.job.name, unit=msg.unit, msg_id=msg.msg_id, key=msg.key,
                                        value=msg.value, error=msg.error, attempts=msg.attempts)

    def _send(self, outcomes: list[TreeOutcome]) -> None:
        if not outcomes:
            return
        by_owner: dict[int, list] = defaultdict(list)
        for o in outcomes:
            by_owner[o.owner].append((o.root, o.ok, o.reason, o.latency))
        for owner, batch in by_owner.items():
            mailbox = self.owners.get(owner)
            if mailbox is not None:
                try:
                    mailbox.tell(TreesDone(batch))
                except pykka.ActorDeadError:  # the job is stopping: its spouts went first
                    self.owners.pop(owner, None)
                except LookupError:  # its worker died: nobody waits for these trees; the other owners still do
                    self.owners.pop(owner, None)
                    log.warning("ack server: spout SPU %d is unreachable (its worker died); %d tree outcome(s) "
                                "for it dropped", owner, len(batch))
