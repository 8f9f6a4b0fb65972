"""Turns the plain-int SpuStats of a StatsRegistry into Prometheus series at scrape time.

Runs on the HTTP server's thread. It only reads ints that actor threads write,
so a scrape sees each value as of some moment during the scrape (no lock on
the hot path, no torn ints: the GIL makes each read atomic).
"""

from __future__ import annotations

import threading
import weakref
import logging
from collections.abc import Callable, Iterable, Iterator

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
from esault.metrics.stats import RETIRED_SPU, STATS, SpuStats, StatsRegistry

_SpuKey = tuple[str, str, int]
log = logging.getLogger("esault.metrics")


class SpuStatsCollector(Collector):
    """Counters and gauges of the live SPUs in one StatsRegistry.

    Guarantees:
    * the ``spu`` label takes the ids of live SPUs only: a retired SPU's series
      (counters and gauges) leave the exposition once it stops, so the number of
      series follows the live SPUs, not every SPU a long job ever split off.
      Prometheus sees such a counter series end, which ``rate``/``increase``
      over ``sum by (unit)`` handle; the unit's all-time totals, retired SPUs
      included, are in ``esault status`` / ``Job.status()``;
    * esault_spus{topology,unit} counts live SPUs, and is 0 for a unit whose SPUs
      were all retired (one series per unit, until the topology is forgotten).
    Cost: O(live SPUs + units) per scrape.
    """

    def __init__(self, stats: StatsRegistry = STATS) -> None:
        self.stats = stats
        self._sources: list[Callable[[], Iterable[SpuStats]]] = []
        self._sources_lock = threading.Lock()

    def add_source(self, rows: Callable[[], Iterable[SpuStats]]) -> None:
        """Also expose what `rows()` returns at each scrape: the live SPUs of other processes, as their
        heartbeats reported them (the driver exports its workers' SPUs this way, so one scrape target
        has every bolt). `rows` must not return SPUs this process's own registry has too."""
        with self._sources_lock:
            self._sources.append(rows)

    def remove_source(self, rows: Callable[[], Iterable[SpuStats]]) -> None:
        with self._sources_lock:
            if rows in self._sources:
                self._sources.remove(rows)

    def describe(self) -> Iterator[Metric]:
        """Names only, so registering the collector reads no stats."""
        counters, gauges, spus = self._empty_families()
        yield from counters
        yield from gauges
        yield spus

    def collect(self) -> Iterator[Metric]:
        rows = list(self.stats.totals())
        with self._sources_lock:
            sources = list(self._sources)
        for source in sources:
            try:
                rows.extend(source())
            except Exception:  # noqa: BLE001 - one bad source must not cost the scrape its local series
                log.exception("metrics: a stats source failed; its series are missing from this scrape")
        counters, gauges, spus = self._empty_families()
        live_per_unit: dict[tuple[str, str], int] = {}
        for stats in sorted(rows, key=_key):
            unit_key = (stats.topology, stats.unit)
            if stats.spu == RETIRED_SPU:  # a unit's retired total: no series of its own
                live_per_unit.setdefault(unit_key, 0)
                continue
            live_per_unit[unit_key] = live_per_unit.get(unit_key, 0) + 1
            labels = [stats.topology, stats.unit, str(stats.spu)]
            for family, metric in zip(counters, SPU_COUNTERS, strict=True):
                family.add_metric(labels, getattr(stats, metric.attribute) * metric.scale)
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
