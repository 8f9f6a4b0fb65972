"""SparkSink as a bolt: acks after commit, backpressure, time-based flush, retries, restarts.

These drive the sink through BoltHarness with the pyarrow engine or a stager
a test controls (gates, failures), so they need no JVM and no sleeps.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path

import pytest
from prometheus_client import REGISTRY
from spark_fixtures import arrow_rows, rows_per_batch

import spark_sink.bolt
from esault.clock import ManualClock
from esault.errors import ConfigError, SchemaError, SinkError
from esault.metrics.registry import SINK_METRICS
from esault.testing import wait_until
from esault.testing.harness import BoltHarness
from spark_sink import SparkSink
from spark_sink.stager import ArrowStager

pytestmark = pytest.mark.system


class GatedStager(ArrowStager):
    """Blocks every stage() until the test opens the gate; `entered` says a commit is in Spark."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.gate = threading.Event()

    def stage(self, table, directory):
        self.entered.set()
        assert self.gate.wait(30), "the test never opened the gate"
        super().stage(table, directory)


class FlakyStager(ArrowStager):
    """Fails the first `failures` stage() calls with OSError."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0

    def stage(self, table, directory):
        self.calls += 1
        if self.calls <= self.failures:
            raise OSError("disk full")
        super().stage(table, directory)


def sink_params(tmp_path, **extra):
    params = {"table": "events", "schema": "key STRING, value BIGINT", "engine": "pyarrow",
              "warehouse": tmp_path / "wh", "batch_seconds": None}
    params.update(extra)
    return params


def test_tuples_are_acked_only_after_their_batch_is_committed(tmp_path):
    stager = GatedStager()
    h = BoltHarness(SparkSink, sink_params(tmp_path, engine=stager, batch_rows=3), data_dir=tmp_path)
    anchors = h.feed_many([("a", 1), ("b", 2), ("c", 3)])
    assert stager.entered.wait(10)
    assert [a.settled for a in anchors] == [False, False, False]  # Spark is still writing
    assert arrow_rows(h.bolt.table_dir) == []
    stager.gate.set()
    h.wait_acked(3, timeout=10)
    assert sorted(r["value"] for r in arrow_rows(h.bolt.table_dir)) == [1, 2, 3]
    h.close()


def test_a_full_buffer_blocks_process_until_a_commit_frees_room(tmp_path):
    stager = GatedStager()
    params = sink_params(tmp_path, engine=stager, batch_rows=2, max_buffered_batches=1)
    h = BoltHarness(SparkSink, params, data_dir=tmp_path)
    h.feed_many([("a", 1), ("b", 2)])  # batch 0 is sealed and held in the gated stager
    assert stager.entered.wait(10)
    feeder = threading.Thread(target=h.feed_many, args=([("c", 3), ("d", 4)],))
    feeder.start()  # batch 1 has no room: process() must block (backpressure on the SPU thread)
    wait_until(lambda: h.bolt.committer.blocked_adds == 1, timeout=10, message="process() blocked")
    assert feeder.is_alive() and h.acked_count == 0
    stager.gate.set()
    feeder.join(10)
    assert not feeder.is_alive()
    h.wait_acked(4, timeout=10)
    h.close()
    assert sorted(rows_per_batch(arrow_rows(h.bolt.table_dir)).values()) == [2, 2]


def test_a_partial_batch_is_committed_when_batch_seconds_pass_on_the_injected_clock(tmp_path):
    clock = ManualClock()
    params = sink_params(tmp_path, batch_rows=1000, batch_seconds=5.0, clock=clock)
    h = BoltHarness(SparkSink, params, data_dir=tmp_path)
    h.feed_many([("a", 1), ("b", 2), ("c", 3)])
    clock.advance(4.9)
    h.bolt.committer.wake()
    assert h.bolt.committer.buffered_rows == 3 and h.acked_count == 0  # not due before 5 s
    clock.advance(0.1)
    h.bolt.committer.wake()
    h.wait_acked(3, timeout=10)
    assert len(arrow_rows(h.bolt.table_dir)) == 3
    h.close()


def test_a_failing_commit_is_retried_and_after_the_last_retry_its_tuples_fail_with_the_reason(tmp_path):
    stager = FlakyStager(failures=2)
    params = sink_params(tmp_path, engine=stager, batch_rows=2, commit_retries=1, retry_backoff=0)
    with BoltHarness(SparkSink, params, data_dir=tmp_path, topology="flaky") as h:
        first = h.feed_many([("a", 1), ("b", 2)])  # attempts 1 and 2 fail: given up
        h.wait_settled(timeout=10)
        second = h.feed_many([("c", 3), ("d", 4)])  # attempt 3 succeeds: the sink kept going
        h.wait_acked(2, timeout=10)
    assert all(a.failed for a in first) and all(a.acked for a in second)
    assert first[0].reason == (
        "batch flaky.b.0.0000000000 was not committed after 2 attempt(s): OSError: disk full"
    )
    assert sorted(r["value"] for r in arrow_rows(h.bolt.table_dir)) == [3, 4]
    assert REGISTRY.get_sample_value(
        "esault_sink_commit_failures_total", {"topology": "flaky", "table": "events"}
    ) == 2


def test_a_retry_after_a_transient_failure_commits_the_batch_once(tmp_path):
    stager = FlakyStager(failures=1)
    params = sink_params(tmp_path, engine=stager, batch_rows=2, commit_retries=3, retry_backoff=0)
    with BoltHarness(SparkSink, params, data_dir=tmp_path) as h:
        h.feed_many([("a", 1), ("b", 2)])
        h.wait_acked(2, timeout=10)
    assert stager.calls == 2
    assert rows_per_batch(arrow_rows(h.bolt.table_dir)) == {"t.b.0.0000000000": 2}


def test_if_spark_cannot_start_buffered_tuples_fail_and_process_raises(tmp_path, monkeypatch):
    gate = threading.Event()

    def no_spark(*args, **kwargs):
        assert gate.wait(30)
        raise SinkError("could not start Spark: no Java")

    monkeypatch.setattr(spark_sink.bolt, "get_session", no_spark)
    h = BoltHarness(SparkSink, sink_params(tmp_path, engine="spark"), data_dir=tmp_path)
    [held] = h.feed("a", 1)  # buffered while Spark "starts"
    gate.set()
    h.wait_settled(timeout=10)
    assert held.failed and "Spark sink is not running: SinkError: could not start Spark: no Java" in held.reason
    with pytest.raises(SinkError, match="cannot commit: SinkError: could not start Spark: no Java"):
        h.feed("b", 2)
    with pytest.raises(SinkError, match="Spark sink is not running"):
        h.close()


def test_close_commits_what_is_buffered(tmp_path):
    with BoltHarness(SparkSink, sink_params(tmp_path, batch_rows=1000), data_dir=tmp_path) as h:
        h.feed_many([("a", 1), ("b", 2)])
        assert h.acked_count == 0
    assert h.acked_count == 2
    assert len(arrow_rows(h.bolt.table_dir)) == 2


def test_close_gives_up_after_close_timeout_and_fails_what_was_not_committed(tmp_path):
    stager = GatedStager()
    params = sink_params(tmp_path, engine=stager, batch_rows=1, close_timeout=0.2)
    h = BoltHarness(SparkSink, params, data_dir=tmp_path)
    in_flight = h.feed("a", 1)[0]
    assert stager.entered.wait(10)
    queued = h.feed("b", 2)[0]
    with pytest.raises(SinkError, match="did not finish committing within close_timeout=0.2s"):
        h.close()
    assert queued.failed and "close() timed out" in queued.reason
    assert not in_flight.settled  # it is still in Spark's hands ...
    stager.gate.set()
    h.wait_acked(1, timeout=10)  # ... and acked once that commit completes
    assert in_flight.acked


def test_a_restarted_sink_continues_after_its_last_batch_id(tmp_path):
    params = sink_params(tmp_path, batch_rows=2)
    with BoltHarness(SparkSink, params, data_dir=tmp_path) as h:
        h.feed_many([("a", 1), ("b", 2), ("c", 3)])
    with BoltHarness(SparkSink, params, data_dir=tmp_path) as h2:
        h2.feed_many([("d", 4), ("e", 5)])
    assert rows_per_batch(arrow_rows(h.bolt.table_dir)) == {
        "t.b.0.0000000000": 2, "t.b.0.0000000001": 1, "t.b.0.0000000002": 2,
    }


def test_sinks_of_several_spus_share_one_table_with_their_own_logs(tmp_path):
    params = sink_params(tmp_path, batch_rows=10)
    spus = [BoltHarness(SparkSink, params, data_dir=tmp_path, spu_id=i) for i in range(2)]
    for i, h in enumerate(spus):
        h.feed_many([(f"k{i}", n) for n in range(3)])
    for h in spus:
        h.close()
    assert rows_per_batch(arrow_rows(spus[0].bolt.table_dir)) == {"t.b.0.0000000000": 3, "t.b.1.0000000000": 3}
    logs = sorted(p.name for p in (spus[0].bolt.table_dir / "_esault" / "commits").iterdir())
    assert logs == ["t.b.0.log", "t.b.1.log"]


def test_a_second_live_sink_with_the_same_identity_is_refused(tmp_path):
    h = BoltHarness(SparkSink, sink_params(tmp_path), data_dir=tmp_path)
    with pytest.raises(SinkError, match="locked by another live sink writer"):
        BoltHarness(SparkSink, sink_params(tmp_path), data_dir=tmp_path)
    h.close()


def test_a_sink_declaring_another_schema_for_an_existing_table_is_refused(tmp_path):
    BoltHarness(SparkSink, sink_params(tmp_path), data_dir=tmp_path).close()
    with pytest.raises(SchemaError, match=re.escape(
        "the table at " + str((tmp_path / "wh" / "events").resolve())
        + " has columns (`key` STRING, `value` BIGINT, `event_time` TIMESTAMP)"
    )):
        BoltHarness(SparkSink, sink_params(tmp_path, schema="key STRING, value DOUBLE"), data_dir=tmp_path)


def test_key_grouped_wiring_is_refused_in_open(tmp_path):
    with pytest.raises(SinkError, match=re.escape(
        "SparkSink 'sink' is wired with key_grouping, which starts one sink per key; wire it with "
        "shuffle_grouping or global_grouping instead, e.g. set_bolt('sink', SparkSink, ...).shuffle_grouping"
    )):
        BoltHarness(SparkSink, sink_params(tmp_path), data_dir=tmp_path, unit="sink", per_key=True, key="k")


@pytest.mark.parametrize(
    ("params", "error", "message"),
    [
        ({"table": "my-table"}, ConfigError, "is not a valid Spark table name"),
        ({"engine": "duckdb"}, ConfigError, "engine must be 'spark' or 'pyarrow'"),
        ({"batch_rows": 0}, ConfigError, "batch_rows must be a whole number >= 1"),
        ({"max_buffered_batches": 0}, ConfigError, "max_buffered_batches must be a whole number >= 1"),
        ({"commit_retries": -1}, ConfigError, "commit_retries must be a whole number >= 0"),
        ({"close_timeout": 0}, ConfigError, "close_timeout must be seconds > 0"),
        ({"schema": "x BLOB"}, SchemaError, "unsupported type 'BLOB'"),
        ({"partition_by": ["region"], "schema": "region DOUBLE"}, SchemaError,
         "partition_by column 'region' is DOUBLE; partition by a STRING/BIGINT/INT/BOOLEAN/DATE column"),
        ({"partition_by": ["region"], "schema": "x STRING"}, SchemaError,
         "partition_by column 'region' is not in the schema"),
        ({"schema": "event_date STRING"}, SchemaError, "event_date are added by the sink"),
        ({"schema": "event_time STRING"}, SchemaError, "event time column 'event_time' must be TIMESTAMP"),
    ],
)
def test_bad_params_are_refused_with_the_fix(tmp_path, params, error, message):
    with pytest.raises(error, match=re.escape(message)):
        BoltHarness(SparkSink, {"engine": "pyarrow", "warehouse": tmp_path, **params}, data_dir=tmp_path)


def test_to_row_is_the_place_to_reshape_rows(tmp_path):
    class WordLengths(SparkSink):
        def to_row(self, tup):
            return {"word": tup.key, "length": len(tup.key)}

    params = sink_params(tmp_path, schema="word STRING, length INT", partition_by=[], event_time_column=None)
    with BoltHarness(WordLengths, params, data_dir=tmp_path) as h:
        h.feed_many([("spark", None), ("sink", None)])
    rows = arrow_rows(h.bolt.table_dir)
    assert sorted((r["word"], r["length"]) for r in rows) == [("sink", 4), ("spark", 5)]
    assert set(rows[0]) == {"word", "length", "esault_batch"}


def test_the_default_row_of_a_plain_value_is_key_value_and_event_time(tmp_path):
    params = sink_params(tmp_path, wall_clock=lambda: 1_700_000_000.0)
    with BoltHarness(SparkSink, params, data_dir=tmp_path) as h:
        h.feed("a", 1)
    [row] = arrow_rows(h.bolt.table_dir)
    assert (row["key"], row["value"], row["event_time"].timestamp()) == ("a", 1, 1_700_000_000.0)
    assert (str(row["event_date"]), row["event_hour"]) == ("2023-11-14", 22)


def test_the_sink_metric_names_are_the_ones_esault_publishes():
    from spark_sink import metrics

    ours = {m.describe()[0].name: m.describe()[0].type for m in (
        metrics.ROWS_COMMITTED, metrics.BATCHES, metrics.COMMIT_SECONDS, metrics.ROWS_REJECTED,
        metrics.COMMIT_FAILURES)}
    published = {s.name.removesuffix("_total"): s.type for s in SINK_METRICS}
    assert ours == published


def test_to_row_must_return_a_dict(tmp_path):
    class Broken(SparkSink):
        def to_row(self, tup):
            return [tup.key]

    h = BoltHarness(Broken, sink_params(tmp_path), data_dir=tmp_path)
    with pytest.raises(SinkError, match=re.escape("Broken.to_row() must return a dict, got list ['a']")):
        h.feed("a", 1)
    h.close()


def test_process_before_open_is_an_error(tmp_path):
    h = BoltHarness(SparkSink, sink_params(tmp_path), data_dir=tmp_path, open=False)
    with pytest.raises(SinkError, match=re.escape("SparkSink 'events': process() was called before open()")):
        h.bolt.process(None)


def test_a_sink_partitioning_an_existing_table_differently_is_refused(tmp_path):
    params = sink_params(tmp_path, schema=None)
    with BoltHarness(SparkSink, params, data_dir=tmp_path) as h:
        h.feed("a", 1)  # infers and stores the schema, partitioned by event_date, event_hour
    with pytest.raises(SchemaError, match=re.escape(
        "is partitioned by (event_date, event_hour, esault_batch), this sink by (esault_batch)"
    )):
        BoltHarness(SparkSink, {**params, "partition_by": []}, data_dir=tmp_path)


def test_analytics_arguments_are_checked_before_spark_starts(monkeypatch):
    from spark_sink import analytics

    monkeypatch.delenv(analytics.WAREHOUSE_ENV, raising=False)
    with pytest.raises(SinkError, match=re.escape("which warehouse? pass warehouse=")):
        analytics.resolve_warehouse(None)
    with pytest.raises(SinkError, match="top_k agg must be one of count, sum, max"):
        analytics.top_k("t", agg="avg")
    with pytest.raises(SinkError, match=re.escape("top_k(agg='max') needs value=<column to max>")):
        analytics.top_k("t", agg="max")
    with pytest.raises(SinkError, match="top_k k must be a whole number >= 1"):
        analytics.top_k("t", k=0)
    monkeypatch.setenv(analytics.WAREHOUSE_ENV, "/data/wh")
    assert analytics.default_warehouse("/job") == Path("/data/wh")
    monkeypatch.delenv(analytics.WAREHOUSE_ENV)
    assert analytics.default_warehouse("/job") == Path("/job/warehouse")


def test_analytics_on_a_directory_without_a_table_says_what_to_check(tmp_path):
    from spark_sink import analytics

    with pytest.raises(SinkError, match="no sink table at .* check the warehouse and table name"):
        analytics.open_table("missing", tmp_path)
