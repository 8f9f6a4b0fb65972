"""Every panel of the Grafana dashboard finds data for a real `esault run` on spawned worker processes.

The CLI runs a topology in its default mode (`--cluster processes`): the spout and the Spark sink in
the driver, the counting bolt in two worker processes. A real Prometheus scrapes the driver's
/metrics (the only target: worker SPUs reach it in heartbeats) every second, and every PromQL
expression of every dashboard in deploy/grafana/dashboards runs against it, Grafana variables filled
in, until each returns a number. The failure names every panel that stayed empty.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from esault.testing import wait_until
from prometheus_server import DASHBOARDS, PrometheusServer, dashboard_queries, has_data, with_grafana_variables

pytestmark = pytest.mark.system

TOPOLOGY = """
import time
from esault import Bolt, TopologyBuilder
from esault.testing import ListSpout
from spark_sink import SparkSink

class Paced(ListSpout):
    '''At most `rate` tuples per second, so the job runs until the test stops it.'''
    def __init__(self, items, rate):
        super().__init__(items, per_call=10)
        self.rate, self.t0 = rate, None
    def limit(self):
        now = time.monotonic()
        self.t0 = self.t0 or now
        return min(len(self.items), int((now - self.t0) * self.rate) + 1)

class Count(Bolt):
    def open(self, context):
        self.count = 0
    def process(self, tup):
        self.count += 1
        self.emit(tup.key, self.count)

b = TopologyBuilder('dash')
b.set_spout('src', Paced, params={'items': [[i % 50, 'x'] for i in range(100_000)], 'rate': 400.0})
b.set_bolt('count', Count, 2, probe_period=0.2).key_grouping('src')
b.set_bolt('sink', SparkSink, elastic=False, params={
    'table': 'counts', 'schema': 'key BIGINT, value BIGINT', 'batch_rows': 200, 'batch_seconds': 0.5,
    'engine': 'pyarrow'}).shuffle_grouping('count')
topology = b.build()
"""

RATE_WINDOW = "5s"
"""$__rate_interval for a 1 s scrape: enough samples for rate() and histogram_quantile()."""

DEADLINE = 25.0
REPO = Path(__file__).resolve().parents[2]


def env_with_this_tree() -> dict[str, str]:
    """The environment, with this checkout's esault and spark_sink first on the path."""
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path}


def test_every_dashboard_panel_finds_data_for_a_topology_on_worker_processes(tmp_path: Path):
    (tmp_path / "dash.py").write_text(TOPOLOGY)
    driver = subprocess.Popen(
        [sys.executable, "-m", "esault.cli", "run", "dash.py", "--metrics-port", "0", "--data-dir",
         str(tmp_path / "data"), "--checkpoint-interval", "1"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env_with_this_tree())
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(driver.stderr), daemon=True).start()
    try:
        url = wait_until(lambda: next((m.group(1) for line in lines
                                       if (m := re.search(r"metrics: http://(\S+)/metrics", line))), None)
                         or driver.poll() is not None, 30, message="the driver's metrics address on stderr")
        assert isinstance(url, str), f"esault run exited ({driver.returncode}): {''.join(lines)}"
        wait_until(lambda: any("running" in line for line in lines) or driver.poll() is not None, 30,
                   message="the topology running")
        assert driver.poll() is None, f"esault run exited ({driver.returncode}): {''.join(lines)}"
        queries = [(path.name, title, with_grafana_variables(expr, {"$__rate_interval": RATE_WINDOW}))
                   for path in sorted(DASHBOARDS.glob("*.json"))
                   for title, expr in dashboard_queries(path, annotations=False)
                   if "esault_kafka_" not in expr]  # no Kafka source here: test_kafka_operations.py runs those
        assert len(queries) > 20, "the dashboards' queries were not found"
        with PrometheusServer([url], scrape_interval=1.0) as prometheus:
            empty = set(queries)
            deadline = time.monotonic() + DEADLINE

            def all_have_data() -> bool:
                for query in sorted(empty):
                    if has_data(prometheus.query(query[2])):
                        empty.discard(query)
                return not empty or time.monotonic() > deadline

            wait_until(all_have_data, DEADLINE + 5, interval=0.25, message="data for every panel")
            health = prometheus.target_health()
        assert not empty, (
            f"{len(empty)} of {len(queries)} dashboard queries found no data in {DEADLINE} s "
            f"(scrape target {health}):\n" + "\n".join(f"  {d} / {t!r}: {q}" for d, t, q in sorted(empty)))
        assert driver.poll() is None, "the topology ended before the test stopped it: give it more input"
    finally:
        if driver.poll() is None:
            driver.send_signal(signal.SIGINT)  # stops the job in order, as Ctrl-C does
        try:
            driver.wait(30)
        except subprocess.TimeoutExpired:
            driver.kill()
            driver.wait(10)
