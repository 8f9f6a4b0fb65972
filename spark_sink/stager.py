"""Stagers write one batch's Arrow table as Parquet file(s) into a fresh directory.

The writer owns everything else (naming, publishing, the log). Two stagers:
SparkStager sends the Arrow table to Spark (createDataFrame over Arrow) and
lets Spark write it -- the production path, which also works against a
cluster; ArrowStager writes with pyarrow in this process -- no JVM, for tests,
the benchmark baseline and JVM-less workers. Both produce files Spark reads
back with the same types.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable, Protocol

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession


class Stager(Protocol):
    """Writes `table` as one or more Parquet files into `directory` (which does not exist yet)."""

    name: str

    def stage(self, table: "pa.Table", directory: Path) -> None: ...


class ArrowStager:
    """pyarrow.parquet.write_table into directory/part-00000.snappy.parquet."""

    name = "pyarrow"

    def stage(self, table: "pa.Table", directory: Path) -> None:
        import pyarrow.parquet as pq

        directory.mkdir(parents=True)
        pq.write_table(table, directory / "part-00000.snappy.parquet", compression="snappy")


class SparkStager:
    """spark.createDataFrame(arrow_table).coalesce(1).write.parquet(directory).

    Arrow carries the rows from Python to the JVM; coalesce(1) makes one file
    per batch. `session` is called on each stage() so the SparkSession can be
    started lazily (on the committer thread, not the topology's).
    """

    name = "spark"

    def __init__(self, session: Callable[[], "SparkSession"]) -> None:
        self._session = session

    def stage(self, table: "pa.Table", directory: Path) -> None:
        spark = self._session()
        df = spark.createDataFrame(table)
        df.coalesce(1).write.mode("errorifexists").option("compression", "snappy").parquet(_uri(directory))


def _uri(path: Path) -> str:
    return str(Path(path).resolve())


def is_data_file(name: str) -> bool:
    """Files Spark and pyarrow read as data: not hidden ('_' or '.'), not .crc."""
    return not name.startswith(("_", ".")) and not name.endswith(".crc")

