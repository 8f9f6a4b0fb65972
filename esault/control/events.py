"""What happened between two snapshots: probe round trips and finished reconfigurations.

Counters give rates; some policies need events. The latency rules of the paper
look at every probe in order, and every policy must know when the layout it
reasons about changed. The driver records both here as they happen; each
controller reads what is new since its previous snapshot through its own cursor,
so several controllers see every event once each.
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable

from esault.elasticity.detector import ProbeSample


@dataclass(frozen=True, slots=True)
class ProbeRecord:
    """One probe of one SPU: its round trip (None: timed out) and the key hashes it sampled."""

    unit: str
    spu: int
    sample: ProbeSample
    hashes: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Change:
    """A reconfiguration that finished (any source: a controller, the API, Job.split ...)."""

    finished_at: float  # the job's clock
    result: Any  # the ScaleResult


class ControlEvents:
    """A bounded, thread-safe log of ProbeRecords and Changes with per-reader cursors.

    A reader that falls more than `capacity` events behind loses the oldest
    (it is told how many through `dropped`), so a stalled controller cannot
    grow the driver's memory.
    """

    def __init__(self, capacity: int = 10_000) -> None:
        self._events: deque[tuple[int, ProbeRecord | Change]] = deque(maxlen=capacity)
        self._seq = itertools.count(1)
        self._last = 0
        self._lock = threading.Lock()
        self._listeners: list[Callable[[], None]] = []

    def record(self, event: ProbeRecord | Change) -> None:
        with self._lock:
            self._last = next(self._seq)
            self._events.append((self._last, event))
            listeners = list(self._listeners)
        for wake in listeners:
            wake()

    def cursor(self) -> int:
        """A cursor that reads only events recorded from now on."""
        with self._lock:
            return self._last

    def since(self, cursor: int) -> tuple[list[ProbeRecord | Change], int, int]:
        """(events after `cursor` in order, the new cursor, how many were dropped unread)."""
        with self._lock:
            oldest = self._events[0][0] if self._events else self._last + 1
            skip = max(0, cursor + 1 - oldest)  # sequence numbers are contiguous
            events = [e for _, e in itertools.islice(self._events, skip, None)]
            return events, self._last, max(0, oldest - cursor - 1)

    def on_record(self, wake: Callable[[], None]) -> None:
        """Call `wake()` (cheap, non-blocking) after each event."""
        with self._lock:
            self._listeners.append(wake)

    def off_record(self, wake: Callable[[], None]) -> None:
        with self._lock:
            if wake in self._listeners:
                self._listeners.remove(wake)
