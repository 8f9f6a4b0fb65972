"""Batch analytics over a sink table with Spark SQL: register it, top-k keys, rows per minute.

    from spark_sink import analytics
    warehouse = analytics.default_warehouse(job.data_dir)      # where the sink wrote
    top = analytics.top_k("word_counts", k=5, key="word", value="count", agg="max", warehouse=warehouse)
    print(analytics.format_rows(top, ("word", "count")))

A table is found at <warehouse>/<table> and registered from its
_esault/schema.json, so any process (not only the one running the sink) can
query it. Only committed batches are visible: a batch directory appears in the
table by one atomic rename. Calls start the shared SparkSession if needed.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from esault.errors import SinkError
from spark_sink.catalog import ensure_table, refresh_table
from spark_sink.layout import TablePaths
from spark_sink.schema import check_column_name
from spark_sink.session import get_session
from spark_sink.table_meta import load_meta

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

WAREHOUSE_ENV = "ESAULT_SPARK_WAREHOUSE"

_AGGREGATES = {"count": "COUNT(*)", "sum": "SUM({v})", "max": "MAX({v})"}


def default_warehouse(data_dir: str | Path) -> Path:
    """Where a sink without a warehouse param writes: $ESAULT_SPARK_WAREHOUSE, else <data_dir>/warehouse.

    data_dir is the job's data directory (context.data_dir in the bolt, job.data_dir after a run).
    """
    env = os.environ.get(WAREHOUSE_ENV)
    return Path(env) if env else Path(data_dir) / "warehouse"


def resolve_warehouse(warehouse: str | Path | None) -> Path:
    """argument > $ESAULT_SPARK_WAREHOUSE; the sink's default is <job data_dir>/warehouse."""
    if warehouse is not None:
        return Path(warehouse)
    env = os.environ.get(WAREHOUSE_ENV)
    if env:
        return Path(env)
    raise SinkError(
        f"which warehouse? pass warehouse=<dir holding the table directories> or set {WAREHOUSE_ENV} "
        "(the sink's default is <job data_dir>/warehouse, e.g. esault-data/<topology>/warehouse)"
    )


def open_table(
    table: str,
    warehouse: str | Path | None = None,
    spark: "SparkSession | None" = None,
) -> "DataFrame":
    """Register <warehouse>/<table> in the catalog (if needed), refresh it, return spark.table(table)."""
    root = resolve_warehouse(warehouse) / table
    meta = load_meta(TablePaths(root).schema_file)
    if meta is None:
        raise SinkError(
            f"no sink table at {root} (no _esault/schema.json): check the warehouse and table name; "
            "a table exists once its sink has opened with a schema or committed its first batch"
        )
    spark = spark or get_session(warehouse=root.parent)
    ensure_table(spark, table, root, meta.data_columns(), meta.partitions)
    refresh_table(spark, table)
    return spark.table(table)


def sql(query: str, spark: "SparkSession | None" = None) -> list[Any]:
    """Run Spark SQL and collect the rows (tables must be registered, e.g. by open_table)."""
    spark = spark or get_session()
    return spark.sql(query).collect()


def top_k(
    table: str,
    k: int = 10,
    key: str = "key",
    value: str | None = None,
    agg: str = "count",
    warehouse: str | Path | None = None,
    spark: "SparkSession | None" = None,
) -> list[tuple[Any, Any]]:
    """The k keys with the largest aggregate: [(key, n), ...], ties broken by key.

    agg="count" counts rows per key; "sum" adds `value`; "max" takes its largest
    value -- right for a running count (word count's count bolt), and robust to
    a replayed row being stored twice.
    """
    if agg not in _AGGREGATES:
        raise SinkError(f"top_k agg must be one of {', '.join(_AGGREGATES)}, got {agg!r}")
    if agg != "count" and value is None:
        raise SinkError(f"top_k(agg={agg!r}) needs value=<column to {agg}>")
    check_column_name(key, "top_k key")
    if value is not None:
        check_column_name(value, "top_k value")
    if not isinstance(k, int) or k < 1:
        raise SinkError(f"top_k k must be a whole number >= 1, got {k!r}")
    spark = _registered(table, warehouse, spark)
    expr = _AGGREGATES[agg].format(v=f"`{value}`")
    rows = spark.sql(
        f"SELECT `{key}` AS k, {expr} AS n FROM `{table}` GROUP BY `{key}` ORDER BY n DESC, k LIMIT {k}"
    ).collect()
    return [(r.k, r.n) for r in rows]


def counts_per_minute(
    table: str,
    time_column: str = "event_time",
    warehouse: str | Path | None = None,
    spark: "SparkSession | None" = None,
) -> list[tuple[Any, int]]:
    """Rows per minute of `time_column` (UTC): [(minute start, rows), ...] in time order."""
    check_column_name(time_column, "counts_per_minute time_column")
    spark = _registered(table, warehouse, spark)
    rows = spark.sql(
        f"SELECT date_trunc('MINUTE', `{time_column}`) AS minute, COUNT(*) AS n "
        f"FROM `{table}` GROUP BY 1 ORDER BY 1"
    ).collect()
    return [(r.minute, r.n) for r in rows]


def _registered(table: str, warehouse: str | Path | None, spark: "SparkSession | None") -> "SparkSession":
    if warehouse is not None or os.environ.get(WAREHOUSE_ENV):
        return open_table(table, warehouse, spark).sparkSession
    spark = spark or get_session()
    if not spark.catalog.tableExists(table):
        raise SinkError(f"Spark table {table!r} is not registered; pass warehouse=... so it can be opened")
    refresh_table(spark, table)
    return spark


def format_rows(rows: Sequence[Sequence[Any]], headers: Sequence[str]) -> str:
    """A plain-text table of query results, for printing."""
    cells = [[str(h) for h in headers]] + [[str(v) for v in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
