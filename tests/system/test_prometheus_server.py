"""A real Prometheus scrapes esault's /metrics, and runs every query of the Grafana dashboard."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry

from esault.metrics import MetricsServer, SpuStats, StatsRegistry, start_metrics_server
from prometheus_server import (DASHBOARDS, PrometheusError, PrometheusServer, dashboard_queries, values,
                               with_grafana_variables)

pytestmark = pytest.mark.system

DASHBOARD = DASHBOARDS / "esault.json"


def spu(topology: str, unit: str, spu_id: int, **counts: int) -> SpuStats:
    stats = SpuStats(topology, unit, spu_id)
    for name, value in counts.items():
        setattr(stats, name, value)
    return stats


@pytest.fixture(scope="module")
def exporter() -> Iterator[MetricsServer]:
    """An in-process exporter with a spout and two bolt units, on a private registry."""
    stats = StatsRegistry()
    stats.register(spu("wordcount", "sentences", 0, emitted=500, acked=480, failed=5, replayed=5, inflight=15))
    stats.register(spu("wordcount", "split", 0, processed=250, emitted=2500, pes=1))
    stats.register(spu("wordcount", "split", 1, processed=250, emitted=2500, pes=1))
    stats.register(spu("wordcount", "count", 0, processed=5000, pes=40, queue_depth=3, dead_letters=2))
    with start_metrics_server(registry=CollectorRegistry(), stats=stats) as server:
        yield server


@pytest.fixture(scope="module")
def prometheus(exporter: MetricsServer) -> Iterator[PrometheusServer]:
    # To scrape a real running topology instead, pass its metrics address here.
    with PrometheusServer([exporter.target]) as server:
        yield server


def test_prometheus_scrapes_processed_tuple_counts_from_the_exporter(prometheus):
    result = prometheus.wait_for_series("esault_tuples_processed_total > 0", timeout=15)

    by_spu = {(r["metric"]["unit"], r["metric"]["spu"]): float(r["value"][1]) for r in result}
    assert by_spu == {("split", "0"): 250, ("split", "1"): 250, ("count", "0"): 5000}
    assert all(r["metric"]["topology"] == "wordcount" for r in result)
    assert all(r["metric"]["job"] == "esault" for r in result)


def test_prometheus_sees_the_live_spus_of_each_unit(prometheus):
    result = prometheus.wait_for_series('esault_spus{topology="wordcount"}', timeout=15)

    assert {r["metric"]["unit"]: float(r["value"][1]) for r in result} == {
        "sentences": 1, "split": 2, "count": 1,
    }


def test_the_input_filter_of_the_dashboard_selects_spout_units_only(prometheus):
    prometheus.wait_for_series("esault_tuples_processed_total", timeout=15)
    result = prometheus.query(
        "esault_tuples_emitted_total unless on (topology, unit) (esault_tuples_processed_total > 0)"
    )
    assert {r["metric"]["unit"] for r in result} == {"sentences"}
    assert values(result) == [500]


def test_prometheus_accepts_every_dashboard_query(prometheus):
    queries = dashboard_queries(DASHBOARD)
    assert len(queries) > 10
    for title, expr in queries:
        try:
            prometheus.query(with_grafana_variables(expr))
        except PrometheusError as exc:
            pytest.fail(f"dashboard panel {title!r}: Prometheus rejects {expr!r}: {exc}")
