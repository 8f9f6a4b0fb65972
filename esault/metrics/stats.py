"""Hot-path counters: plain ints mutated by one actor thread, read at scrape time.

Incrementing a prometheus_client Counter per tuple costs a lock; these cost an
attribute add. The metrics collector turns them into Prometheus series.

What this process keeps is bounded by its *live* SPUs, not by every SPU a long
job ever split off: a retired SPU's counts are folded into one retired total
per unit, and its own SpuStats is dropped after a short reporting window.
"""

from __future__ import annotations

import threading
from typing import Final

from esault.clock import Clock, SystemClock
from esault.metrics.partition_status import PartitionRow

RETIRED_SPU: Final = -1
"""The ``spu`` of a unit's retired total (see :meth:`StatsRegistry.totals`); no real SPU has it."""

COUNTERS: Final = (
    "emitted", "processed", "acked", "failed", "replayed", "user_errors", "dead_letters", "untracked", "busy_us",
    "shed", "close_errors", "snapshot_us", "output_missing",
)
"""SpuStats attributes that only grow: a retired SPU's are added to its unit's retired total."""

GAUGES: Final = ("pes", "queue_depth", "inflight", "trees", "backlog")
"""SpuStats attributes that describe the present: 0 once an SPU is retired."""

REPORTS: Final = ("partitions",)
"""SpuStats attributes that are rows, not numbers (a source's partitions): None once an SPU is retired."""

RETIRED_REPORT_SECONDS: Final = 30.0
"""How long :meth:`StatsRegistry.all` still lists a retired SPU with its final counts.

A worker's heartbeat (every 0.2 s) sends ``all()``; the driver keeps each SPU's
last report, so the final counts need to cross once. 30 s is well past the
driver's default heartbeat_timeout (10 s), after which a silent worker is gone anyway.
"""


class SpuStats:
    """Counts of one SPU (or spout SPU). Written only by its actor thread."""

    __slots__ = ("topology", "unit", "spu") + REPORTS + COUNTERS + GAUGES

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
        self.close_errors = 0  # finish() or close() raised: what it emits or writes at the end may be missing
        self.output_missing = 0  # exactly-once sinks: rows their committed epochs sent them that their output lacks
        self.dead_letters = 0
        self.untracked = 0  # spouts: tuples emitted outside any tracked tree (no msg_id, or acking off)
        self.shed = 0  # tuples a bolt dropped on purpose under overload (a join's load shedding)
        self.busy_us = 0  # bolts: microseconds spent processing batches (DS2's "useful time")
        self.snapshot_us = 0  # keyed bolts: microseconds the SPU's thread spent encoding checkpoint snapshots
        self.pes = 0
        self.queue_depth = 0
        self.inflight = 0
        self.trees = 0  # spouts: tuple trees (one per round) started and not yet decided
        self.backlog = 0  # bolts: messages waiting in the SPU's mailbox; spouts: tuples their source has ready
        self.partitions: tuple[PartitionRow, ...] | None = None
        """Spouts whose source reports partitions (Spout.partition_status(), checked): one row each; None for
        any other SPU. Replaced whole, never changed in place, so another thread may read it any time."""

    def close_failed(self, exc: BaseException) -> None:
        """finish() or close() raised `exc`; an exactly-once sink's OutputMissing also says how many rows."""
        self.close_errors += 1
        self.output_missing += getattr(exc, "missing_rows", 0)

    def as_dict(self) -> dict[str, int]:
        """The counts and gauges by name."""
        return {name: getattr(self, name) for name in COUNTERS + GAUGES}

    def __repr__(self) -> str:
        return f"SpuStats({self.topology!r}, {self.unit!r}, {self.spu}, processed={self.processed})"


_Key = tuple[str, str, int]
_UnitKey = tuple[str, str]


