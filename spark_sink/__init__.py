"""spark_sink: commit a topology's output into a partitioned Parquet table that Spark SQL queries.

SparkSink is the bolt; the rest are its parts, importable for tests and tools:
the pure cores (schema, layout, batcher, commit log), the idempotent
BatchWriter, the shared SparkSession, and batch analytics. See
docs/SPARK_SINK.md. Importing this package does not start Spark.
"""

from spark_sink.analytics import counts_per_minute, open_table, top_k
from spark_sink.batcher import Batch, Batcher
from spark_sink.bolt import SparkSink
from spark_sink.commit_log import CommitLog
from spark_sink.schema import Column, TableSchema, infer_schema, parse_schema
from spark_sink.session import get_session, stop_session
from spark_sink.stager import ArrowStager, SparkStager
from spark_sink.writer import BatchWriter, Outcome

__all__ = [
    "ArrowStager", "Batch", "BatchWriter", "Batcher", "Column", "CommitLog", "Outcome", "SparkSink",
    "SparkStager", "TableSchema", "counts_per_minute", "get_session", "infer_schema", "open_table",
    "parse_schema", "stop_session", "top_k",
]
