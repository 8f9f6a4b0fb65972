"""Cyclic-GC policy of the processes that run SPUs: fewer young collections, and no full walks of old objects.

Fewer generation-0 collections (enter/leave, while jobs run): every tuple in
flight is a GC-tracked container, so with Python's default threshold (700
allocations) the collector walks the in-flight batches over and over:
bench/throughput.py measured 17-28% of wall time in GC. Reference counting
still frees tuples at once; only cycle detection runs less often. In a driver
the previous thresholds come back when the last job stops; a worker process
(esault's own) keeps them.

Frozen old objects (GcFreezer, in worker processes): a worker's heap is mostly
long-lived (PEs and their state, routing tables, actors), and CPython 3.11
traverses all of it at every full (generation 2) collection: about 50 ms for
~100k PEs, every few seconds under load, 5-10% of the word count's CPU and a
pause in every tuple's latency. Every `freeze_every` seconds the young
generations are collected and what survived is frozen (gc.freeze), so the
collector sees only younger objects; every `thaw_every` seconds everything is
thawed (gc.unfreeze) and the next full collection reclaims cycles that became
garbage while frozen: memory held by such cycles is bounded by that period.
When SPUs stop (a job's end, a merge's retired SPU, a rollback), their PE
tables became garbage at once, in cycles (a PE refers to its SPU): the worker
asks for a release (`release_soon()`), and the next step thaws and runs one
full collection, so a worker running job after job does not hold each one's
state for five minutes (measured: +17 MB per word-count job on each worker).
A driver is the user's process: it is not frozen.
"""

from __future__ import annotations

import gc
import threading
from typing import Any

_lock = threading.Lock()
_active = 0
_saved: tuple[int, int, int] | None = None


def enter(gen0_threshold: int | None) -> None:
    global _active, _saved
    if gen0_threshold is None:
        return
    with _lock:
        if _active == 0:
            _saved = gc.get_threshold()
            gc.set_threshold(gen0_threshold, _saved[1], _saved[2])
        _active += 1


def leave(gen0_threshold: int | None) -> None:
    global _active, _saved
    if gen0_threshold is None:
        return
    with _lock:
        _active -= 1
        if _active == 0 and _saved is not None:
            gc.set_threshold(*_saved)
            _saved = None


class GcFreezer:
    """Call step(now) often (the worker's heartbeat loop does, every 0.2 s); it acts at most once per call."""

    def __init__(self, now: float, freeze_every: float = 1.0, thaw_every: float = 300.0, collector: Any = gc) -> None:
        if not 0 < freeze_every < thaw_every:
            raise ValueError(f"need 0 < freeze_every ({freeze_every}) < thaw_every ({thaw_every})")
        self.freeze_every = freeze_every
        self.thaw_every = thaw_every
        self._gc = collector
        self._frozen_at = now
        self._thawed_at = now
        self._release = threading.Event()

    def release_soon(self) -> None:
        """Objects just became garbage in bulk (SPUs stopped): the next step thaws and collects in full. Any
        thread may call it; calls before one step make one release."""
        self._release.set()

    def step(self, now: float) -> str | None:
        """What this call did: "release", "thaw", "freeze" or None."""
        if self._release.is_set():
            self._release.clear()
            self._gc.unfreeze()
            self._gc.collect(2)
            self._thawed_at = self._frozen_at = now
            return "release"
        if now - self._thawed_at >= self.thaw_every:
            self._gc.unfreeze()
            self._thawed_at = self._frozen_at = now
            return "thaw"
        if now - self._frozen_at >= self.freeze_every:
            self._gc.collect(1)  # young garbage cycles go now, not into the frozen set
            self._gc.freeze()
            self._frozen_at = now
            return "freeze"
        return None
