"""Alignment: the barrier bookkeeping of one SPU for one epoch, a pure class.

An SPU receives batches from several upstream SPUs over FIFO channels. When
barrier *e* arrives on a channel, everything after it on that channel belongs
to epoch *e*+1, so the channel is held (its messages buffered, in order) until
barrier *e* arrived on every expected channel; then the SPU snapshots and the
held messages run. Barriers may overtake the coordinator's word of which
channels to expect (different senders), so `expected` may be set late.
Checkpoints expect every upstream SPU; a split's hand-off the ones sending to
the moved range (GiverHandoff is the same idea without holding).
"""

from __future__ import annotations

from typing import Any, Iterable


class Alignment:
    """One epoch's alignment. O(1) per barrier and per held message."""

    def __init__(self, epoch: int, expected: Iterable[int] | None = None) -> None:
        self.epoch = epoch
        self.expected: frozenset[int] | None = None if expected is None else frozenset(expected)
        self.arrived: set[int] = set()
        self.ended: set[int] = set()  # senders whose barrier said their input ended
        self.held: list[Any] = []  # messages of held channels, in arrival order

    def expect(self, upstream: Iterable[int]) -> None:
        """The coordinator says which upstream SPUs send this epoch's barrier."""
        self.expected = frozenset(upstream)

    def barrier(self, sender: int, end_of_input: bool = False) -> None:
        self.arrived.add(sender)
        if end_of_input:
            self.ended.add(sender)

    @property
    def input_ended(self) -> bool:
        """Every expected barrier is in and each said its sender's input ended: none follows, on any channel."""
        return self.complete and bool(self.expected) and self.expected <= self.ended  # type: ignore[operator]

    def holds(self, sender: int) -> bool:
        """True if messages from `sender` must wait: its barrier came, others have not."""
        return sender in self.arrived

    def hold(self, message: Any) -> None:
        self.held.append(message)

    @property
    def complete(self) -> bool:
        """Every expected barrier is in (unknown expectations are never complete)."""
        return self.expected is not None and self.expected <= self.arrived

    @property
    def missing(self) -> frozenset[int]:
        return frozenset() if self.expected is None else self.expected - self.arrived

    def release(self) -> list[Any]:
        """The held messages, in arrival order; the alignment holds nothing afterwards."""
        held, self.held = self.held, []
        return held
