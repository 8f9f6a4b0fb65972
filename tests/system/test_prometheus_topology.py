"""A real Prometheus scrapes a running topology's /metrics and finds non-zero esault series."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from esault import JobConfig, LocalCluster
from esault.metrics import start_metrics_server
from prometheus_server import PrometheusServer

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import wordcount  # noqa: E402

pytestmark = pytest.mark.system


def test_prometheus_scrapes_non_zero_series_from_a_running_wordcount(tmp_path):
    topology = wordcount.build_topology(total=1_000_000, rate=2000.0, sink=None)
    with start_metrics_server() as exporter, PrometheusServer([exporter.target]) as prometheus, \
            LocalCluster() as cluster:
        job = cluster.submit(topology, JobConfig(data_dir=tmp_path))
        prometheus.wait_for_series('esault_tuples_processed_total{topology="wordcount",unit="count"} > 0',
                                   timeout=30)
        job.split("count", job.spus("count")[0])
        events = prometheus.wait_for_series(
            'esault_scaling_events_total{topology="wordcount",unit="count",action="split"} > 0', timeout=30)
        assert events[0]["metric"]["reason"] == "manual"
        spus = prometheus.wait_for_series('esault_spus{topology="wordcount",unit="count"} == 3', timeout=30)
        assert float(spus[0]["value"][1]) == 3
        latency = prometheus.wait_for_series(
            'esault_tuple_latency_seconds_count{topology="wordcount",unit="sentences"} > 0', timeout=30)
        assert float(latency[0]["value"][1]) > 0
        acked = prometheus.wait_for_series('esault_tuples_acked_total{topology="wordcount"} > 0', timeout=30)
        assert float(acked[0]["value"][1]) > 0
        job.stop()
