"""SparkStager's pure parts: the Spark schema it reads the transfer file with, and where that file goes."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_sink.schema import TableSchema, arrow_type, parse_schema
from spark_sink.stager import ArrowStager, spark_schema, transfer_dir
from spark_sink.writer import BatchWriter

TYPES = ["STRING", "BIGINT", "INT", "DOUBLE", "FLOAT", "BOOLEAN", "TIMESTAMP", "DATE", "BINARY"]
SPARK_NAMES = {"STRING": "string", "BIGINT": "bigint", "INT": "int", "DOUBLE": "double", "FLOAT": "float",
               "BOOLEAN": "boolean", "TIMESTAMP": "timestamp", "DATE": "date", "BINARY": "binary"}


@pytest.mark.parametrize("type_name", TYPES)
def test_every_column_type_is_read_back_by_spark_as_the_type_the_table_declares(type_name):
    schema = parse_schema(f"c {type_name}")
    assert isinstance(schema, TableSchema)
    struct = spark_schema(schema.arrow_schema())
    assert [(f.name, f.dataType.simpleString()) for f in struct.fields] == [("c", SPARK_NAMES[type_name])]


def test_timestamps_stay_instants_not_local_wall_times():
    import pyarrow as pa

    struct = spark_schema(pa.schema([("t", arrow_type("TIMESTAMP"))]))
    assert struct.fields[0].dataType.simpleString() == "timestamp"  # not timestamp_ntz


def test_a_transfer_file_left_by_a_crash_is_deleted_when_its_writer_reopens(tmp_path):
    staging = tmp_path / "t" / "_esault" / "staging"
    left = transfer_dir(staging / "job.sink.i0.e000000000003.p0000")
    assert left.parent == staging, "under staging/, never inside a partition directory"
    left.mkdir(parents=True)
    (left / "batch.parquet").write_bytes(b"half a file")
    other = transfer_dir(staging / "job.sink.i1.e000000000003.p0000")  # another writer's, maybe in flight
    other.mkdir()
    writer = BatchWriter(tmp_path / "t", "job.sink.i0", ArrowStager())
    writer.close()
    assert writer.stats.recovered.staging_removed == (left.name,)
    assert not left.exists() and other.exists()
