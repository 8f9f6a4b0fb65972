"""A bounded event-time window job into the exactly-once Spark sink (pyarrow engine), on a worker process.

The last windows close only at the end of the input (flush_on_close: the watermark moves with data, so
no tuple passes them). They must fire inside the final checkpoint, or the sink, which publishes only what a
completed checkpoint covers, drops them.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from spark_fixtures import arrow_rows

from esault import JobConfig, LocalCluster, TopologyBuilder
from esault.testing import ListSpout
from esault.windows import Tumbling
from spark_sink import SparkSink

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "integration"))
from test_windowed_topologies import bounded_items, oracle  # noqa: E402
from topology_parts import TumblingSums  # noqa: E402

pytestmark = pytest.mark.system


class WindowRows(SparkSink):
    """A row per fired window: key, window_start, total."""

    def to_row(self, tup: Any) -> dict[str, Any]:
        return {"key": tup.key, "window_start": tup.value["start"], "total": tup.value["result"]}


def build(items: list, warehouse: Path) -> Any:
    b = TopologyBuilder("bounded_windows")
    b.set_spout("src", ListSpout, params={"items": items})
    b.set_bolt("win", TumblingSums, 2, pe_idle_timeout=None).key_grouping("src")
    b.set_bolt("sink", WindowRows, params={"table": "windows", "engine": "pyarrow", "batch_seconds": None,
                                           "warehouse": str(warehouse),
                                           "schema": "key STRING, window_start BIGINT, total BIGINT"},
               elastic=False).shuffle_grouping("win")
    return b.build()


def run_to_the_end(cluster: LocalCluster, items: list, config: JobConfig, warehouse: Path) -> None:
    job = cluster.submit(build(items, warehouse), config)
    assert job.wait(60), job.status()
    job.stop()
    assert job.failure is None, job.failure


def test_a_bounded_window_jobs_last_windows_reach_the_exactly_once_sink_once_and_a_rerun_adds_nothing(tmp_path):
    items = bounded_items(keys=20, n=1200, bound=5, seed=7)
    expected = oracle(items, Tumbling(10))
    last = max(ts for _, (ts, _) in items)
    closing_at_the_end = {w for w in expected if w[1] + 10 > last - 5}  # no tuple's watermark passes them
    assert len(closing_at_the_end) >= 10, "the input ends with windows only the end of input closes"
    config = JobConfig(data_dir=tmp_path / "data", message_timeout=30.0, elasticity=False,
                       checkpoint_interval=0.5)
    warehouse = tmp_path / "warehouse"

    def published() -> Counter:
        return Counter(((r["key"], r["window_start"]), r["total"]) for r in arrow_rows(warehouse / "windows"))

    with LocalCluster(workers=1) as cluster:
        run_to_the_end(cluster, items, config, warehouse)
        assert published() == Counter(expected.items()), "every window exactly once, the last ones too"
        run_to_the_end(cluster, items, config, warehouse)  # resumes from the final checkpoint: nothing left to do
        assert published() == Counter(expected.items()), "the rerun emitted no window again"
