"""The sink's Prometheus metrics, defined once (labels: topology, table)."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

LABELS = ("topology", "table")

ROWS_COMMITTED = Counter(
    "esault_sink_rows_committed", "Rows committed into the Spark table.", LABELS
)  # exported as esault_sink_rows_committed_total
BATCHES = Counter("esault_sink_batches", "Batches committed into the Spark table.", LABELS)
COMMIT_SECONDS = Histogram(
    "esault_sink_commit_seconds",
    "Seconds to commit one batch (encode, Spark write, publish, log); under exactly_once, to stage one "
    "checkpoint epoch's batches (encode, write, log; publishing them is a rename).",
    LABELS,
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0),
)
ROWS_REJECTED = Counter(
    "esault_sink_rows_rejected", "Rows that did not fit the schema, written to the rejected-rows file.", LABELS
)
COMMIT_FAILURES = Counter(
    "esault_sink_commit_failures", "Failed commit attempts (each is retried up to commit_retries).", LABELS
)


class SinkMetrics:
    """The metric children of one (topology, table), bound once."""

    def __init__(self, topology: str, table: str) -> None:
        self.rows_committed = ROWS_COMMITTED.labels(topology, table)
        self.batches = BATCHES.labels(topology, table)
        self.commit_seconds = COMMIT_SECONDS.labels(topology, table)
        self.rows_rejected = ROWS_REJECTED.labels(topology, table)
        self.commit_failures = COMMIT_FAILURES.labels(topology, table)
