"""Stagers write one batch's Arrow table as Parquet file(s) into a fresh directory.

The writer owns everything else (naming, publishing, the log). Two stagers:
SparkStager has Spark's executors write the batch -- the production path, for
local[*], a standalone cluster (spark://) and Spark Connect (sc://) alike;
ArrowStager writes with pyarrow in this process -- no JVM, for tests, the
benchmark baseline and JVM-less workers. Both produce files Spark reads back
with the same types, so an exactly-once sink stages with pyarrow while its
Spark session is still starting (SparkStager's fallback): no checkpoint waits
for a JVM.

How rows reach the JVM: not as a local collection. spark.createDataFrame(arrow)
parallelises the Arrow batches from the driver, so each task carries its rows
(one task of every row after coalesce(1): Spark's "task of very large size"
warning at a few MB, and the whole batch through the driver and the task
scheduler). Instead pyarrow writes the batch once as an uncompressed Parquet
transfer file beside the staging directory (<staging>/<batch>.transfer/, which
the writer's recovery deletes like any leftover of this writer), and Spark
reads that file on an executor and writes the batch's files: tasks carry a file
path, the same over Spark Connect, where the client has no JVM at all. The
transfer directory sits on the table's filesystem, which executors must see at
the same path anyway (they write the staging files).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Protocol

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

TRANSFER_SUFFIX = ".transfer"
"""<staging>/<batch>.transfer/: pyarrow's copy of a batch for Spark to read; removed after the write."""


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
    """Spark's executors write the batch: pyarrow stages it as a transfer file, Spark reads and rewrites it.

    spark.read.schema(<the batch's schema>).parquet(transfer).coalesce(1).write.parquet(directory):
    one output file per batch, written by an executor; the transfer directory is removed
    afterwards, whatever happened. `session` is called on each stage() so the
    SparkSession (classic or Spark Connect) can be started lazily, on the committer
    thread, not the topology's.
    """

    name = "spark"

    def __init__(self, session: Callable[[], "SparkSession | None"], fallback: Stager | None = None) -> None:
        self._session = session
        self._fallback = fallback

    def stage(self, table: "pa.Table", directory: Path) -> None:
        """`fallback` writes the batch while `session()` is None (Spark still starting): the same layout."""
        import pyarrow.parquet as pq

        spark = self._session()
        if spark is None and self._fallback is not None:
            self._fallback.stage(table, directory)
            return
        directory = Path(directory)
        transfer = transfer_dir(directory)
        shutil.rmtree(transfer, ignore_errors=True)
        transfer.mkdir(parents=True)
        try:
            pq.write_table(table, transfer / "batch.parquet", compression="none")
            df = spark.read.schema(spark_schema(table.schema)).parquet(_uri(transfer))
            df.coalesce(1).write.mode("error").option("compression", "snappy").parquet(_uri(directory))
        finally:
            shutil.rmtree(transfer, ignore_errors=True)


def transfer_dir(directory: Path) -> Path:
    """Where SparkStager puts the transfer file for the batch staged at `directory`."""
    return directory.with_name(directory.name + TRANSFER_SUFFIX)


def spark_schema(schema: "pa.Schema") -> "StructType":
    """The Spark schema of an encoded batch (pure Python: no JVM, so it works over Spark Connect too).

    Given to the reader, it spares Spark a job to read the transfer file's footer.
    """
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema)


def _uri(path: Path) -> str:
    return str(Path(path).resolve())


def is_data_file(name: str) -> bool:
    """Files Spark and pyarrow read as data: not hidden ('_' or '.'), not .crc."""
    return not name.startswith(("_", ".")) and not name.endswith(".crc")

