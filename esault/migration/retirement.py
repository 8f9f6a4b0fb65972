"""A retiring SPU that is not key grouped, under exactly_once: its close() output must reach every downstream
SPU ahead of the next checkpoint's barrier (docs/PROTOCOLS.md, "Non-keyed bolts").

The SPU runs close() once every upstream SPU switched (nothing more can reach it), flushes, then sends a
ForwardMarker naming itself down every output channel, in band behind that output. Each downstream SPU
answers MarkerSeen as the marker enters its mailbox's data lane, so the output is ahead there of anything
that comes later, a barrier included. Only when every downstream SPU answered does the SPU tell its unit
its part is done; the operation, and so the next checkpoint, waits for that.
"""

from __future__ import annotations

from typing import Iterable


class RetireWait:
    """Which downstream SPUs have not yet answered a retiring SPU's marker. Pure: the SPU feeds it."""

    __slots__ = ("reconfig_id", "waiting")

    def __init__(self, reconfig_id: int, downstream: Iterable[int]) -> None:
        self.reconfig_id = reconfig_id
        self.waiting = set(downstream)

    def seen(self, reconfig_id: int, sender: int) -> None:
        """`sender` has the marker of reconfiguration `reconfig_id` in its mailbox (another one's answer: ignored)."""
        if reconfig_id == self.reconfig_id:
            self.waiting.discard(sender)

    def downstream_changed(self, spus: Iterable[int]) -> None:
        """This SPU's routes changed while it waits: an SPU no longer downstream cannot answer and was sent
        nothing more; one that joined got none of the output (the output is all sent), so it owes nothing."""
        self.waiting &= set(spus)

    @property
    def done(self) -> bool:
        return not self.waiting
