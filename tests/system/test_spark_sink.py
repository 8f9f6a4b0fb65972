"""SparkSink against real PySpark (local[2], one session for the run).

Rows round-trip, idempotent commits, a commit cut short at every step of the
protocol, rejected rows, and the analytics queries.
"""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter

import pytest
from prometheus_client import REGISTRY
from spark_fixtures import arrow_table, make_rows, rows_per_batch, spark_rows

from esault.errors import SinkError
from esault.testing.harness import BoltHarness
from spark_sink import SparkSink, analytics
from spark_sink.failpoints import STEPS, InjectedCrash, StepFailpoint
from spark_sink.layout import TablePaths
from spark_sink.rejects import read_rejected
from spark_sink.stager import SparkStager
from spark_sink.writer import BatchWriter, Outcome

pytestmark = pytest.mark.system

UTC = dt.timezone.utc


def sample(name: str, topology: str, table: str) -> float:
    return REGISTRY.get_sample_value(name, {"topology": topology, "table": table}) or 0.0


def test_rows_written_through_the_sink_are_the_rows_spark_sql_reads_back(spark, tmp_path, table_name):
    params = {"table": table_name, "schema": "word STRING, n BIGINT", "batch_rows": 400,
              "warehouse": tmp_path / "wh"}
    hours = [dt.datetime(2024, 5, 1, h, 30, tzinfo=UTC) for h in (10, 11)]
    sent = [{"word": f"w{i % 17}", "n": i, "event_time": hours[i % 2]} for i in range(1000)]
    with BoltHarness(SparkSink, params, data_dir=tmp_path, topology="roundtrip") as h:
        for row in sent:
            h.feed(row["word"], row)
        h.wait_acked(800, timeout=90)  # two full batches of 400, before close() flushes the rest
    assert (h.acked_count, h.failed_count, h.double_settled) == (1000, 0, [])

    got = spark.sql(f"SELECT word, n, event_time, event_date, event_hour, esault_batch FROM {table_name}").collect()
    assert Counter((r.word, r.n) for r in got) == Counter((r["word"], r["n"]) for r in sent)
    by_n = {r.n: r for r in got}
    assert by_n[3].event_time.replace(tzinfo=UTC) == hours[1]
    assert (by_n[3].event_date, by_n[3].event_hour) == (dt.date(2024, 5, 1), 11)
    # 1000 rows, flushes at 400 rows each split into the two hours: 6 batches.
    assert len({r.esault_batch for r in got}) == 6
    assert h.bolt.stats()["rows_committed"] == 1000
    assert sample("esault_sink_rows_committed_total", "roundtrip", table_name) == 1000
    assert sample("esault_sink_batches_total", "roundtrip", table_name) == 6
    assert sample("esault_sink_commit_seconds_count", "roundtrip", table_name) == 6


def test_the_same_batch_committed_twice_appears_once(spark, tmp_path):
    table_dir = tmp_path / "t"
    rel = "event_date=2024-05-01/event_hour=12/esault_batch=w.0000000000"
    writer = BatchWriter(table_dir, "w", SparkStager(lambda: spark))
    assert writer.commit("w.0000000000", 0, rel, arrow_table(50)) is Outcome.COMMITTED
    assert writer.commit("w.0000000000", 0, rel, arrow_table(50)) is Outcome.ALREADY_COMMITTED
    writer.close()
    again = BatchWriter(table_dir, "w", SparkStager(lambda: spark))  # after a restart
    assert again.commit("w.0000000000", 0, rel, arrow_table(50)) is Outcome.ALREADY_COMMITTED
    again.close()
    rows = spark_rows(spark, table_dir)
    assert len(rows) == 50 and sorted(r["n"] for r in rows) == list(range(50))