class StatsRegistry:
    """The live SpuStats of this process, plus what its retired SPUs counted; thread-safe.

    Three views, for three readers:

    * :meth:`live` -- the SPUs running here: the /metrics collector's per-SPU
      series, so the ``spu`` label takes only live ids;
    * :meth:`totals` -- live SPUs plus one retired total per unit
      (``spu == RETIRED_SPU``): sums over it are the unit's all-time counts
      (``Job.status()``);
    * :meth:`all` -- live SPUs plus SPUs retired in the last
      ``report_retired_for`` seconds with their final counts: a worker's
      heartbeat rows. The driver keeps each SPU's last row, so it ends up with
      every retired SPU's final counts while the worker forgets them.

    Memory: O(live SPUs + units + SPUs retired in the last ``report_retired_for`` s).
    Every method is O(that) or better.
    """

    def __init__(self, clock: Clock | None = None,
                 report_retired_for: float = RETIRED_REPORT_SECONDS) -> None:
        if report_retired_for < 0:
            raise ValueError(f"report_retired_for must be >= 0 seconds, got {report_retired_for!r}")
        self._clock = clock or SystemClock()
        self.report_retired_for = report_retired_for
        """Seconds ``all()`` still lists a retired SPU; 0 drops it at once (nothing then relies on it)."""
        self._lock = threading.Lock()
        self._live: dict[_Key, SpuStats] = {}
        self._retired: dict[_UnitKey, SpuStats] = {}
        self._recent: dict[_Key, tuple[float, SpuStats]] = {}  # key -> (report until, final counts)

    def register(self, stats: SpuStats) -> None:
        with self._lock:
            self._live[(stats.topology, stats.unit, stats.spu)] = stats

    def retire(self, stats: SpuStats) -> None:
        """The SPU stopped for good (merged away): fold its counts into its unit's retired total.

        Only a registered, live ``stats`` is folded, so retiring twice (or after
        ``forget_topology``) counts nothing twice. Its gauges drop to 0.
        """
        stats.pes = 0
        stats.queue_depth = 0
        stats.inflight = 0
        stats.trees = 0
        stats.backlog = 0
        stats.partitions = None  # its partitions are read by the SPUs that replace it
        key = (stats.topology, stats.unit, stats.spu)
        with self._lock:
            if self._live.get(key) is not stats:
                return
            del self._live[key]
            total = self._retired.get(key[:2])
            if total is None:
                total = self._retired[key[:2]] = SpuStats(stats.topology, stats.unit, RETIRED_SPU)
            for name in COUNTERS:
                setattr(total, name, getattr(total, name) + getattr(stats, name))
            now = self._clock.now()
            self._prune(now)
            if self.report_retired_for > 0:
                self._recent[key] = (now + self.report_retired_for, stats)

    def forget_topology(self, topology: str) -> None:
        with self._lock:
            for table in (self._live, self._retired, self._recent):
                for key in [k for k in table if k[0] == topology]:
                    del table[key]

    def live(self) -> list[SpuStats]:
        """The SpuStats of the SPUs running in this process."""
        with self._lock:
            return list(self._live.values())

    def totals(self) -> list[SpuStats]:
        """Live SpuStats plus one retired total per unit (``spu == RETIRED_SPU``, gauges 0).

        Summing a counter over a unit's rows gives everything the unit counted in
        this process, retired SPUs included. The totals are snapshots: later
        retirements do not change a list already returned.
        """
        with self._lock:
            retired = [_copy(total) for total in self._retired.values()]
            return list(self._live.values()) + retired

    def all(self) -> list[SpuStats]:
        """Live SpuStats plus recently retired ones with their final counts (a heartbeat's rows).

        Not for totals: a retired SPU leaves this list ``report_retired_for``
        seconds after it stopped. Use :meth:`totals` to sum.
        """
        with self._lock:
            self._prune(self._clock.now())
            return list(self._live.values()) + [stats for _, stats in self._recent.values()]

    def _prune(self, now: float) -> None:
        """Drop retired SPUs whose reporting window passed (caller holds the lock)."""
        for key in [k for k, (until, _) in self._recent.items() if until <= now]:
            del self._recent[key]


def _copy(stats: SpuStats) -> SpuStats:
    copy = SpuStats(stats.topology, stats.unit, stats.spu)
    for name in COUNTERS + GAUGES:
        setattr(copy, name, getattr(stats, name))
    return copy


STATS = StatsRegistry()
"""The process-wide registry the runtime registers its SPUs in."""
