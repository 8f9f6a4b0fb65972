"""SparkSink against a real Spark standalone cluster (Master + one Worker on 127.0.0.1, from pyspark).

One cluster and one driver process serve the module: the driver (a child Python process, since a
process has one classic SparkSession and the other Spark tests hold a local one) runs, against
spark://127.0.0.1:PORT,
  1. a large batch the old way (createDataFrame(arrow).coalesce(1): rows as a local collection) as a
     control, then the same batch through SparkStager, with markers between them on stderr, where the
     driver's JVM logs;
  2. an esault word count (exactly-once, 0.3 s checkpoints) into a Spark table through the sink bolt;
  3. a re-delivered epoch completion, a restart that publishes an epoch staged before the instance
     died, and a batch id committed again after a "restart" (the at-least-once protocol's retry);
and reads every table back with Spark SQL on the cluster. The tests assert on what it printed, on
the executors' logs in the worker's directory, and on the tables.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from spark_cluster import standalone_cluster

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT / "tests" / "system"))
sys.path.insert(0, str(ROOT / "tests" / "unit"))
import eo_parts  # noqa: E402

pytestmark = [pytest.mark.system, pytest.mark.timeout(600)]  # the first test also starts the cluster

LARGE_TASK = "contains a task of very large size"
BIG_ROWS = 40_000  # ~2 MB of Arrow: the old path's one task is over Spark's 1000 KiB warning threshold
WORDS_TOTAL = 1500  # sentences through the word count
MARK = "=== esault-test:"

DRIVER = """
import json, sys
sys.path[:0] = {paths!r}
from pathlib import Path
tmp = Path({tmp!r})

import time
t0 = time.monotonic()
def mark(what):
    print({mark!r} + what, file=sys.stderr, flush=True)
    print(f"{{what}} at {{time.monotonic() - t0:.1f}}s", file=sys.stderr, flush=True)

from spark_sink.session import get_session
from spark_sink.stager import SparkStager
from spark_fixtures import arrow_table
out = {{}}
spark = get_session()  # ESAULT_SPARK_MASTER: the cluster
out["master"] = spark.sparkContext.master
big = arrow_table({big})
mark("control")
spark.createDataFrame(big).coalesce(1).write.parquet(str(tmp / "control"))
mark("stager")
SparkStager(lambda: spark).stage(big, tmp / "stager" / "b")
out["stager_rows"] = spark.read.parquet(str(tmp / "stager" / "b")).count()
mark("job")

import eo_parts
from esault import JobConfig, LocalCluster
from spark_sink import analytics
data = tmp / "job"
with LocalCluster() as cluster:
    job = cluster.submit(eo_parts.build("spark-cluster", {total}, rate=3000, sink="spark", table="cluster_counts"),
                         JobConfig(data_dir=data, elasticity=False, checkpoint_interval=0.3, message_timeout=300.0))
    assert job.wait(240), job.status()
    job.stop()
analytics.open_table("cluster_counts", analytics.default_warehouse(job.data_dir), spark)
out["job_rows"] = [[r.word, r["count"]] for r in spark.sql("SELECT word, count FROM cluster_counts").collect()]
mark("redeliver")

from sink_epoch_parts import A, B, C, feed, open_sink
def sink(restored):
    return open_sink(tmp, restored, engine="spark", table="redelivered")
s = sink(None)
feed(s, A); s.on_checkpoint(1).result(120)
feed(s, B); s.on_checkpoint(2).result(120)
s.on_checkpoint_complete(1); s.wait_epochs(120)
s.abandon()  # the instance dies after checkpoint 2 completed, before it published epoch 2
s = sink(2)  # the restart publishes epoch 2 from the executors' staging files
s.on_checkpoint_complete(2); s.on_checkpoint_complete(1)  # completions delivered again
feed(s, C); s.on_checkpoint(3).result(120); s.on_checkpoint_complete(3)
s.on_checkpoint_complete(3)
s.wait_epochs(120); s.close()
analytics.open_table("redelivered", tmp / "wh", spark)
out["epoch_rows"] = [[r.word, r.n] for r in spark.sql("SELECT word, n FROM redelivered").collect()]

