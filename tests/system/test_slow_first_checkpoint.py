"""A job whose first checkpoint cannot complete (its Spark sink still starting), then a worker lost: exact or loud.

The compose run of issue 48 ended exit 0 with 1,250 of 200,000 table rows: its first checkpoint timed out
waiting for the Spark sink (a JVM slow to start, then slow writes, on a busy host), the job rolled back to
"checkpoint None"
(the start), a worker holding count SPUs was killed, and the job stopped with a final checkpoint taken while
the spouts replayed from the beginning: that checkpoint ended them at its barrier, a few hundred sentences in,
and was recorded as the job's end. Here the sink's snapshots are held by a gate file (SlowSink) for both
engines, with the spout chained in the driver as in examples/wordcount.py.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from esault import JobConfig, LocalCluster
from esault.testing import wait_until

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT / "tests" / "system"))
import eo_parts  # noqa: E402
from cpu_load import busy_cores  # noqa: E402
from test_exactly_once import assert_exact, kill_worker_of  # noqa: E402

pytestmark = pytest.mark.system

TOTAL = 1000
RATE = 250.0
"""Each pass over the input takes 4 s: a replay is still running when the test acts on it."""


def rollbacks_to_the_start(job) -> int:
    return sum(1 for r in job.checkpoints.stats.recoveries if r.restored_epoch is None)


@pytest.fixture(params=["pyarrow", "spark"])
def engine(request):
    if request.param == "spark":
        request.getfixturevalue("spark")  # the JVM is up: the gate alone stands for a slow sink
    return request.param


@pytest.mark.parametrize("stop", ["after-the-replay-started", "at-once"])
def test_a_completed_job_whose_first_checkpoint_timed_out_then_lost_a_worker_ends_with_its_whole_output(
        tmp_path, engine, stop, table_name):
    """wait() returned True before any checkpoint completed; the first checkpoint then times out on the sink's
    snapshot, the job rolls back to the start, and kill -9 of a count worker rolls it back again mid-replay.
    stop() (called during the replay, or at once as `esault run` does, queued behind the stuck checkpoint)
    must let the replay reach the end: the counts and the table are exact, the final checkpoint records the
    end of the input, and nothing is reported failed. On the old code the replay was cut at the final
    checkpoint's barrier and the job stopped "successfully" with part of its output."""
    run_the_sequence(tmp_path, engine, stop, table_name)


@pytest.mark.busy
def test_the_same_sequence_with_every_core_kept_busy_ends_with_its_whole_output(tmp_path, table_name):
    with busy_cores(600):
        run_the_sequence(tmp_path, "pyarrow", "after-the-replay-started", table_name, timeout=10.0)


def run_the_sequence(tmp_path: Path, engine: str, stop: str, table: str, timeout: float = 6.0) -> None:
    gate = tmp_path / "sink-slow"
    gate.touch()
    topology = eo_parts.build("eo-slowstart", TOTAL, RATE, sink=engine, count_parallelism=2, table=table,
                              sink_gates={"snapshot_gate": str(gate)})
    config = JobConfig(data_dir=tmp_path / "data", elasticity=False, checkpoint_interval=0.3,
                       checkpoint_timeout=timeout, message_timeout=300.0)
    with LocalCluster(workers=2, heartbeat_timeout=2.0) as cluster:
        job = cluster.submit(topology, config)
        assert job.wait(60), job.status()
        assert job.checkpoints.stats.completed == 0, "a checkpoint completed before the input ended"
        stopping = threading.Thread(target=job.stop, daemon=True)
        if stop == "at-once":
            stopping.start()  # its final checkpoint queues behind the one the sink holds
        wait_until(lambda: rollbacks_to_the_start(job) >= 1, 60, message="the timed-out checkpoint's rollback")
        gate.unlink()  # the sink is quick now: the next checkpoints can complete
        kill_worker_of(cluster, job.spus("count")[0])  # mid-replay: the replay takes 4 s
        wait_until(lambda: rollbacks_to_the_start(job) >= 2, 60, message="the lost worker's rollback")
        if stop == "after-the-replay-started":
            stopping.start()
        stopping.join(180)
        assert not stopping.is_alive(), "stop() returned"
    assert job.failures == []
    assert job.checkpoints.input_ended, "the final checkpoint records the end of the input"
    assert_exact(job, TOTAL, table)

def test_checkpoints_complete_while_the_spark_session_is_still_starting_and_the_table_is_registered_once_it_is(
        tmp_path, spark, table_name):
    """Exactly-once: the Spark sink's engine starts on a thread of its own, and until its session is up the
    epochs are staged with pyarrow in the same layout: checkpoints complete (and publish) while the JVM would
    still be starting, so a slow start on a busy host costs no timeout and no rollback. Once the session is up
    the table is in Spark's catalog. On the old code every checkpoint waited for the start (and timed out)."""
    gate = tmp_path / "spark-starting"
    gate.touch()
    topology = eo_parts.build("eo-slowsession", TOTAL, RATE, sink="spark", count_parallelism=2, table=table_name,
                              sink_gates={"start_gate": str(gate)})
    config = JobConfig(data_dir=tmp_path / "data", elasticity=False, checkpoint_interval=0.3,
                       checkpoint_timeout=3.0, message_timeout=300.0)
    with LocalCluster(workers=2, heartbeat_timeout=1.0) as cluster:
        job = cluster.submit(topology, config)
        wait_until(lambda: job.checkpoints.stats.completed >= 3, 60, message="checkpoints while Spark starts")
        rows = eo_parts.table_rows(job.data_dir / "warehouse", table_name)
        assert rows, "completed checkpoints published their rows (staged by pyarrow)"
        # While the engine starts, no checkpoint waits for it: none failed, none rolled back. (Once it is up,
        # Spark's own first writes may outlast the test's 3 s timeout on a loaded host: exact all the same.)
        assert job.checkpoints.stats.recoveries == [] and job.checkpoints.stats.failed == 0
        gate.unlink()
        assert job.wait(60), job.status()
        job.stop()
    assert_exact(job, TOTAL, table_name)
    spark.catalog.refreshTable(table_name)
    assert spark.sql(f"SELECT COUNT(*) AS n FROM {table_name}").collect()[0].n == eo_parts.words_in(TOTAL)
