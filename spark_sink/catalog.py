"""Register a sink table in Spark's catalog so Spark SQL can query it by name.

The table is EXTERNAL (USING parquet LOCATION <table dir>) with its partitions
discovered from the directory tree, not tracked in the catalog: committing a
batch needs no catalog call, only a cheap REFRESH TABLE so this session's
cached file listing picks the new directory up.
"""

from __future__ import annotations

import threading
from urllib.parse import urlparse
from pathlib import Path
from typing import TYPE_CHECKING

from esault.errors import SinkError
from spark_sink.schema import Column, TableSchema

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_lock = threading.Lock()


def create_table_sql(name: str, location: Path, schema: TableSchema, partition_columns: tuple[Column, ...]) -> str:
    """CREATE TABLE IF NOT EXISTS for data columns + partition columns (in directory order)."""
    cols = schema.columns + partition_columns
    parts = ", ".join(f"`{c.name}`" for c in partition_columns)
    loc = str(Path(location).resolve()).replace("\\", "\\\\").replace("'", "\\'")
    # NOT NULL is enforced by the sink; Spark ignores it for file-based tables.
    col_ddl = ", ".join(f"`{c.name}` {c.type}" for c in cols)
    return f"CREATE TABLE IF NOT EXISTS `{name}` ({col_ddl}) USING parquet PARTITIONED BY ({parts}) LOCATION '{loc}'"


def ensure_table(
    spark: "SparkSession",
    name: str,
    location: Path,
    schema: TableSchema,
    partition_columns: tuple[Column, ...],
) -> None:
    """Create the catalog entry if missing; refuse a same-named table elsewhere."""
    location = Path(location).resolve()
    with _lock:
        if spark.catalog.tableExists(name):
            existing = table_location(spark, name)
            if existing is not None and Path(existing) != location:
                raise SinkError(
                    f"Spark table {name!r} is already registered at {existing}, not {location}; "
                    f"use another table name, or DROP TABLE {name} first"
                )
            return
        old = spark.conf.get("spark.sql.hive.manageFilesourcePartitions", "true")
        spark.conf.set("spark.sql.hive.manageFilesourcePartitions", "false")
        try:
            spark.sql(create_table_sql(name, location, schema, partition_columns))
        finally:
            spark.conf.set("spark.sql.hive.manageFilesourcePartitions", old or "true")


def table_location(spark: "SparkSession", name: str) -> str | None:
    for row in spark.sql(f"DESCRIBE TABLE EXTENDED `{name}`").collect():
        if row.col_name == "Location":
            loc = str(row.data_type)
            return urlparse(loc).path if loc.startswith("file:") else loc
    return None


def refresh_table(spark: "SparkSession", name: str) -> None:
    """Drop this session's cached file listing of the table (cheap)."""
    spark.catalog.refreshTable(name)
