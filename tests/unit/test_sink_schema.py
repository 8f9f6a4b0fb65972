"""Schemas of the Spark sink: parsing, checking rows, inference, Arrow encoding."""

from __future__ import annotations

import datetime as dt
import re

import pyarrow as pa
import pytest

from esault.errors import SchemaError
from spark_sink.encode import encode
from spark_sink.schema import Column, TableSchema, infer_schema, parse_schema

UTC = dt.timezone.utc


def test_ddl_pairs_and_dicts_declare_the_same_schema():
    a = parse_schema("word STRING, count BIGINT NOT NULL")
    b = parse_schema([("word", "string"), "count bigint not null"])
    c = parse_schema({"word": "STRING", "count": "LONG"})
    assert a == b
    assert a.names == c.names == ("word", "count")
    assert a.column("count").nullable is False
    assert c.column("count").type == "BIGINT"


def test_ddl_round_trips_through_parse_and_json():
    s = parse_schema("a STRING, b INT NOT NULL, c TIMESTAMP, d DATE, e BINARY, f DOUBLE, g BOOLEAN")
    assert parse_schema(s.ddl()) == s
    assert TableSchema.from_json(s.to_json()) == s


def test_none_schema_means_infer():
    assert parse_schema(None) is None


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("word STRNG", "unsupported type 'STRNG'; use one of STRING, BIGINT"),
        ("word", "is not 'name TYPE'"),
        ("word STRING,, n INT", "has an empty column"),
        ("Word STRING, word INT", "declares column 'word' twice"),
        ("bad-name STRING", "column name 'bad-name' is invalid"),
        ([("a", "STRING", "x")], "is not a (name, type) pair"),
        ([], "schema is an empty list"),
        (42, "schema must be a DDL string"),
    ],
)
def test_a_bad_schema_is_refused_with_the_fix(spec, message):
    with pytest.raises(SchemaError, match=re.escape(message)):
        parse_schema(spec)


def test_check_names_the_column_and_what_it_needs():
    s = parse_schema("word STRING NOT NULL, count BIGINT, at TIMESTAMP, day DATE")
    assert s.check({"word": "a", "count": 1}) is None
    assert "column 'count' is BIGINT and needs an int" in s.check({"word": "a", "count": "1"})
    assert "column 'count'" in s.check({"word": "a", "count": True})  # a bool is not an int here
    assert "column 'count'" in s.check({"word": "a", "count": 2**63})
    assert "'word' is NOT NULL" in s.check({"count": 1})
    assert "field(s) 'extra' not in the table schema" in s.check({"word": "a", "extra": 1})
    assert "column 'day' is DATE" in s.check({"word": "a", "day": dt.datetime(2024, 1, 1)})
    assert s.check({"word": "a", "at": dt.datetime(2024, 1, 1, tzinfo=UTC), "day": dt.date(2024, 1, 1)}) is None


def test_doubles_accept_ints_but_ints_do_not_accept_floats():
    s = parse_schema("x DOUBLE, n INT")
    assert s.check({"x": 3, "n": 3}) is None
    assert "column 'n' is INT" in s.check({"n": 3.0})
    assert "column 'n' is INT" in s.check({"n": 2**31})


def test_inference_takes_first_seen_order_widens_ints_to_doubles_and_skips_unsupported():
    rows = [
        {"word": "a", "n": 1, "tags": ["x"], "note": None},
        {"word": "b", "n": 2.5, "flag": True, "at": dt.datetime(2024, 1, 1)},
    ]
    s = infer_schema(rows)
    assert s.names == ("word", "n", "note", "flag", "at")
    assert [c.type for c in s.columns] == ["STRING", "DOUBLE", "STRING", "BOOLEAN", "TIMESTAMP"]
    assert "'tags'" in s.check(rows[0])  # a row carrying an unsupported field is rejected later


def test_inference_with_nothing_usable_says_so():
    with pytest.raises(SchemaError, match="no field with a supported value type"):
        infer_schema([{"tags": [1]}, {"bad name": 1}])


def test_encode_sets_aside_bad_rows_and_drops_partition_columns():
    s = parse_schema("word STRING, count BIGINT, region STRING")
    rows = [
        {"word": "a", "count": 1, "region": "eu"},
        {"word": "b", "count": "two", "region": "eu"},
        {"word": "c", "region": "eu"},
    ]
    enc = encode(rows, s, drop=("region",))
    assert enc.rows == 2
    assert [i for i, _ in enc.rejected] == [1]
    assert enc.table.column_names == ["word", "count"]
    assert enc.table.to_pylist() == [{"word": "a", "count": 1}, {"word": "c", "count": None}]
    assert enc.table.schema.field("count").type == pa.int64()


def test_encode_with_every_row_bad_returns_no_table():
    enc = encode([{"x": 1}], parse_schema("y STRING"))
    assert enc.table is None and enc.rows == 0 and len(enc.rejected) == 1


def test_encode_rejects_what_arrow_cannot_hold_even_if_the_check_passed():
    s = TableSchema((Column("word", "STRING"), Column("x", "DOUBLE")))
    rows = [{"word": "a", "x": 1.5}, {"word": "b", "x": 2**60 + 1}, {"word": "c", "x": 2}]
    assert s.check(rows[1]) is None  # an int is fine for DOUBLE ...
    enc = encode(rows, s)  # ... but not one a double cannot represent exactly
    assert enc.rows == 2
    assert enc.rejected[0][0] == 1 and "column 'x' (DOUBLE) cannot hold" in enc.rejected[0][1]
    assert enc.table.to_pylist() == [{"word": "a", "x": 1.5}, {"word": "c", "x": 2.0}]


def test_timestamps_are_stored_as_utc_instants():
    s = parse_schema("at TIMESTAMP")
    local = dt.timezone(dt.timedelta(hours=2))
    enc = encode([{"at": dt.datetime(2024, 1, 1, 12, tzinfo=local)}, {"at": dt.datetime(2024, 1, 1, 12)}], s)
    got = enc.table.column("at").to_pylist()
    assert got == [dt.datetime(2024, 1, 1, 10, tzinfo=UTC), dt.datetime(2024, 1, 1, 12, tzinfo=UTC)]
