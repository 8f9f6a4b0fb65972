"""Turns the plain-int SpuStats of a StatsRegistry into Prometheus series at scrape time.

Runs on the HTTP server's thread. It only reads ints that actor threads write,
so a scrape sees each value as of some moment during the scrape (no lock on
the hot path, no torn ints: the GIL makes each read atomic).
"""

from __future__ import annotations

import threading
import weakref
from collections import defaultdict
from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from esault.metrics.registry import (
    REGISTRY,
    SPU_COUNTERS,
    SPU_GAUGES,
    SPU_LABELS,
    SPUS_METRIC,
    UNIT_LABELS,
)
from esault.metrics.stats import STATS, SpuStats, StatsRegistry

_SpuKey = tuple[str, str, int]


class SpuStatsCollector(Collector):
    """Counters and gauges of every SPU in one StatsRegistry.

    Guarantees:
    * counters include retired SPUs, so they never go backwards when an SPU is
      merged away; when a live and a retired SpuStats share an id (an id reused
      after a merge) their counts are added, again so nothing goes backwards;
    * gauges (esault_pes, esault_queue_depth, esault_inflight_tuples) cover live
      SPUs only;
    * esault_spus{topology,unit} counts live SPUs, and is 0 for a unit whose SPUs
      were all retired.
    Cost: O(number of live + retired SPUs) per scrape.
    """

    def __init__(self, stats: StatsRegistry = STATS) -> None:
        self.stats = stats

    def describe(self) -> Iterator[Metric]:
        """Names only, so registering the collector reads no stats."""
        counters, gauges, spus = self._empty_families()
        yield from counters
        yield from gauges
        yield spus

    def collect(self) -> Iterator[Metric]:
        live = self.stats.live()
        every = self.stats.all()

        counters, gauges, spus = self._empty_families()
        counter_totals: dict[_SpuKey, list[int]] = defaultdict(lambda: [0] * len(SPU_COUNTERS))
        for stats in every:
            totals = counter_totals[_key(stats)]
            for i, metric in enumerate(SPU_COUNTERS):
                totals[i] += getattr(stats, metric.attribute)
        for (topology, unit, spu), totals in sorted(counter_totals.items()):
            labels = [topology, unit, str(spu)]
            for family, value in zip(counters, totals, strict=True):
                family.add_metric(labels, value)

        # Units with only retired SPUs report 0. (`live` is read before `every`,
        # so a topology forgotten in between may appear in `live` alone.)
        live_per_unit = dict.fromkeys(((s.topology, s.unit) for s in every), 0)
        for stats in sorted(live, key=_key):
            unit_key = (stats.topology, stats.unit)
            live_per_unit[unit_key] = live_per_unit.get(unit_key, 0) + 1
            labels = [stats.topology, stats.unit, str(stats.spu)]
            for gauge, metric in zip(gauges, SPU_GAUGES, strict=True):
                gauge.add_metric(labels, getattr(stats, metric.attribute))
        for (topology, unit), count in sorted(live_per_unit.items()):
            spus.add_metric([topology, unit], count)

        yield from counters
        yield from gauges
        yield spus

    @staticmethod
    def _empty_families() -> tuple[list[CounterMetricFamily], list[GaugeMetricFamily], GaugeMetricFamily]:
        counters = [
            CounterMetricFamily(m.name, m.documentation, labels=SPU_LABELS) for m in SPU_COUNTERS
        ]
        gauges = [GaugeMetricFamily(m.name, m.documentation, labels=SPU_LABELS) for m in SPU_GAUGES]
        spus = GaugeMetricFamily(SPUS_METRIC.name, SPUS_METRIC.documentation, labels=UNIT_LABELS)
        return counters, gauges, spus


def _key(stats: SpuStats) -> _SpuKey:
    return (stats.topology, stats.unit, stats.spu)


_registered: weakref.WeakKeyDictionary[CollectorRegistry, dict[int, SpuStatsCollector]] = (
    weakref.WeakKeyDictionary()
)
_registered_lock = threading.Lock()


def register_stats_collector(
    registry: CollectorRegistry = REGISTRY, stats: StatsRegistry = STATS
) -> SpuStatsCollector:
    """Register a SpuStatsCollector for ``stats`` on ``registry``, once.

    Idempotent: a second call with the same pair returns the first collector.
    Registering a *different* StatsRegistry on the same CollectorRegistry
    raises ValueError, since both would expose the same series names.
    """
    with _registered_lock:
        per_registry = _registered.setdefault(registry, {})
        existing = per_registry.get(id(stats))
        if existing is not None:
            return existing
        if per_registry:
            raise ValueError(
                "register_stats_collector: this CollectorRegistry already serves another "
                "StatsRegistry; use one StatsRegistry per process (esault.metrics.STATS), or "
                "give the second one its own CollectorRegistry()"
            )
        collector = SpuStatsCollector(stats)
        registry.register(collector)
        per_registry[id(stats)] = collector
        return collector