from spark_sink.writer import BatchWriter
rel = "event_date=2024-05-01/event_hour=12/esault_batch=w.0000000000"
outcomes = []
for _attempt in range(2):  # the same batch, then the same batch from a restarted writer
    w = BatchWriter(tmp / "alo", "w", SparkStager(lambda: spark))
    outcomes.append(w.commit("w.0000000000", 0, rel, arrow_table(500)).value)
    outcomes.append(w.commit("w.0000000000", 0, rel, arrow_table(500)).value)
    w.close()
out["alo_outcomes"] = outcomes
spark.read.parquet(str(tmp / "alo")).createOrReplaceTempView("alo")
out["alo_rows"] = spark.sql("SELECT COUNT(*) AS c, COUNT(DISTINCT n) AS d FROM alo").collect()[0].asDict()
mark("end")
print(json.dumps(out), flush=True)
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with standalone_cluster(tmp_path_factory.mktemp("spark-standalone")) as c:
        yield c


@pytest.fixture(scope="module")
def run(cluster, tmp_path_factory):
    """The driver's run against the cluster: (its JSON output, its stderr split at the markers)."""
    tmp = tmp_path_factory.mktemp("driver")
    script = DRIVER.format(paths=[str(ROOT), str(ROOT / "tests" / "system"), str(ROOT / "tests" / "unit"),
                                  str(ROOT / "examples")],
                           tmp=str(tmp), mark=MARK, big=BIG_ROWS, total=WORDS_TOTAL)
    env = {**os.environ, "ESAULT_SPARK_MASTER": cluster.master_url, "SPARK_LOCAL_IP": "127.0.0.1"}
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600,
                          cwd=tmp)
    assert proc.returncode == 0, f"driver failed ({proc.returncode}):\n{proc.stderr[-6000:]}"
    sections: dict[str, str] = {}
    name = "start"
    for line in proc.stderr.splitlines():
        if line.startswith(MARK):
            name = line[len(MARK):]
            continue
        sections[name] = sections.get(name, "") + line + "\n"
    return json.loads(proc.stdout.strip().splitlines()[-1]), sections


def test_the_driver_runs_on_the_standalone_cluster_and_its_executors_write_the_batches(cluster, run):
    out, _ = run
    assert out["master"] == cluster.master_url
    apps = cluster.state()
    assert [a["name"] for a in apps.get("completedapps", []) + apps.get("activeapps", [])] == ["esault-spark-sink"]
    # The executors (their logs are in the worker's directory), not the driver, committed the write tasks
    # of the staging directories: the word count's epochs and the re-delivery test's.
    saved = [line for line in cluster.executor_logs().splitlines() if "Saved output of task" in line]
    assert any("/warehouse/cluster_counts/_esault/staging/spark-cluster.sink.i0.e" in line for line in saved)
    assert any("/wh/redelivered/_esault/staging/job.sink.i0.e" in line for line in saved)
    assert out["stager_rows"] == BIG_ROWS


def test_a_large_batch_reaches_the_executors_without_the_large_task_warning(run):
    _, stderr = run
    assert LARGE_TASK in stderr.get("control", ""), "the control (rows as a local collection) must warn"
    assert LARGE_TASK not in stderr.get("stager", ""), stderr.get("stager", "")
    assert LARGE_TASK not in stderr.get("job", "") + stderr.get("redeliver", "")


def test_a_word_count_through_the_sink_on_the_cluster_has_every_row_exactly_once(run):
    out, _ = run
    rows: dict[str, list[int]] = {}
    for word, count in out["job_rows"]:
        rows.setdefault(word, []).append(count)
    expected = eo_parts.exact_rows(eo_parts.oracle(WORDS_TOTAL))
    assert {w: sorted(c) for w, c in rows.items()} == expected, "a missing or duplicate row"
    assert len(out["job_rows"]) == sum(eo_parts.oracle(WORDS_TOTAL).values())


def test_redelivered_completions_and_batches_are_written_once(run):
    out, _ = run
    from sink_epoch_parts import A, B, C

    assert Counter(map(tuple, out["epoch_rows"])) == Counter(A + B + C)
    assert out["alo_outcomes"] == ["committed", "already-committed", "already-committed", "already-committed"]
    assert out["alo_rows"] == {"c": 500, "d": 500}
