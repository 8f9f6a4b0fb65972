"""A bounded event-time window job into the exactly-once Spark sink (pyarrow engine), on a worker process.

The last windows close only at the end of the input (flush_on_close: the watermark moves with data, so
no tuple passes them). They must fire inside the final checkpoint, or the sink, which publishes only what a
completed checkpoint covers, drops them.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from spark_fixtures import arrow_rows

from esault import JobConfig, LocalCluster, TopologyBuilder
from esault.testing import ListSpout, wait_until
from esault.windows import Tumbling
from spark_sink import SparkSink

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "integration"))
from test_windowed_topologies import bounded_items, oracle  # noqa: E402
from topology_parts import TumblingSums  # noqa: E402

_PAUSE = threading.Event()  # never set: wait() on it is a timed pause across processes' file gates


def hold_while(path: str) -> None:
    """Block this thread while the file `path` exists (at most a minute): a gate across processes."""
    for _ in range(12_000):
        if not os.path.exists(path):
            return
        _PAUSE.wait(0.005)

pytestmark = pytest.mark.system


class WindowRows(SparkSink):
    """A row per fired window: key, window_start, total."""

    def to_row(self, tup: Any) -> dict[str, Any]:
        return {"key": tup.key, "window_start": tup.value["start"], "total": tup.value["result"]}


class GatedEndSums(TumblingSums):
    """TumblingSums whose end of input (the final barrier) first touches `<gate>.<spu>.reached`, then holds
    while the file `gate` exists: a test kills its worker there, the windows fired but not yet committed."""

    def __init__(self, gate: str = "") -> None:
        self.gate = gate

    def open(self, context: Any) -> None:
        super().open(context)
        self._esault_reached = f"{self.gate}.{context.spu_id}.reached" if self.gate else ""

    def finish(self) -> None:
        if self._esault_reached and os.path.exists(self.gate):
            Path(self._esault_reached).touch()
            hold_while(self.gate)
        super().finish()


class HalfListSpout(ListSpout):
    """Emits the first half of its items, the rest once the file `gate` exists."""

    def __init__(self, items: list, gate: str) -> None:
        super().__init__(items)
        self.gate = gate

    def limit(self) -> int:
        return len(self.items) if os.path.exists(self.gate) else len(self.items) // 2


def build(items: list, warehouse: Path, gate: str = "", spout_gate: str = "") -> Any:
    b = TopologyBuilder("bounded_windows")
    if spout_gate:
        b.set_spout("src", HalfListSpout, params={"items": items, "gate": spout_gate})
    else:
        b.set_spout("src", ListSpout, params={"items": items})
    b.set_bolt("win", GatedEndSums, 2, pe_idle_timeout=None, params={"gate": gate}).key_grouping("src")
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


def test_a_worker_killed_after_the_last_windows_fired_at_the_final_barrier_leaves_each_window_once(tmp_path):
    """kill -9 of a window SPU's worker while it fires the last windows at the final barrier: the final
    checkpoint is aborted, the job rolls back to its last periodic checkpoint and completes again, and the
    retried final checkpoint fires them again: the table still has each window once."""
    items = bounded_items(keys=20, n=1200, bound=5, seed=8)
    expected = oracle(items, Tumbling(10))
    config = JobConfig(data_dir=tmp_path / "data", message_timeout=300.0, elasticity=False,
                       checkpoint_interval=0.3)
    warehouse, gate = tmp_path / "warehouse", tmp_path / "end-gate"
    with LocalCluster(workers=3, heartbeat_timeout=1.0) as cluster:
        job = cluster.submit(build(items, warehouse, str(gate)), config)
        assert job.wait(60), job.status()
        gate.touch()
        stopping = threading.Thread(target=job.stop, daemon=True)
        stopping.start()
        reached = wait_until(lambda: sorted(tmp_path.glob("end-gate.*.reached")), 60,
                             message="a window SPU at the final barrier")
        spu = int(reached[0].name.split(".")[1])
        worker = next(w for w, spus in cluster.registry.spus_on.items() if spu in spus)
        os.kill(cluster.registry.pids[worker], signal.SIGKILL)
        gate.unlink()
        stopping.join(120)
        assert not stopping.is_alive(), "the stop ended"
        assert job.checkpoints.stats.recoveries, "the death was noticed during the stop"
        assert job.failure is None, job.failure
    published = Counter(((r["key"], r["window_start"]), r["total"]) for r in arrow_rows(warehouse / "windows"))
    assert published == Counter(expected.items())


def test_a_job_stopped_mid_stream_fires_no_pending_window_and_its_restart_fires_each_once_whole(tmp_path):
    """flush_on_close fires pending windows when the input ends (finish()), not at any stop: stopped with
    half its input read, the job publishes only the windows its watermark closed; the restart reads the rest
    and every window reaches the table once, with its whole total (they used to fire incomplete at the stop,
    and again, with the rest, at the end)."""
    items = bounded_items(keys=20, n=1200, bound=5, seed=9)
    expected = oracle(items, Tumbling(10))
    config = JobConfig(data_dir=tmp_path / "data", message_timeout=30.0, elasticity=False,
                       checkpoint_interval=0.5)
    warehouse, gate = tmp_path / "warehouse", tmp_path / "rest"
    topology = build(items, warehouse, spout_gate=str(gate))
    with LocalCluster(workers=1) as cluster:
        job = cluster.submit(topology, config)
        wait_until(lambda: job.status()["units"]["win"]["processed"] == len(items) // 2, 60,
                   message="the first half processed")
        job.stop()
        assert job.failure is None, job.failure
        first = Counter(((r["key"], r["window_start"]), r["total"]) for r in arrow_rows(warehouse / "windows"))
        assert first and all(expected.get(w) == total for (w, total) in first), \
            f"windows fired incomplete at the stop: {[(w, t, expected.get(w)) for w, t in first if expected.get(w) != t][:5]}"
        assert len(first) < len(expected), "the stop came after every window was closed"
        gate.touch()
        job = cluster.submit(topology, config)
        assert job.restored_from is not None
        assert job.wait(60), job.status()
        job.stop()
        assert job.failure is None, job.failure
    published = Counter(((r["key"], r["window_start"]), r["total"]) for r in arrow_rows(warehouse / "windows"))
    assert published == Counter(expected.items())
