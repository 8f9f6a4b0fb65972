"""What a controller sees: per-SPU rates, busy time, backlog and placement, computed from counters.

The runtime keeps only monotone counters (SpuStats); rates need two
readings. `SnapshotBuilder` keeps the previous reading and turns the next one
into a `MetricsSnapshot`. It is pure (no actors, no clock of its own), so
controllers can be tested on hand-made snapshots.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping

from esault.control.events import Change, ProbeRecord


@dataclass(frozen=True)
class SpuMetrics:
    """One SPU over the last period. Rates are per second; None until an SPU has two readings."""

    spu: int
    worker: str | None
    intervals: tuple[tuple[int, int], ...] | None
    processed_rate: float | None  # tuples its bolt processed per second
    emitted_rate: float | None  # tuples it emitted per second (a spout's: the input rate)
    busy: float | None  # fraction of the period spent processing (0..1; more if its thread was descheduled)
    true_rate: float | None  # tuples per second of busy time: what it could do if never idle (DS2)
    queue_depth: int  # spout: tuples held back by max_pending; bolt: messages waiting in its mailbox
    pes: int
    probe_latency: float | None = None  # seconds: the newest probe round trip of the period (inf: timed out)
    key_hashes: tuple[int, ...] = ()  # key hashes it sampled lately (newest probe's): where its load lies
    backlog: int = 0  # spout: what its source has ready and not emitted (Spout.backlog(): a Kafka source's lag)


@dataclass(frozen=True)
class UnitMetrics:
    name: str
    kind: str  # "spout" | "bolt"
    key_grouped: bool
    inputs: tuple[str, ...]  # the units it reads from
    spus: Mapping[int, SpuMetrics]

    @property
    def processed_rate(self) -> float:
        return sum(s.processed_rate or 0.0 for s in self.spus.values())

    @property
    def emitted_rate(self) -> float:
        return sum(s.emitted_rate or 0.0 for s in self.spus.values())

    @property
    def backlog(self) -> int:
        """A spout unit's source backlog (for a Kafka source: the consumer lag over its partitions)."""
        return sum(s.backlog for s in self.spus.values())

    def workload(self) -> dict[int, list[tuple[int, int]]]:
        """{spu: intervals}: the form assign_workload takes (key-grouped units)."""
        return {spu: list(m.intervals) for spu, m in self.spus.items() if m.intervals}


@dataclass(frozen=True)
class MetricsSnapshot:
    time: float
    period: float  # seconds since the previous snapshot (0 for the first)
    units: Mapping[str, UnitMetrics]
    workers: tuple[str, ...] = ()
    probes: tuple[ProbeRecord, ...] = ()  # every probe that returned or timed out since the previous snapshot
    changes: tuple[Change, ...] = ()  # reconfigurations that finished since the previous snapshot
    dropped_events: int = 0  # probes or changes lost because this reader fell too far behind

    def unit(self, name: str) -> UnitMetrics:
        return self.units[name]


@dataclass
class _Reading:
    time: float
    counts: dict[tuple[str, int], Mapping[str, int]] = field(default_factory=dict)


class SnapshotBuilder:
    """Turns successive counter readings into snapshots with rates (O(SPUs) per call)."""

    def __init__(self) -> None:
        self._last: _Reading | None = None

    def update(self, now: float, rows: Iterable[tuple[str, int, Mapping[str, int]]],
               units: Iterable[tuple[str, str, bool, tuple[str, ...]]],
               layout: Mapping[str, Mapping[int, tuple[tuple[int, int], ...] | None]],
               hosts: Mapping[int, str | None] | None = None, workers: Iterable[str] = (),
               events: Iterable[ProbeRecord | Change] = (), dropped_events: int = 0) -> MetricsSnapshot:
        """`rows`: (unit, spu, counts) of every SPU; `units`: (name, kind, key_grouped, inputs);
        `layout`: each unit's live SPUs and their intervals; `hosts`: SPU -> worker; `events`: what
        ControlEvents recorded since the previous snapshot, in order."""
        hosts = hosts or {}
        probes = tuple(e for e in events if isinstance(e, ProbeRecord))
        changes = tuple(e for e in events if isinstance(e, Change))
        newest: dict[tuple[str, int], ProbeRecord] = {(p.unit, p.spu): p for p in probes}
        reading = _Reading(now, {(unit, spu): dict(counts) for unit, spu, counts in rows})
        last = self._last
        period = now - last.time if last is not None else 0.0
        out: dict[str, UnitMetrics] = {}
        for name, kind, key_grouped, inputs in units:
            spus: dict[int, SpuMetrics] = {}
            for spu, intervals in layout.get(name, {}).items():
                counts = reading.counts.get((name, spu), {})
                before = last.counts.get((name, spu)) if last is not None else None
                spus[spu] = _spu_metrics(spu, hosts.get(spu), intervals, counts, before, period,
                                         newest.get((name, spu)))
            out[name] = UnitMetrics(name, kind, key_grouped, tuple(inputs), spus)
        self._last = reading
        return MetricsSnapshot(now, period, out, tuple(workers), probes, changes, dropped_events)


def _spu_metrics(spu: int, worker: str | None, intervals: tuple[tuple[int, int], ...] | None,
                 counts: Mapping[str, int], before: Mapping[str, int] | None, period: float,
                 probe: ProbeRecord | None) -> SpuMetrics:
    processed_rate = emitted_rate = busy = true_rate = None
    if before is not None and period > 0:
        processed = counts.get("processed", 0) - before.get("processed", 0)
        emitted = counts.get("emitted", 0) - before.get("emitted", 0)
        busy_s = (counts.get("busy_us", 0) - before.get("busy_us", 0)) / 1e6
        processed_rate, emitted_rate, busy = processed / period, emitted / period, busy_s / period
        true_rate = processed / busy_s if busy_s > 0 and processed > 0 else None
    return SpuMetrics(spu, worker, tuple(intervals) if intervals else None, processed_rate, emitted_rate, busy,
                      true_rate, int(counts.get("queue_depth", 0) + counts.get("backlog", 0)),
                      int(counts.get("pes", 0)),
                      None if probe is None else (probe.sample.latency if probe.sample.latency is not None
                                                  else float("inf")),
                      () if probe is None else probe.hashes, int(counts.get("backlog", 0)))
