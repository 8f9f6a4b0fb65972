"""AckRouter: every ack goes to the spout SPU that owns its tree, not through the driver.

A spout SPU tracks the trees it roots (esault.datapath.spout_spu), and a root
names its owner (esault.reliability.roots). The spout SPUs of this process
register their mailbox here; one elsewhere is found once: the first ack for
it goes to the ack server, which relays it, and a FindOwner asks where that
owner is (the answer, OwnerAt, reaches this process's host, which calls
learn()). From then on its acks travel in one frame to its worker. An answer
that was lost (the driver's send to this worker failed) is asked for again
while acks for that owner still need the relay, at most every ASK_AGAIN
seconds, so a worker does not relay an owner's acks for the rest of the job.

One per job per process, used by that job's SPU threads and by anchors settled
on other threads (a sink's commit thread): dict reads and writes are atomic
under the GIL, and a FindOwner sent twice is harmless.
"""

from __future__ import annotations

from typing import Any

import pykka

from esault.messages.acking import AckFail, AckUpdate, FindOwner
from esault.reliability.roots import OWNER_MASK, by_owner

ASK_AGAIN = 5.0
"""Seconds before an owner still unknown here is asked for again (its OwnerAt was lost, or it is gone)."""


class _Gone:
    """The mailbox of an owner that stopped or whose worker died: its trees went with it."""

    __slots__ = ()

    def tell(self, message: Any) -> None:
        pass


GONE = _Gone()

UNREACHABLE = (pykka.ActorDeadError, LookupError, ConnectionError)
"""What telling a stopped actor, or one on a dead worker, raises."""


def tell_owner(owners: dict[int, Any], owner: int, message: Any) -> bool | None:
    """Tell the owner's mailbox in `owners`: True if told, False if it is gone (marked GONE on the first failed
    tell: its trees went with it, so its acks are dropped), None if `owners` does not know it."""
    mailbox = owners.get(owner)
    if mailbox is None:
        return None
    if mailbox is GONE:
        return False
    try:
        mailbox.tell(message)
    except UNREACHABLE:
        owners[owner] = GONE
        return False
    return True


class AckRouter:
    """Sends AckUpdate and AckFail to the owners of their roots: directly when known, else via the ack server."""

    __slots__ = ("_job", "owners", "_asked", "relayed")

    def __init__(self, job: Any) -> None:
        self._job = job  # read at send time: the ack server's mailbox and this process's name are set after
        self.owners: dict[int, Any] = {}
        """owner key -> the spout SPU's mailbox (GONE once unreachable)."""
        self._asked: dict[int, float] = {}  # owner key -> when FindOwner last asked for it
        self.relayed = 0
        """Acks this process sent through the ack server (an owner not known yet): tests and docs read it."""

    def register(self, owner: int, mailbox: Any) -> None:
        """A spout SPU of this process: its acks are tells to its own mailbox."""
        self.owners[owner] = mailbox

    def forget(self, owner: int, mailbox: Any) -> None:
        """A spout SPU of this process stopped: acks still on their way for its trees are dropped."""
        if self.owners.get(owner) is mailbox:
            self.owners[owner] = GONE

    def learn(self, owner: int, mailbox: Any) -> None:
        """The ack server said where an owner is (OwnerAt); a registration here, or its loss, stays."""
        self.owners.setdefault(owner, mailbox)

    def update(self, deltas: dict[int, int]) -> None:
        """Send each root's XOR delta to its owner: one AckUpdate per owner."""
        if len(deltas) == 1:
            for root in deltas:
                self._tell(root & OWNER_MASK, AckUpdate(deltas))
            return
        for owner, part in by_owner(deltas).items():
            self._tell(owner, AckUpdate(part))

    def fail(self, root: int, reason: str) -> None:
        self._tell(root & OWNER_MASK, AckFail(root, reason))

    def _tell(self, owner: int, message: Any) -> None:
        if tell_owner(self.owners, owner, message) is not None:
            return
        relay = self._job.acker
        if relay is None:
            return
        self.relayed += 1
        relay.tell(message)
        process = self._job.process
        if not process:  # the driver's own SPUs: the ack server registers its owners here itself
            return
        now = self._job.clock.now()
        asked = self._asked.get(owner)
        if asked is None or now - asked >= ASK_AGAIN:
            self._asked[owner] = now
            relay.tell(FindOwner(owner, process))
