"""Helpers for the Spark sink's system tests: read a table back, with Spark or pyarrow.

The fixtures themselves (one session-scoped SparkSession, unique table names)
are in tests/system/conftest.py.
"""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds


def spark_rows(spark: Any, table_dir: Path, columns: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
    """Every row Spark reads from the table directory (by path, not via the catalog)."""
    if not any(p for p in Path(table_dir).iterdir() if not p.name.startswith("_")):
        return []  # nothing published yet: Spark cannot infer a schema from no files
    df = spark.read.parquet(str(table_dir))
    if columns:
        df = df.select(*columns)
    return [r.asDict() for r in df.collect()]


def arrow_rows(table_dir: Path) -> list[dict[str, Any]]:
    """Every row pyarrow reads (hive partitioning; '_'-prefixed paths ignored, as Spark does)."""
    if not Path(table_dir).exists():
        return []
    dataset = ds.dataset(str(table_dir), format="parquet", partitioning="hive")
    return dataset.to_table().to_pylist() if dataset.files else []


def rows_per_batch(rows: list[dict[str, Any]]) -> Counter:
    return Counter(r["esault_batch"] for r in rows)


def make_rows(n: int, start: int = 0, hour: int = 12) -> list[dict[str, Any]]:
    when = dt.datetime(2024, 5, 1, hour, tzinfo=dt.timezone.utc)
    return [{"word": f"w{i % 13}", "n": i, "event_time": when} for i in range(start, start + n)]


def arrow_table(n: int, start: int = 0) -> pa.Table:
    """The file columns of make_rows(n) (the partition columns live in directory names)."""
    rows = make_rows(n, start)
    return pa.table(
        {
            "word": pa.array([r["word"] for r in rows], pa.string()),
            "n": pa.array([r["n"] for r in rows], pa.int64()),
            "event_time": pa.array([r["event_time"] for r in rows], pa.timestamp("us", tz="UTC")),
        }
    )


def run_python(code: str, env: dict[str, str], timeout: float = 60.0) -> subprocess.CompletedProcess:
    """Run a Python snippet in a fresh interpreter (for crash tests)."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env, capture_output=True, text=True, timeout=timeout,
    )
