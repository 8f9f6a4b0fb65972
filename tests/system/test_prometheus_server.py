"""A real Prometheus scrapes esault's /metrics, and runs every query of the Grafana dashboard."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from esault.metrics import MetricsServer, SpuStats, StatsRegistry, start_metrics_server
from prometheus_server import PrometheusError, PrometheusServer, values

pytestmark = pytest.mark.system

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "dashboards" / "esault.json"

# Grafana fills these in before a query reaches Prometheus.
GRAFANA_VARIABLES = {
    "$__rate_interval": "1m",
    "$__interval": "15s",
    "$__range": "5m",
    "$topology": ".*",
    "$unit": ".*",
}


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


def dashboard_queries() -> list[tuple[str, str]]:
    dashboard = json.loads(DASHBOARD.read_text())
    queries = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            queries.append((panel["title"], target["expr"]))
    for annotation in dashboard["annotations"]["list"]:
        if "expr" in annotation:
            queries.append((f"annotation {annotation['name']}", annotation["expr"]))
    return queries


def with_grafana_variables(expr: str) -> str:
    for name in sorted(GRAFANA_VARIABLES, key=len, reverse=True):
        expr = expr.replace(name, GRAFANA_VARIABLES[name])
    assert not re.search(r"\$\w", expr), f"unknown Grafana variable left in {expr!r}"
    return expr


def test_prometheus_accepts_every_dashboard_query(prometheus):
    queries = dashboard_queries()
    assert len(queries) > 10
    for title, expr in queries:
        try:
            prometheus.query(with_grafana_variables(expr))
        except PrometheusError as exc:
            pytest.fail(f"dashboard panel {title!r}: Prometheus rejects {expr!r}: {exc}")
