"""The topology the driver-scale simulation runs, on stand-in SPUs or (to check the stand-ins) on real ones.

keys (a paced, rewindable source) -> count (key grouped, a running count per key). Its classes are what real
workers import; simulated workers read only the declaration (which unit is a spout, the unit names).
"""

from __future__ import annotations

import time
from typing import Any

from esault import Bolt, Spout, TopologyBuilder
from esault.dsl.topology import Topology


class PacedKeysSpout(Spout):
    """`rate` tuples a second of (key, 1) over `keys` keys, for ever (or `total` of them): an SPU's paced load."""

    def __init__(self, rate: float = 10.0, keys: int = 1000, total: int | None = None) -> None:
        self.rate = rate
        self.keys = keys
        self.total = total

    def open(self, context: Any) -> None:
        self.sent = 0
        self.instance = context.instance
        self.started = time.monotonic()

    def next_tuple(self) -> None:
        if self.total is not None and self.sent >= self.total:
            return
        due = int((time.monotonic() - self.started) * self.rate)
        while self.sent < due and (self.total is None or self.sent < self.total):
            self.emit(f"k{(self.sent * 7919 + self.instance) % self.keys}", 1)
            self.sent += 1

    def snapshot_position(self) -> int:
        return self.sent

    def restore_position(self, position: int) -> None:
        self.sent = int(position)
        self.started = time.monotonic() - self.sent / self.rate if self.rate else time.monotonic()


class RunningCountBolt(Bolt):
    """Per key: its running count (PE state that checkpoints and hand-offs carry)."""

    def open(self, context: Any) -> None:
        self.count = 0

    def process(self, tup: Any) -> None:
        self.count += tup.value


COUNT_UNITS = ("count-a", "count-b", "count-c", "count-d", "count-e")
"""Five key-grouped units: 256 workers x 15 count SPUs is 3,840, more than three units' worth of MAX_SPUS."""


def build(name: str, workers: int, spouts_per_worker: int = 1, counts_per_worker: int = 15, rate: float = 10.0,
          total: int | None = None) -> Topology:
    """keys -> count-a .. count-e: 16 SPUs a worker by default (a source SPU, 3 SPUs of each count)."""
    builder = TopologyBuilder(name)
    builder.set_spout("keys", PacedKeysSpout, workers * spouts_per_worker,
                      params={"rate": rate, "keys": 1000 * workers, "total": total}, placement="worker")
    each = max(1, workers * counts_per_worker // len(COUNT_UNITS))
    for unit in COUNT_UNITS:
        builder.set_bolt(unit, RunningCountBolt, each, elastic=False, pe_idle_timeout=None,
                         max_spus=min(1024, each + 8)).key_grouping("keys")
    return builder.build()
