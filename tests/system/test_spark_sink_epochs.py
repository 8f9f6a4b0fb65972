"""SparkSink under exactly_once: two-phase commit per checkpoint epoch, across rollbacks and kill -9.

Driven directly the way the runtime drives it: process(), on_checkpoint(e) (stage),
on_checkpoint_complete(e) (publish), abandon() (rollback), open() with restored_epoch. The crash
tests SIGKILL a child process running the sink (pyarrow engine, no JVM): from the parent between
staging and publishing, or from a failpoint inside a publish; the last test runs real PySpark.
Each pyarrow test fails if the sink publishes at the barrier instead of at completion.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from esault.testing import wait_until

pytestmark = pytest.mark.system
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "unit"))
from sink_epoch_parts import A, B, feed, open_sink, rows_in, table_dir  # noqa: E402


def test_rows_are_published_only_when_their_checkpoint_completes(tmp_path):
    sink = open_sink(tmp_path)
    feed(sink, A)
    sink.on_checkpoint(1).result(30)
    assert rows_in(table_dir(tmp_path)) == [], "staged is not published"
    sink.on_checkpoint_complete(1)
    wait_until(lambda: rows_in(table_dir(tmp_path)) == sorted(A), 30, message="epoch 1 published")
    sink.close()


def test_a_rollback_drops_the_epoch_staged_after_the_restored_checkpoint(tmp_path):
    sink = open_sink(tmp_path)
    feed(sink, A)
    sink.on_checkpoint(1).result(30)
    sink.on_checkpoint_complete(1)
    feed(sink, B)
    sink.on_checkpoint(2).result(30)  # staged; checkpoint 2 never completes: a worker died
    sink.abandon()
    sink = open_sink(tmp_path, restored=1)  # the lock was released: the relaunched instance opens at once
    feed(sink, B)  # the replay after the rollback
    sink.on_checkpoint(3).result(30)
    sink.on_checkpoint_complete(3)
    sink.close()
    assert rows_in(table_dir(tmp_path)) == sorted(A + B), "every row exactly once"


CHILD = """
import sys
sys.path[:0] = {paths!r}
from pathlib import Path
from sink_epoch_parts import open_sink, feed, A, B
sink = open_sink(Path({tmp!r}))
feed(sink, A)
sink.on_checkpoint(1).result(30)
feed(sink, B)
sink.on_checkpoint(2).result(30)
print("staged", flush=True)
{then}
sink.on_checkpoint_complete(2)  # publishes 1 then 2; a failpoint may kill the process in between
sink.close()
"""
HOLD = "sys.stdin.readline()  # the parent kills this process here: staged, never published"


def child_script(tmp_path: Path, then: str = "") -> str:
    return CHILD.format(paths=[str(ROOT), str(ROOT / "tests" / "unit")], tmp=str(tmp_path), then=then)


def run_child(tmp_path: Path, failpoint: str) -> subprocess.CompletedProcess:
    script = child_script(tmp_path)
    env = {**os.environ, "ESAULT_SINK_FAILPOINT": failpoint}
    return subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("restored", [2, 1, None])
def test_a_sink_killed_between_two_publishes_recovers_exactly_what_its_checkpoint_says(tmp_path, restored):
    """kill -9 after the first epoch is published (before the second): on restart from checkpoint 2
    both epochs are in the table once; from checkpoint 1 (2 never completed) only the first; from no
    checkpoint (a fresh start, or a fallback past a damaged checkpoint 1) none: the replay writes the
    published first epoch again, so it is retracted."""
    child = run_child(tmp_path, "published:kill:1")
    assert child.returncode == -9 and "staged" in child.stdout, child.stderr
    assert rows_in(table_dir(tmp_path)) == sorted(A)
    sink = open_sink(tmp_path, restored=restored)
    sink.close()
    expected = {2: sorted(A + B), 1: sorted(A), None: []}[restored]
    assert rows_in(table_dir(tmp_path)) == expected


def test_a_sink_killed_while_staging_leaves_nothing_published(tmp_path):
    child = run_child(tmp_path, "staged:kill:2")  # dies staging epoch 2, before its stage record
    assert child.returncode == -9, child.stderr
    sink = open_sink(tmp_path, restored=1)
    sink.close()
    assert rows_in(table_dir(tmp_path)) == sorted(A), "epoch 1 (complete) published on restart, epoch 2 dropped"


@pytest.mark.parametrize("restored", [2, 1, None])
def test_a_sink_killed_between_two_publishes_inside_a_rename_recovers_from_its_begin_record(tmp_path, restored):
    """kill -9 after epoch 2's 'begin' record, before its rename: 'begin' is written only after the
    checkpoint completed, so the next open publishes epoch 2 from staging; a restore from an older
    checkpoint (a fallback past damaged ones, a fresh start) then retracts the epochs after it."""
    child = run_child(tmp_path, "begun:kill:2")
    assert child.returncode == -9 and "staged" in child.stdout, child.stderr
    assert rows_in(table_dir(tmp_path)) == sorted(A)
    sink = open_sink(tmp_path, restored=restored)
    sink.close()
    assert rows_in(table_dir(tmp_path)) == {2: sorted(A + B), 1: sorted(A), None: []}[restored]


@pytest.mark.parametrize("restored", [2, 1, None])
def test_a_sink_killed_between_staging_and_publishing_publishes_exactly_the_restored_epochs(tmp_path, restored):
    """SIGKILL from outside with epochs 1 and 2 staged and nothing published: the restart publishes the
    epochs its checkpoint covers and aborts the rest, whose rows the replay produces again."""
    script = child_script(tmp_path, HOLD)
    child = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        line = child.stdout.readline()  # blocks until the child staged both epochs (or died)
        assert line.strip() == "staged", child.stderr.read()
        assert rows_in(table_dir(tmp_path)) == [], "staged rows are not visible"
        os.kill(child.pid, signal.SIGKILL)
        assert child.wait(30) == -9
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(30)
        child.stdin.close()
        child.stdout.close()
        child.stderr.close()
    assert rows_in(table_dir(tmp_path)) == []
    sink = open_sink(tmp_path, restored=restored)  # the lock died with the child
    replay = {2: [], 1: B, None: A + B}[restored]  # what the rollback to `restored` produces again
    feed(sink, replay)
    sink.on_checkpoint(3).result(30)
    sink.on_checkpoint_complete(3)
    sink.close()
    assert rows_in(table_dir(tmp_path)) == sorted(A + B), "every row exactly once"


def test_the_spark_engine_stages_at_the_barrier_and_spark_sql_sees_the_rows_at_completion(
        spark, tmp_path, table_name):
    def spark_sink(restored: int | None):
        return open_sink(tmp_path, restored, spu_id=7, engine="spark", table=table_name)

    def query() -> list[tuple[str, int]]:
        spark.sql(f"REFRESH TABLE {table_name}")
        return sorted((r.word, r.n) for r in spark.sql(f"SELECT word, n FROM {table_name}").collect())

    sink = spark_sink(None)
    feed(sink, A)
    sink.on_checkpoint(1).result(120)
    feed(sink, B)
    sink.on_checkpoint(2).result(120)
    assert query() == [], "staged epochs are not in the table"
    sink.on_checkpoint_complete(1)
    sink.wait_epochs(120)
    assert query() == sorted(A)
    sink.abandon()  # a rollback to checkpoint 1: epoch 2 is dropped and replayed
    sink = spark_sink(1)
    feed(sink, B)
    sink.on_checkpoint(3).result(120)
    sink.on_checkpoint_complete(3)
    sink.close()
    assert query() == sorted(A + B)
    assert sink.stats()["rows_committed"] == len(B)
