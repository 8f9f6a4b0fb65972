"""Hot-path counters: plain ints mutated by one actor thread, read at scrape time.

Incrementing a prometheus_client Counter per tuple costs a lock; these cost an
attribute add. The metrics collector turns them into Prometheus series.
"""

from __future__ import annotations

import threading


class SpuStats:
    """Counts of one SPU (or spout SPU). Written only by its actor thread."""

    __slots__ = (
        "topology", "unit", "spu", "emitted", "processed", "acked", "failed",
        "replayed", "user_errors", "dead_letters", "pes", "queue_depth", "inflight", "untracked",
    )

    def __init__(self, topology: str, unit: str, spu: int) -> None:
        self.topology = topology
        self.unit = unit
        self.spu = spu
        self.emitted = 0
        self.processed = 0
        self.acked = 0
        self.failed = 0
        self.replayed = 0
        self.user_errors = 0
        self.dead_letters = 0
        self.pes = 0
        self.queue_depth = 0
        self.inflight = 0
        self.untracked = 0  # spouts: tuples emitted outside any tracked tree (no msg_id, or acking off)

    def as_dict(self) -> dict[str, int]:
        return {
            name: getattr(self, name)
            for name in self.__slots__
            if name not in ("topology", "unit", "spu")
        }


class StatsRegistry:
    """Every live and retired SpuStats of this process; thread-safe registration."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._live: dict[tuple[str, str, int], SpuStats] = {}
        self._retired: dict[tuple[str, str, int], SpuStats] = {}

    def register(self, stats: SpuStats) -> None:
        with self._lock:
            self._live[(stats.topology, stats.unit, stats.spu)] = stats

    def retire(self, stats: SpuStats) -> None:
        """Keep a removed SPU's final counts so counters never go backwards."""
        with self._lock:
            key = (stats.topology, stats.unit, stats.spu)
            self._live.pop(key, None)
            stats.pes = 0
            stats.queue_depth = 0
            stats.inflight = 0
            self._retired[key] = stats

    def forget_topology(self, topology: str) -> None:
        with self._lock:
            for table in (self._live, self._retired):
                for key in [k for k in table if k[0] == topology]:
                    del table[key]

    def all(self) -> list[SpuStats]:
        with self._lock:
            return list(self._live.values()) + list(self._retired.values())

    def live(self) -> list[SpuStats]:
        with self._lock:
            return list(self._live.values())


STATS = StatsRegistry()
"""The process-wide registry the runtime registers its SPUs in."""
