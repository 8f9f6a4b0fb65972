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


def test_the_drivers_metrics_carry_the_bolts_running_in_worker_processes(tmp_path):
    """Worker SPUs' counters and gauges reach the driver in heartbeats; its /metrics exports them, so the
    dashboard's rate and SPU panels have data in the default mode. Series follow the live SPUs."""
    topology = wordcount.build_topology(total=1_000_000, rate=2000.0, sink=None)
    with start_metrics_server() as exporter, PrometheusServer([exporter.target]) as prometheus, \
            LocalCluster(workers=2) as cluster:
        job = cluster.submit(topology, JobConfig(data_dir=tmp_path, elasticity=False))
        count_spus = job.spus("count")
        assert all(job.worker_of(spu) for spu in count_spus), "the counter runs in worker processes"
        prometheus.wait_for_series('esault_tuples_processed_total{topology="wordcount",unit="count"} > 0',
                                   timeout=30)
        prometheus.wait_for_series(f'esault_spus{{topology="wordcount",unit="count"}} == {len(count_spus)}',
                                   timeout=30)
        prometheus.wait_for_series('sum(esault_pes{topology="wordcount",unit="count"}) > 0', timeout=30)
        prometheus.wait_for_series('esault_queue_depth{topology="wordcount",unit="count"}', timeout=30)
        merged = job.merge("count", count_spus[0], count_spus[1])
        prometheus.wait_for_series('esault_spus{topology="wordcount",unit="count"} == '
                                   f'{len(count_spus) - 1}', timeout=30)
        gone = f'esault_pes{{topology="wordcount",unit="count",spu="{merged.giver}"}}'
        prometheus.wait_for_series(f'absent({gone})', timeout=30)
        job.stop()
