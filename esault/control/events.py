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
from dataclasses import dataclass, replace
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


PRUNE_SAMPLED_AT = 256
"""ControlEvents forgets the samples of SPUs whose records left the log once it tracks more than this many."""


class ControlEvents:
    """A bounded, thread-safe log of ProbeRecords and Changes with per-reader cursors.

    A reader that falls more than `capacity` events behind loses the oldest
    (it is told how many through `dropped`), so a stalled controller cannot
    grow the driver's memory. Only each SPU's newest probe record keeps its key
    hashes (a record of up to 1,024 hashes is ~37 KB): an older one gives them
    up when a newer one with hashes comes. Readers use the newest sample of an
    SPU (where to split it), so this changes nothing they decide, and 10,000
    records no longer hold ~370 MB of samples in the driver.
    """

    def __init__(self, capacity: int = 10_000) -> None:
        self._events: deque[tuple[int, ProbeRecord | Change]] = deque(maxlen=capacity)
        self._seq = itertools.count(1)
        self._last = 0
        self._lock = threading.Lock()
        self._listeners: list[Callable[[], None]] = []
        self._sampled: dict[tuple[str, int], int] = {}  # (unit, spu) -> seq of its record that keeps hashes
        self._prune_at = PRUNE_SAMPLED_AT

    def record(self, event: ProbeRecord | Change) -> None:
        with self._lock:
            self._last = next(self._seq)
            if type(event) is ProbeRecord and event.hashes:
                self._shed_older_sample((event.unit, event.spu))
                self._sampled[(event.unit, event.spu)] = self._last
                if len(self._sampled) > self._prune_at:
                    self._forget_gone_samples()
            self._events.append((self._last, event))
            listeners = list(self._listeners)
        for wake in listeners:
            wake()

    def _shed_older_sample(self, key: tuple[str, int]) -> None:
        """The SPU's previous record with hashes, if still in the log, keeps its sample no more (lock held)."""
        seq = self._sampled.pop(key, None)
        if seq is None or not self._events:
            return
        index = seq - self._events[0][0]  # sequence numbers are contiguous
        if 0 <= index < len(self._events):
            old = self._events[index][1]
            self._events[index] = (seq, replace(old, hashes=()))

    def _forget_gone_samples(self) -> None:
        """Drop the entries of samples whose record left the log (SPUs gone long ago, in a job that splits
        and merges for weeks); amortised O(1) a record, since the next pass waits for twice the survivors."""
        oldest = self._events[0][0] if self._events else self._last
        self._sampled = {key: seq for key, seq in self._sampled.items() if seq >= oldest}
        self._prune_at = max(PRUNE_SAMPLED_AT, 2 * len(self._sampled))

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
