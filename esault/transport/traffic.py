"""Traffic: how many messages of each type a process sent and received, when someone asks to know.

Off by default (the data path pays one attribute test). The driver-scale simulation turns it on in the driver to
count its messages per operation and per second (bench/scale_sim.py), and a test compares those counts between
simulated and real workers, so the simulation cannot drift from the protocol.
"""

from __future__ import annotations

import threading
from collections import Counter


class Traffic:
    """Counts of (direction, message type name); thread-safe: the I/O thread and every sender write here."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[tuple[str, str]] = Counter()

    def sent(self, message: object) -> None:
        with self._lock:
            self._counts[("out", type(message).__name__)] += 1

    def received(self, message: object) -> None:
        with self._lock:
            self._counts[("in", type(message).__name__)] += 1

    def snapshot(self) -> Counter[tuple[str, str]]:
        """The counts so far (a copy): subtract two snapshots for what one operation cost."""
        with self._lock:
            return Counter(self._counts)

    def totals(self) -> tuple[int, int]:
        """(messages in, messages out) so far."""
        with self._lock:
            inn = sum(n for (way, _), n in self._counts.items() if way == "in")
            return inn, sum(self._counts.values()) - inn