@pytest.mark.parametrize("step", STEPS)
def test_a_commit_cut_short_leaves_no_partial_batch_and_the_retry_lands_exactly_once(spark, tmp_path, step):
    table_dir = tmp_path / "t"
    paths = TablePaths(table_dir)
    rel = "event_date=2024-05-01/event_hour=12/esault_batch=w.0000000001"
    earlier = "event_date=2024-05-01/event_hour=12/esault_batch=w.0000000000"
    first = BatchWriter(table_dir, "w", SparkStager(lambda: spark))
    first.commit("w.0000000000", 0, earlier, arrow_table(30, start=1000))  # must stay untouched
    first.failpoint = StepFailpoint(step, "raise")
    with pytest.raises(InjectedCrash):
        first.commit("w.0000000001", 1, rel, arrow_table(200))
    first.close()  # the process is gone: its lock is released, nothing else runs

    visible = rows_per_batch(spark_rows(spark, table_dir))
    published = STEPS.index(step) >= STEPS.index("published")
    assert visible == ({"w.0000000000": 30, "w.0000000001": 200} if published else {"w.0000000000": 30})

    second = BatchWriter(table_dir, "w", SparkStager(lambda: spark))  # restart: recovery runs
    rec = second.stats.recovered
    assert rec.rolled_forward == (("w.0000000001",) if step == "published" else ())
    assert rec.aborted == (("w.0000000001",) if step == "begun" else ())
    assert not [p for p in paths.staging.iterdir()], "leftover staging must be removed"
    assert second.next_seq == (2 if STEPS.index(step) >= STEPS.index("begun") else 1)
    outcome = second.commit("w.0000000001", 1, rel, arrow_table(200))  # the replayed batch
    assert outcome is (Outcome.ALREADY_COMMITTED if published else Outcome.COMMITTED)
    second.close()
    assert rows_per_batch(spark_rows(spark, table_dir)) == {"w.0000000000": 30, "w.0000000001": 200}


def test_rows_that_do_not_fit_go_to_the_rejected_file_with_their_reason_and_never_stop_the_sink(
    spark, tmp_path, table_name
):
    params = {"table": table_name, "schema": "word STRING NOT NULL, n BIGINT", "batch_rows": 100,
              "warehouse": tmp_path / "wh"}
    with BoltHarness(SparkSink, params, data_dir=tmp_path, topology="rejects") as h:
        h.feed("a", {"word": "a", "n": 1})
        h.feed("b", {"word": "b", "n": "two"})  # wrong type
        h.feed("c", {"word": "c", "n": 3, "colour": "red"})  # a field the table does not have
        h.feed("d", {"n": 4})  # NOT NULL word missing (the key goes to no column: none is declared)
        h.feed("e", {"word": "e", "n": 5, "event_time": "noon"})  # unusable event time
        h.feed("f", {"word": "f", "n": 6})
    assert (h.acked_count, h.failed_count) == (5, 0)  # 5 deferred and acked; 'e' acked at once
    assert sorted(r["word"] for r in spark_rows(spark, h.bolt.table_dir)) == ["a", "f"]

    rejected = {r["row"].get("word", "d"): r for r in read_rejected(h.bolt.rejected_path)}
    assert sorted(rejected) == ["b", "c", "d", "e"]
    assert "column 'n' is BIGINT and needs an int" in rejected["b"]["reason"]
    assert "field(s) 'colour' not in the table schema" in rejected["c"]["reason"]
    assert "column 'word' is NOT NULL but the row has no value for it" in rejected["d"]["reason"]
    assert "event time 'event_time' needs a datetime" in rejected["e"]["reason"]
    assert rejected["b"]["row"] == {"word": "b", "n": "two", "event_time": rejected["b"]["row"]["event_time"]}
    assert rejected["b"]["batch"] is not None and rejected["e"]["batch"] is None
    assert h.bolt.stats()["rows_rejected"] == 4
    assert sample("esault_sink_rows_rejected_total", "rejects", table_name) == 4


def test_an_inferred_schema_is_stored_and_enforced_on_later_batches(spark, tmp_path, table_name):
    params = {"table": table_name, "batch_rows": 2, "warehouse": tmp_path / "wh", "key_column": None}
    with BoltHarness(SparkSink, params, data_dir=tmp_path) as h:
        h.feed("a", {"word": "a", "n": 1})
        h.feed("b", {"word": "b", "n": 2})
        h.wait_acked(2, timeout=60)
        h.feed("c", {"word": "c", "n": "three"})
        h.feed("d", {"word": "d", "n": 4})
    meta = json.loads(TablePaths(h.bolt.table_dir).schema_file.read_text())
    assert meta["columns"] == [["word", "STRING", True], ["n", "BIGINT", True], ["event_time", "TIMESTAMP", True]]
    assert [r["reason"] for r in read_rejected(h.bolt.rejected_path)] == [
        "column 'n' is BIGINT and needs an int in the 64-bit range, got str 'three'"
    ]
    assert sorted(r.word for r in spark.sql(f"SELECT word FROM {table_name}").collect()) == ["a", "b", "d"]


