"""Anchors from Bolt.defer(): an input is acked only when its anchor is, from any thread.

Delivery is tracked per batch, so an anchor holds its batch's acks
(`BatchHold`) or, in a bolt chained into a spout, an edge of the spout
round's tree of its own (`EdgeAnchor`).
"""

from __future__ import annotations

import threading
from typing import Any



class BatchHold:
    """The acks of one input batch, withheld until every anchor deferred while processing it settles.

    Thread-safe: anchors settle from any thread (a sink's commit thread).
    One fail() fails the batch's trees (they are replayed from the spout);
    otherwise the acks leave once the batch is sealed and every anchor acked.
    """

    __slots__ = ("_acks", "_roots", "_lock", "_open", "_deltas", "_done")

    def __init__(self, acks: Any, roots: list[int]) -> None:
        self._acks = acks  # the job's AckRouter, None when nothing is tracked
        self._roots = roots
        self._lock = threading.Lock()
        self._open = 0
        self._deltas: dict[int, int] | None = None
        self._done = False

    def anchor(self) -> DeferredAnchor:
        with self._lock:
            self._open += 1
        return DeferredAnchor(self)

    def seal(self, deltas: dict[int, int]) -> None:
        """The batch is processed: these acks leave once no anchor is open."""
        with self._lock:
            self._deltas = deltas
            ready = self._open == 0 and not self._done
            self._done = self._done or ready
        if ready:
            self._send_acks()

    def settle(self, ok: bool, reason: str) -> None:
        with self._lock:
            if self._done:
                return
            if ok:
                self._open -= 1
                if self._open or self._deltas is None:
                    return
            self._done = True
        if ok:
            self._send_acks()
        elif self._acks is not None:
            for root in self._roots:
                self._acks.fail(root, reason or "failed by a deferred anchor")

    def _send_acks(self) -> None:
        if self._deltas and self._acks is not None:
            self._acks.update(self._deltas)


class DeferredAnchor:
    """Returned by Bolt.defer(): its input is acked when this is (from any thread), once."""

    __slots__ = ("_hold", "_settled")

    def __init__(self, hold: BatchHold) -> None:
        self._hold = hold
        self._settled = False

    def ack(self) -> None:
        self._settle(True, "")

    def fail(self, reason: str) -> None:
        self._settle(False, reason)

    def _settle(self, ok: bool, reason: str) -> None:
        if self._settled:
            return
        self._settled = True
        self._hold.settle(ok, reason)


class EdgeAnchor:
    """An edge of a spout round's tree, XORed into the tree's start; acking it acks that edge, once."""

    __slots__ = ("_acks", "_root", "_edge", "_lock", "_settled")

    def __init__(self, acks: Any, root: int, edge: int) -> None:
        self._acks = acks  # the job's AckRouter
        self._root = root
        self._edge = edge
        self._lock = threading.Lock()
        self._settled = False

    def ack(self) -> None:
        if self._settle():
            self._acks.update({self._root: self._edge})

    def fail(self, reason: str) -> None:
        if self._settle():
            self._acks.fail(self._root, reason or "failed by a deferred anchor")

    def _settle(self) -> bool:
        with self._lock:
            first, self._settled = not self._settled, True
        return first and self._acks is not None


class NoAnchor:
    """defer() when nothing is tracked (acking off): settling it does nothing."""

    __slots__ = ()

    def ack(self) -> None:
        pass

    def fail(self, reason: str) -> None:
        pass
