"""SparkSink over Spark Connect: a server started from the pyspark package on 127.0.0.1, the sink and
the reads in this process as a remote client (sc://127.0.0.1:PORT; no JVM here, no SparkContext).

One server serves the module. Its own Spark (local[2]) runs the write tasks, and its log is where a
large-task warning would appear.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest
from spark_cluster import connect_server
from spark_fixtures import arrow_table

from esault import JobConfig, LocalCluster
from spark_sink import analytics
from spark_sink.session import get_session, is_remote_session, stop_session
from spark_sink.stager import SparkStager
from spark_sink.writer import BatchWriter, Outcome

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT / "tests" / "unit"))
import eo_parts  # noqa: E402
from sink_epoch_parts import A, B, C, feed, open_sink  # noqa: E402

pytestmark = [pytest.mark.system, pytest.mark.timeout(600)]  # the first test also starts the server

LARGE_TASK = "contains a task of very large size"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with connect_server(tmp_path_factory.mktemp("spark-connect")) as s:
        yield s


@pytest.fixture(scope="module")
def remote(server):
    """The sink's shared Connect session for the server (what SparkSink(master=server.url) uses)."""
    session = get_session(server.url)
    yield session
    stop_session(server.url)


def warnings_after(server, offset: int) -> list[str]:
    return [line for line in server.log.read_text(errors="replace")[offset:].splitlines() if LARGE_TASK in line]


def test_the_sink_talks_to_spark_connect_as_a_remote_client(remote, server):
    assert is_remote_session(remote)
    assert get_session(server.url) is remote, "one shared session per URL"
    assert remote.sql("SELECT 41 + 1 AS x").collect()[0].x == 42


def test_a_large_batch_reaches_the_server_without_the_large_task_warning(remote, server, tmp_path):
    big = arrow_table(40_000)
    start = len(server.log.read_text(errors="replace"))
    remote.createDataFrame(big).coalesce(1).write.parquet(str(tmp_path / "control"))  # rows in the plan
    assert warnings_after(server, start), "the control (rows as a local relation) must warn"
    start = len(server.log.read_text(errors="replace"))
    SparkStager(lambda: remote).stage(big, tmp_path / "staged")
    assert remote.read.parquet(str(tmp_path / "staged")).count() == 40_000
    assert warnings_after(server, start) == []
    assert not (tmp_path / "staged.transfer").exists(), "the transfer file is removed after the write"


def test_a_word_count_job_commits_every_row_exactly_once_over_spark_connect(remote, server, tmp_path, monkeypatch):
    monkeypatch.setenv("ESAULT_SPARK_MASTER", server.url)
    total = 1000
    with LocalCluster() as cluster:
        job = cluster.submit(eo_parts.build("spark-connect", total, rate=3000, sink="spark", table="connect_counts"),
                             JobConfig(data_dir=tmp_path / "data", elasticity=False, checkpoint_interval=0.3,
                                       message_timeout=300.0))
        assert job.wait(240), job.status()
        job.stop()
    analytics.open_table("connect_counts", analytics.default_warehouse(job.data_dir), remote)
    rows: dict[str, list[int]] = {}
    for r in remote.sql("SELECT word, count FROM connect_counts").collect():
        rows.setdefault(r.word, []).append(r["count"])
    assert {w: sorted(c) for w, c in rows.items()} == eo_parts.exact_rows(eo_parts.oracle(total))
    server_log = server.log.read_text(errors="replace")
    assert "_esault/staging/spark-connect.sink.i0.e" in server_log, "the server's tasks wrote the staging files"


def test_redelivered_epochs_and_batches_land_once_over_spark_connect(remote, server, tmp_path):
    def sink(restored):
        return open_sink(tmp_path, restored, engine="spark", table="connect_redelivered", master=server.url)

    s = sink(None)
    feed(s, A)
    s.on_checkpoint(1).result(120)
    feed(s, B)
    s.on_checkpoint(2).result(120)
    s.on_checkpoint_complete(1)
    s.wait_epochs(120)
    s.abandon()  # dies after checkpoint 2 completed, before publishing epoch 2
    s = sink(2)  # the restart publishes epoch 2 from staging
    s.on_checkpoint_complete(2)  # completions delivered again
    s.on_checkpoint_complete(1)
    feed(s, C)
    s.on_checkpoint(3).result(120)
    s.on_checkpoint_complete(3)
    s.on_checkpoint_complete(3)
    s.wait_epochs(120)
    s.close()
    analytics.open_table("connect_redelivered", tmp_path / "wh", remote)
    got = remote.sql("SELECT word, n FROM connect_redelivered").collect()
    assert Counter((r.word, r.n) for r in got) == Counter(A + B + C)

    rel = "event_date=2024-05-01/event_hour=12/esault_batch=w.0000000000"
    outcomes = []
    for _restart in range(2):
        w = BatchWriter(tmp_path / "alo", "w", SparkStager(lambda: remote))
        outcomes += [w.commit("w.0000000000", 0, rel, arrow_table(300)) for _ in range(2)]
        w.close()
    assert outcomes == [Outcome.COMMITTED] + [Outcome.ALREADY_COMMITTED] * 3
    counts = remote.read.parquet(str(tmp_path / "alo")).selectExpr("COUNT(*) AS c", "COUNT(DISTINCT n) AS d")
    assert counts.collect()[0].asDict() == {"c": 300, "d": 300}
