"""A spawned worker's own metrics (here: a connection it refused) reach the driver's /metrics in heartbeats."""

from __future__ import annotations

import urllib.request

import pytest
import zmq
from prometheus_client.parser import text_string_to_metric_families

from esault import LocalCluster
from esault.metrics import start_metrics_server
from esault.testing import wait_until

pytestmark = pytest.mark.system

HANDSHAKE_REASONS = ("no_curve", "unknown_key", "handshake")


def refused_by(url: str, process: str) -> float | None:
    """Failed handshakes `process` counted, as the driver's /metrics serves them; None: no such series."""
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    values = [sample.value for family in text_string_to_metric_families(text) for sample in family.samples
              if sample.name == "esault_auth_rejected_total" and sample.labels.get("process") == process
              and sample.labels.get("reason") in HANDSHAKE_REASONS]
    return sum(values) if values else None


def test_a_connection_a_spawned_worker_refused_is_counted_on_the_drivers_metrics():
    with start_metrics_server() as exporter, LocalCluster(workers=1) as cluster:
        assert cluster.registry.wait_for(1, 30), "the worker did not join"
        worker, address = next(iter(cluster.registry.workers.items()))
        wait_until(lambda: refused_by(exporter.url, worker) == 0, 15,
                   message="the worker's series, at 0, on the driver's /metrics")
        context = zmq.Context.instance()
        plain = context.socket(zmq.DEALER)  # no CurveZMQ keys: the worker must refuse the handshake
        plain.setsockopt(zmq.LINGER, 0)
        try:
            plain.connect(address)
            plain.send_multipart([b"cluster", b"\x93\x01\x02\x03"])
            wait_until(lambda: (refused_by(exporter.url, worker) or 0) >= 1, 15,
                       message=f"the refused connection counted for {worker} on the driver's /metrics")
        finally:
            plain.close()


def test_a_closed_clusters_workers_leave_the_drivers_metrics():
    from esault.metrics.forwarded import FORWARDED

    with LocalCluster(workers=1) as cluster:
        assert cluster.registry.wait_for(1, 30), "the worker did not join"
        worker = next(iter(cluster.registry.workers))
        wait_until(lambda: any(s.labels.get("process") == worker for samples in FORWARDED.by_family().values()
                               for s in samples), 15, message="the worker's forwarded samples at the driver")
    assert not any(s.labels.get("process") == worker for samples in FORWARDED.by_family().values() for s in samples)
