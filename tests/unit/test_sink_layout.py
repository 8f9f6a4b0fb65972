"""Where the Spark sink puts rows: partition values, directory names, batch ids."""

from __future__ import annotations

import datetime as dt

import pytest

from esault.errors import ConfigError, SchemaError
from spark_sink.layout import (
    PartitionScheme, batch_id, escape_path_name, parse_partition_by, partition_dir_value, writer_id,
)

UTC = dt.timezone.utc


def test_default_partitioning_is_the_utc_date_and_hour_of_the_event_time():
    scheme = PartitionScheme(None, "event_time")
    row = {"event_time": dt.datetime(2024, 3, 1, 1, 30, tzinfo=dt.timezone(dt.timedelta(hours=3)))}
    assert scheme.place(row, now=0.0) == (dt.date(2024, 2, 29), 22)
    assert row["event_time"] == dt.datetime(2024, 2, 29, 22, 30, tzinfo=UTC)
    assert scheme.partition_path((dt.date(2024, 2, 29), 22)) == "event_date=2024-02-29/event_hour=22"


def test_a_row_without_event_time_gets_now_and_epoch_seconds_are_accepted():
    scheme = PartitionScheme(None, "event_time")
    row: dict = {"k": 1}
    assert scheme.place(row, now=86400.0 + 3600 * 5) == (dt.date(1970, 1, 2), 5)
    assert row["event_time"] == dt.datetime(1970, 1, 2, 5, tzinfo=UTC)
    assert scheme.place({"event_time": 0}, now=1e9) == (dt.date(1970, 1, 1), 0)
    naive = {"event_time": dt.datetime(2024, 1, 1, 7)}
    assert scheme.place(naive, now=0) == (dt.date(2024, 1, 1), 7)  # naive means UTC


def test_an_unusable_event_time_rejects_the_row():
    with pytest.raises(SchemaError, match="event time 'event_time' needs a datetime or epoch seconds"):
        PartitionScheme(None, "event_time").place({"event_time": "yesterday"}, now=0)


def test_user_partition_columns_take_row_values_and_refuse_floats():
    scheme = PartitionScheme(("region", "day"), "event_time")
    assert scheme.place({"region": "eu", "day": dt.date(2024, 1, 2)}, now=0) == ("eu", dt.date(2024, 1, 2))
    assert scheme.batch_path(("eu", None), "t.u.0.0000000007") == (
        "region=eu/day=__HIVE_DEFAULT_PARTITION__/esault_batch=t.u.0.0000000007"
    )
    with pytest.raises(SchemaError, match="partition column 'region' needs a str, int, bool or date"):
        scheme.place({"region": 1.5}, now=0)


def test_unpartitioned_tables_only_have_the_batch_directory():
    scheme = PartitionScheme((), None)
    assert scheme.place({"x": 1}, now=0) == ()
    assert scheme.batch_path((), "b") == "esault_batch=b"


def test_partition_values_are_escaped_like_spark_does():
    assert escape_path_name("a/b=c%d") == "a%2Fb%3Dc%25d"
    assert escape_path_name("plain words-ok_1") == "plain words-ok_1"
    assert partition_dir_value(True) == "true"
    assert partition_dir_value("") == "__HIVE_DEFAULT_PARTITION__"
    assert partition_dir_value(dt.date(2024, 1, 2)) == "2024-01-02"


def test_bad_partitioning_is_refused_at_construction():
    with pytest.raises(ConfigError, match="needs an event time"):
        PartitionScheme(None, None)
    with pytest.raises(ConfigError, match="must not name 'esault_batch'"):
        PartitionScheme(("esault_batch",), None)
    with pytest.raises(ConfigError, match="names a column twice"):
        PartitionScheme(("a", "a"), None)
    with pytest.raises(ConfigError, match="partition_by must be None"):
        parse_partition_by(3)
    assert parse_partition_by("region") == ("region",)


def test_writer_and_batch_ids_are_file_safe_stable_and_sort_in_commit_order():
    assert writer_id("wordcount", "sink", 3) == "wordcount.sink.3"
    odd = writer_id("my topology/1", "sink", 0)
    assert odd == writer_id("my topology/1", "sink", 0)
    assert odd != writer_id("my_topology_1", "sink", 0)
    assert "/" not in odd and " " not in odd
    ids = [batch_id("w.u.0", n) for n in (2, 10, 100)]
    assert ids == sorted(ids)
