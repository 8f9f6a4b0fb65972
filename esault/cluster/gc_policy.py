"""A worker process keeps its long-lived objects out of CPython's full collections.

Why: a worker's heap is mostly long-lived (PEs and their state, routing tables,
actors). CPython 3.11 traverses all of it at every full (generation 2)
collection: about 50 ms for ~100k PEs, every few seconds under load, which was
5-10% of the word count's CPU and a pause in every tuple's latency. Every
`freeze_every` seconds the young generations are collected and what survived is
frozen (gc.freeze): the collector then sees only objects younger than that.
Every `thaw_every` seconds everything is thawed (gc.unfreeze), so the next full
collection reclaims cycles that became garbage while frozen: memory held by such
cycles is bounded by that period. Only esault's worker processes do this; a
driver is the user's process and keeps the user's GC settings.
"""

from __future__ import annotations

import gc
from typing import Any


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

    def step(self, now: float) -> str | None:
        """"thaw", "freeze" or None: what this call did."""
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
