"""Commits killed for real: a child process commits and is SIGKILLed, a fresh writer recovers.

The kill is os.kill(SIGKILL) -- no finally blocks, no buffered writes flushed --
either at a named step of the protocol (ESAULT_SINK_FAILPOINT) or at whatever
moment a stream of commits has reached. In between, readers must see whole
batches only; after recovery and a retry of the same batch ids, every batch
appears exactly once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from spark_fixtures import arrow_rows, arrow_table, rows_per_batch, run_python, spark_rows

from esault.testing import wait_until
from spark_sink.commit_log import CommitLog
from spark_sink.failpoints import FAILPOINT_ENV, STEPS
from spark_sink.layout import TablePaths
from spark_sink.stager import ArrowStager, SparkStager
from spark_sink.writer import BatchWriter, Outcome

pytestmark = pytest.mark.system

HERE = Path(__file__).resolve().parent


def rel(seq: int, hour: int = 12) -> str:
    return f"event_date=2024-05-01/event_hour={hour}/esault_batch=w.{seq:010d}"


def child_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")])
    env.pop(FAILPOINT_ENV, None)
    env.update(extra)
    return env


COMMIT_ONE = """
    import sys
    from spark_fixtures import arrow_table
    from spark_sink.stager import ArrowStager
    from spark_sink.writer import BatchWriter
    writer = BatchWriter(sys.argv[1] if len(sys.argv) > 1 else {table!r}, "w", ArrowStager())
    writer.commit("w.0000000001", 1, {rel!r}, arrow_table(100))
    print("survived")
"""


@pytest.mark.parametrize("step", STEPS)
def test_a_commit_killed_at_each_step_shows_no_partial_batch_and_retries_exactly_once(tmp_path, step):
    table_dir = tmp_path / "t"
    first = BatchWriter(table_dir, "w", ArrowStager())
    first.commit("w.0000000000", 0, rel(0), arrow_table(40, start=1000))
    first.close()

    done = run_python(COMMIT_ONE.format(table=str(table_dir), rel=rel(1)), child_env(**{FAILPOINT_ENV: f"{step}:kill"}))
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert "survived" not in done.stdout

    published = STEPS.index(step) >= STEPS.index("published")
    expected_now = {"w.0000000000": 40, "w.0000000001": 100} if published else {"w.0000000000": 40}
    assert rows_per_batch(arrow_rows(table_dir)) == expected_now

    writer = BatchWriter(table_dir, "w", ArrowStager())  # the restarted sink
    assert writer.stats.recovered.rolled_forward == (("w.0000000001",) if step == "published" else ())
    assert writer.stats.recovered.aborted == (("w.0000000001",) if step == "begun" else ())
    assert list(TablePaths(table_dir).staging.iterdir()) == []
    outcome = writer.commit("w.0000000001", 1, rel(1), arrow_table(100))  # replay of the same batch
    assert outcome is (Outcome.ALREADY_COMMITTED if published else Outcome.COMMITTED)
    writer.close()
    assert rows_per_batch(arrow_rows(table_dir)) == {"w.0000000000": 40, "w.0000000001": 100}
    assert sorted(r["n"] for r in arrow_rows(table_dir) if r["esault_batch"] == "w.0000000001") == list(range(100))


STREAM = """
    import sys
    from spark_fixtures import arrow_table
    from spark_sink.stager import ArrowStager
    from spark_sink.writer import BatchWriter
    writer = BatchWriter(sys.argv[1], "w", ArrowStager())
    for seq in range(int(sys.argv[2])):
        rel = f"event_date=2024-05-01/event_hour={seq % 3}/esault_batch=w.{seq:010d}"
        writer.commit(f"w.{seq:010d}", seq, rel, arrow_table(20, start=seq * 20))
"""


@pytest.mark.parametrize("kill_after", [3, 17, 41])
def test_a_stream_of_commits_killed_at_an_arbitrary_moment_recovers_to_exactly_once(tmp_path, kill_after):
    table_dir = tmp_path / "t"
    total = 200
    log_path = TablePaths(table_dir).commit_log("w")
    child = subprocess.Popen(
        [sys.executable, "-c", __import__("textwrap").dedent(STREAM), str(table_dir), str(total)],
        env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    try:
        wait_until(
            lambda: log_path.exists() and log_path.read_bytes().count(b'"op":"commit"') >= kill_after,
            timeout=60, interval=0.001, message=f"{kill_after} commits logged",
        )
        os.kill(child.pid, signal.SIGKILL)  # wherever the child is in its next commit
    finally:
        child.wait(30)
    assert child.returncode == -signal.SIGKILL, child.stderr.read() if child.stderr else ""

    visible = rows_per_batch(arrow_rows(table_dir))
    assert set(visible.values()) <= {20}, f"a partial batch is visible: {visible}"
    assert len(visible) >= kill_after

    writer = BatchWriter(table_dir, "w", ArrowStager())
    committed = {r.batch for r in writer.log.committed()}
    assert committed == set(visible), "after recovery, the log and the visible batches agree"
    for seq in range(total):  # replay everything: committed ids are skipped, the rest land once
        r = f"event_date=2024-05-01/event_hour={seq % 3}/esault_batch=w.{seq:010d}"
        writer.commit(f"w.{seq:010d}", seq, r, arrow_table(20, start=seq * 20))
    writer.close()
    rows = arrow_rows(table_dir)
    assert sorted(r["n"] for r in rows) == list(range(total * 20))
    assert set(rows_per_batch(rows).values()) == {20}
    assert CommitLog(log_path).max_seq == total - 1


COMMIT_WITH_SPARK = """
    import sys
    from spark_fixtures import arrow_table
    from spark_sink.session import get_session
    from spark_sink.stager import SparkStager
    from spark_sink.writer import BatchWriter
    spark = get_session(master="local[1]")
    writer = BatchWriter(sys.argv[1], "w", SparkStager(lambda: spark))
    writer.commit("w.0000000001", 1, sys.argv[2], arrow_table(100))
    print("survived")
"""


def test_a_spark_commit_killed_after_spark_wrote_the_files_is_invisible_and_retried_once(spark, tmp_path):
    table_dir = tmp_path / "t"
    first = BatchWriter(table_dir, "w", SparkStager(lambda: spark))
    first.commit("w.0000000000", 0, rel(0), arrow_table(40, start=1000))
    first.close()

    done = subprocess.run(
        [sys.executable, "-c", __import__("textwrap").dedent(COMMIT_WITH_SPARK), str(table_dir), rel(1)],
        env=child_env(**{FAILPOINT_ENV: "staged:kill"}), capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]
    staged = list(TablePaths(table_dir).staging.iterdir())
    assert [p.name for p in staged] == ["w.0000000001"]  # Spark's files, complete but unpublished
    assert any(p.suffix == ".parquet" for p in staged[0].iterdir())
    assert rows_per_batch(spark_rows(spark, table_dir)) == {"w.0000000000": 40}

    writer = BatchWriter(table_dir, "w", SparkStager(lambda: spark))
    assert writer.stats.recovered.staging_removed == ("w.0000000001",)
    assert writer.commit("w.0000000001", 1, rel(1), arrow_table(100)) is Outcome.COMMITTED
    writer.close()
    assert rows_per_batch(spark_rows(spark, table_dir)) == {"w.0000000000": 40, "w.0000000001": 100}
