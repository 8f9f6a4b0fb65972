"""Cyclic-GC policy while jobs run: fewer generation-0 collections.

Every tuple in flight is a GC-tracked container, so with Python's default
threshold (700 allocations) the collector walks the in-flight batches over
and over: bench/throughput.py measured 17-28% of wall time in GC. Reference
counting still frees tuples at once; only cycle detection runs less often.
The previous thresholds come back when the last job stops.
"""

from __future__ import annotations

import gc
import threading

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