def test_analytics_queries_the_table_with_spark_sql(spark, tmp_path, table_name):
    base = dt.datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
    rows = [("apple", 3, 0), ("pear", 1, 0), ("apple", 7, 1), ("fig", 2, 1), ("pear", 9, 2), ("fig", 1, 2)]
    params = {"table": table_name, "schema": "word STRING, count BIGINT", "key_column": "word",
              "value_column": "count", "engine": "pyarrow", "warehouse": tmp_path / "wh"}
    with BoltHarness(SparkSink, params, data_dir=tmp_path) as h:
        for word, count, minute in rows:
            h.feed(word, {"count": count, "event_time": base + dt.timedelta(minutes=minute, seconds=5)})
    warehouse = tmp_path / "wh"  # written without Spark; any process can open it by path
    assert analytics.top_k(table_name, k=2, key="word", value="count", agg="max", warehouse=warehouse) == [
        ("pear", 9), ("apple", 7)
    ]
    assert analytics.top_k(table_name, k=3, key="word") == [("apple", 2), ("fig", 2), ("pear", 2)]
    assert analytics.top_k(table_name, k=1, key="word", value="count", agg="sum") == [("apple", 10)]
    per_minute = analytics.counts_per_minute(table_name)
    assert [(m.replace(tzinfo=UTC), n) for m, n in per_minute] == [
        (base, 2), (base + dt.timedelta(minutes=1), 2), (base + dt.timedelta(minutes=2), 2)
    ]


def test_partition_values_spark_must_escape_round_trip(spark, tmp_path, table_name):
    params = {"table": table_name, "schema": "tag STRING, n BIGINT", "partition_by": ["tag"],
              "key_column": None, "engine": "pyarrow", "warehouse": tmp_path / "wh", "batch_rows": 100}
    tags = ["a/b", "x=y", "100%", "plain", "sp ace", None]
    with BoltHarness(SparkSink, params, data_dir=tmp_path) as h:
        for i, tag in enumerate(tags):
            h.feed(None, {"tag": tag, "n": i})
    got = analytics.open_table(table_name, tmp_path / "wh", spark).select("tag", "n").collect()
    assert sorted((r.n, r.tag) for r in got) == list(enumerate(tags))


def test_a_sink_writes_and_another_reader_sees_only_whole_batches(spark, tmp_path, table_name):
    """The table is registered by name in the sink's session and reflects each commit."""
    params = {"table": table_name, "schema": "word STRING, n BIGINT", "batch_rows": 50,
              "warehouse": tmp_path / "wh", "key_column": None}
    with BoltHarness(SparkSink, params, data_dir=tmp_path) as h:
        for row in make_rows(50):
            h.feed(row["word"], row)
        h.wait_acked(50, timeout=60)
        assert spark.sql(f"SELECT COUNT(*) AS c FROM {table_name}").collect()[0].c == 50
        for row in make_rows(50, start=50):
            h.feed(row["word"], row)
        h.wait_acked(100, timeout=60)
        assert spark.sql(f"SELECT COUNT(*) AS c FROM {table_name}").collect()[0].c == 100


def test_a_table_name_registered_at_another_location_is_refused(spark, tmp_path, table_name):
    params = {"table": table_name, "schema": "word STRING", "key_column": None, "batch_rows": 1}
    with BoltHarness(SparkSink, {**params, "warehouse": tmp_path / "one"}, data_dir=tmp_path) as h:
        h.feed("a", {"word": "a"})
    elsewhere = BoltHarness(SparkSink, {**params, "warehouse": tmp_path / "two"}, data_dir=tmp_path)
    with pytest.raises(SinkError, match=(
        f"Spark table '{table_name}' is already registered at .*/one/{table_name}, not .*/two/{table_name}; "
        "use another table name"
    )):
        elsewhere.close()  # set-up (on the committer thread) failed; close() reports why
