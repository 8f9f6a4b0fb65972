"""SparkSink: a terminal bolt that commits its input into a partitioned Parquet table Spark can query.

Wire it with shuffle_grouping or global_grouping (one instance per SPU):

    builder.set_bolt("sink", SparkSink, params={
        "table": "word_counts",
        "schema": "word STRING, count BIGINT",
        "key_column": "word", "value_column": "count",
    }).shuffle_grouping("count")

Each input becomes a row (to_row), is buffered, and is committed by a
background thread. Under guarantee="at_least_once" (or "none") rows are
committed in batches and the input tuple is acked only once its batch is
durably committed (at-least-once into the table, idempotent per batch id).
Under "exactly_once" the tuple is acked at once and rows are committed in two
phases per checkpoint epoch: staged at the barrier, published when the
checkpoint completes (spark_sink/epochs.py).
See docs/SPARK_SINK.md for the commit protocols and the end-to-end guarantees.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Callable

from esault.clock import Clock
from esault.dsl.bolt import Bolt
from esault.dsl.context import TopologyContext
from esault.dsl.tuple import Tuple
from esault.errors import ConfigError, SchemaError, SinkError
from spark_sink.analytics import default_warehouse
from spark_sink.batcher import Batch, Batcher
from spark_sink.batcher import check_settings as check_batching
from spark_sink.catalog import ensure_table, refresh_table
from spark_sink.committer import AsyncCommitter
from spark_sink.committer import check_settings as check_committing
from spark_sink.encode import encode
from spark_sink.epochs import EpochCommitter
from spark_sink.layout import PartitionScheme, TablePaths, instance_writer_id, parse_partition_by, writer_id
from spark_sink.metrics import SinkMetrics
from spark_sink.rejects import RejectedRows
from spark_sink.schema import BATCH_COLUMN, Column, TableSchema, check_column_name, infer_schema, parse_schema
from spark_sink.session import get_session
from spark_sink.stager import ArrowStager, SparkStager, Stager
from spark_sink.table_meta import TableMeta, load_meta, store_meta
from spark_sink.writer import BatchWriter, Outcome

log = logging.getLogger(__name__)

_TABLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_PARTITION_TYPES = ("STRING", "BIGINT", "INT", "BOOLEAN", "DATE")


class SparkSink(Bolt):
    """Commit input tuples as rows of a Spark table, batch by batch (see the module doc).

    Parameters (pass them as set_bolt(..., params={...})):
      table: Spark table name; its directory is <warehouse>/<table>.
      schema: "word STRING, count BIGINT" (DDL), [("word", "STRING"), ...], a dict, or
        None to infer it from the first batch and enforce it afterwards.
        event_time TIMESTAMP is added when missing. Types: STRING, BIGINT, INT, DOUBLE,
        FLOAT, BOOLEAN, TIMESTAMP, DATE, BINARY.
      partition_by: None (default) = event_date, event_hour (UTC) of the event time;
        a column name or list of names (str/int/bool/date values); [] = none.
      batch_rows, batch_seconds: commit when this many rows are buffered, or when the
        oldest buffered row is this old (None: by count only).
      max_buffered_batches: sealed batches that may wait for Spark before process()
        blocks the SPU (backpressure).
      master: Spark master; default $ESAULT_SPARK_MASTER, else local[*].
      warehouse: directory holding the table directories; default $ESAULT_SPARK_WAREHOUSE,
        else <data_dir>/warehouse (the job's data directory).
      key_column, value_column, event_time_column: how the default to_row() names
        things (key_column=None drops the key; event_time_column=None: no event time).
      commit_retries, retry_backoff: a failing commit is retried this many times,
        backing off retry_backoff * 2**attempt seconds, then its tuples are failed.
      close_timeout: seconds close() waits for the last commits.
      engine: "spark" (Spark writes the files from Arrow data) or "pyarrow" (this
        process writes the same layout without a JVM; register it later with
        spark_sink.analytics.open_table), or a Stager object.
      clock, wall_clock: injected time (monotonic, for batch_seconds) and wall time
        (epoch seconds, for missing event times); for tests.
    """

    esault_placement = "driver"
    """With worker processes, the sink runs in the driver: one JVM, shared with Spark SQL there."""


    def __init__(
        self,
        table: str = "esault_sink",
        schema: Any = None,
        partition_by: Any = None,
        batch_rows: int = 10_000,
        batch_seconds: float | None = 5.0,
        max_buffered_batches: int = 4,
        master: str | None = None,
        warehouse: str | Path | None = None,
        key_column: str | None = "key",
        value_column: str = "value",
        event_time_column: str | None = "event_time",
        commit_retries: int = 3,
        retry_backoff: float = 0.5,
        close_timeout: float = 300.0,
        engine: str | Stager = "spark",
        clock: Clock | None = None,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        if not isinstance(table, str) or not _TABLE_NAME.match(table):
            raise ConfigError(
                f"SparkSink table {table!r} is not a valid Spark table name; use letters, digits and '_' "
                "(e.g. table='word_counts')"
            )
        if key_column is not None:
            check_column_name(key_column, "SparkSink key_column")
        check_column_name(value_column, "SparkSink value_column")
        if isinstance(engine, str) and engine not in ("spark", "pyarrow"):
            raise ConfigError(f"SparkSink engine must be 'spark' or 'pyarrow' (or a Stager), got {engine!r}")
        if not isinstance(close_timeout, (int, float)) or close_timeout <= 0:
            raise ConfigError(f"SparkSink close_timeout must be seconds > 0, got {close_timeout!r}")
        self.table = table
        self.declared_schema = parse_schema(schema)
        self.scheme = PartitionScheme(parse_partition_by(partition_by), event_time_column)
        check_batching(batch_rows, batch_seconds)  # bad settings fail at set-up, not in open()
        check_committing(max_buffered_batches, commit_retries, retry_backoff)
        self.batch_rows = batch_rows
        self.batch_seconds = batch_seconds
        self.max_buffered_batches = max_buffered_batches
        self.master = master
        self.warehouse = Path(warehouse) if warehouse is not None else None
        self.key_column = key_column
        self.value_column = value_column
        self.event_time_column = event_time_column
        self.commit_retries = commit_retries
        self.retry_backoff = retry_backoff
        self.close_timeout = float(close_timeout)
        self.engine = engine
        self._clock = clock
        self._wall_clock = wall_clock
        self._committer: AsyncCommitter | None = None
        self._epochs: EpochCommitter | None = None
        self._writer: BatchWriter | None = None
        self._rejects: RejectedRows | None = None
        self._spark: Any = None
        self._catalog_ready = False
        self._meta: TableMeta | None = None
        self._dict_rows_get_key = key_column is not None and (
            self.declared_schema is None or key_column in self.declared_schema
        )
        self.rows_committed = 0
        self.rows_rejected = 0
        self._stats_lock = threading.Lock()

    # -- user hook -------------------------------------------------------------

    def to_row(self, tup: Tuple) -> dict[str, Any]:
        """The table row for one input tuple. Override to reshape rows.

        Default: a dict value's fields, plus the key under key_column when the
        table has such a column (a declared schema names it, or the schema is
        inferred) and the value has no such field; any other value becomes
        {key_column: key, value_column: value}. The sink then sets event_time_column to now if the
        row has no event time (a datetime, or epoch seconds). Runs on the SPU's
        thread; an exception fails the tuple, a row that does not fit the schema
        goes to the rejected-rows file.
        """
        value = tup.value
        if isinstance(value, dict):
            if not self._dict_rows_get_key or self.key_column in value:
                return dict(value)
            row = {self.key_column: tup.key}
            row.update(value)
            return row
        if self.key_column is None:
            return {self.value_column: value}
        return {self.key_column: tup.key, self.value_column: value}

    # -- bolt lifecycle ----------------------------------------------------------

    def open(self, context: TopologyContext) -> None:
        if context.per_key:
            raise SinkError(
                f"SparkSink {context.unit!r} is wired with key_grouping, which starts one sink per key; "
                f"wire it with shuffle_grouping or global_grouping instead, e.g. "
                f"set_bolt({context.unit!r}, SparkSink, ...).shuffle_grouping('<source>')"
            )
        self.topology = context.topology
        warehouse = self.warehouse if self.warehouse is not None else default_warehouse(context.data_dir)
        self.table_dir = Path(warehouse).resolve() / self.table
        exactly_once = context.guarantee == "exactly_once"
        self.writer_id = (instance_writer_id(context.topology, context.unit, context.instance) if exactly_once
                          else writer_id(context.topology, context.unit, context.spu_id))
        paths = TablePaths(self.table_dir)
        self.rejected_path = paths.rejected(self.writer_id)
        self._meta = self._resolve_meta(paths)
        if self.engine == "spark":
            # Until the session is up (exactly_once starts it beside the committer), pyarrow writes the layout.
            stager: Stager = SparkStager(lambda: self._spark, fallback=ArrowStager())
        elif self.engine == "pyarrow":
            stager = ArrowStager()
        else:
            stager = self.engine  # type: ignore[assignment]
        self._writer = BatchWriter(self.table_dir, self.writer_id, stager)
        try:
            if exactly_once:
                self._rejects = RejectedRows(self.rejected_path, self.table)
                self._metrics = SinkMetrics(self.topology, self.table)
                self._epochs = EpochCommitter(self, context.restored_epoch, self._set_up_engine())
            else:
                self._start_committer()
        except BaseException:
            self._release()
            raise

    def _start_committer(self) -> None:
        assert self._writer is not None
        self._rejects = RejectedRows(self.rejected_path, self.table)
        self._metrics = SinkMetrics(self.topology, self.table)
        batcher = Batcher(self.batch_rows, self.batch_seconds, self.writer_id, first_seq=self._writer.next_seq)
        committer = AsyncCommitter(
            batcher,
            self._commit_batch,
            max_buffered_batches=self.max_buffered_batches,
            commit_retries=self.commit_retries,
            retry_backoff=self.retry_backoff,
            clock=self._clock,
            setup=self._setup if self._set_up_engine() is not None else None,
            on_commit_error=lambda batch, exc: self._metrics.commit_failures.inc(),
            on_stop=self._release,
            name=f"spark-sink-{self.writer_id}",
        )
        committer.start()
        self._committer = committer

    def process(self, tup: Tuple) -> None:
        if self._epochs is not None:
            self._process_exactly_once(tup)
            return
        committer = self._committer
        if committer is None:
            raise SinkError(f"SparkSink {self.table!r}: process() was called before open()")
        if committer.fatal is not None:
            raise SinkError(
                f"SparkSink {self.table!r} cannot commit: {type(committer.fatal).__name__}: {committer.fatal}"
            )
        row = self._row_of(tup)
        try:
            partition = self.scheme.place(row, self._wall_clock())
        except SchemaError as exc:
            self._reject_now(row, str(exc))
            return  # not deferred: the tuple is acked, its row is in the rejected file
        committer.add(partition, row, self.defer())

    def _process_exactly_once(self, tup: Tuple) -> None:
        epochs = self._epochs
        if epochs.fatal is not None:
            raise SinkError(f"SparkSink {self.table!r} cannot commit: {type(epochs.fatal).__name__}: {epochs.fatal}")
        row = self._row_of(tup)
        try:
            partition = self.scheme.place(row, self._wall_clock())
        except SchemaError as exc:
            self._reject_now(row, str(exc))
            return
        epochs.add(partition, row)

    def _row_of(self, tup: Tuple) -> dict[str, Any]:
        row = self.to_row(tup)
        if not isinstance(row, dict):
            raise SinkError(f"{type(self).__name__}.to_row() must return a dict, got {type(row).__name__} {row!r}")
        return row

    # -- exactly-once hooks (spark_sink/epochs.py) ---------------------------------------

    def on_checkpoint(self, epoch: int) -> Future | None:
        """Exactly-once: stage the rows since the previous barrier; the Future completes once durable."""
        return None if self._epochs is None else self._epochs.checkpoint(epoch)

    def on_checkpoint_complete(self, epoch: int) -> None:
        """Exactly-once: publish every staged epoch <= `epoch`, asynchronously, in epoch order."""
        if self._epochs is not None:
            self._epochs.complete(epoch)

    def wait_epochs(self, timeout: float) -> None:
        """Exactly-once: block until every stage and publish requested so far has run (for tests and
        tools; raises the last step's error, or TimeoutError)."""
        if self._epochs is None:
            raise SinkError(f"SparkSink {self.table!r} is not open with guarantee='exactly_once'")
        self._epochs.wait_idle(timeout)

    def abandon(self) -> None:
        """A rollback discards this instance: stage and publish nothing more, release the commit log."""
        if self._epochs is not None:
            self._epochs.abandon()
        elif self._committer is not None:
            self._committer.close(0.0)
        else:
            self._release()

    def snapshot_state(self) -> dict[str, Any]:
        """Its rows are its staged epochs on disk, found again by its writer name; the state holds only how many
        rows the checkpoints sent this instance (exactly_once), which the end-of-run audit checks the table
        against (EpochCommitter._audit)."""
        accepted = None if self._epochs is None else self._epochs.accepted_through_barrier()
        return {} if accepted is None else {"rows_accepted": accepted}

    def restore_state(self, state: dict[str, Any]) -> None:
        rows = state.get("rows_accepted")
        if self._epochs is not None and type(rows) is int and rows >= 0:
            self._epochs.restore_accepted(rows)

    def close(self) -> None:
        """Commit what is buffered and wait (close_timeout) for every commit to finish.

        The commit log and rejected-rows file are released by the committer
        thread when it ends, so a commit still running after a timeout can
        finish (and ack its tuples). Exactly-once: rows after the last
        checkpoint are dropped (logged), never published; publishes already
        requested get close_timeout to finish.
        """
        if self._epochs is not None:
            self._epochs.close(self.close_timeout)
            return
        if self._committer is None:
            self._release()
            return
        self._committer.close(self.close_timeout)

    def _release(self) -> None:
        with self._stats_lock:
            writer, rejects = self._writer, self._rejects
            self._writer = self._rejects = None
        if writer is not None:
            writer.close()
        if rejects is not None:
            rejects.close()

    # -- introspection -----------------------------------------------------------

    @property
    def committer(self) -> AsyncCommitter:
        if self._committer is None:
            raise SinkError(f"SparkSink {self.table!r} is not open")
        return self._committer

    @property
    def meta(self) -> TableMeta | None:
        """The table's schema and partitions (None until inferred from the first batch)."""
        return self._meta

    def stats(self) -> dict[str, int]:
        c, e = self._committer, self._epochs
        if e is not None:
            return {"rows_committed": self.rows_committed, "rows_rejected": self.rows_rejected,
                    "batches_committed": e.batches_published, "batches_failed": 0, "blocked_adds": 0,
                    "epochs_staged": e.epochs_staged, "rows_buffered": e.buffered_rows}
        return {
            "rows_committed": self.rows_committed,
            "rows_rejected": self.rows_rejected,
            "batches_committed": c.batches_committed if c else 0,
            "batches_failed": c.batches_failed if c else 0,
            "blocked_adds": c.blocked_adds if c else 0,
        }

    # -- schema -------------------------------------------------------------------

    def _partitions(self, schema: TableSchema) -> tuple[Column, ...]:
        user = () if self.scheme.derived else tuple(schema.column(n) for n in self.scheme.columns)
        return user + self.scheme.derived_columns()

    def _complete(self, schema: TableSchema) -> TableSchema:
        """Add the event time column; check reserved and partition columns."""
        reserved = {BATCH_COLUMN} | (set(self.scheme.columns) if self.scheme.derived else set())
        clash = [n for n in schema.names if n in reserved]
        if clash:
            raise SchemaError(
                f"SparkSink {self.table!r}: schema column(s) {', '.join(clash)} are added by the sink "
                "(partition columns); remove them from the schema"
            )
        et = self.event_time_column
        if et is not None:
            if et not in schema:
                schema = schema.with_column(Column(et, "TIMESTAMP"))
            elif schema.column(et).type != "TIMESTAMP":
                raise SchemaError(
                    f"SparkSink {self.table!r}: event time column {et!r} must be TIMESTAMP, "
                    f"the schema says {schema.column(et).type}"
                )
        if not self.scheme.derived:
            for n in self.scheme.columns:
                if n not in schema:
                    raise SchemaError(
                        f"SparkSink {self.table!r}: partition_by column {n!r} is not in the schema "
                        f"({schema.ddl()}); add it"
                    )
                if schema.column(n).type not in _PARTITION_TYPES:
                    raise SchemaError(
                        f"SparkSink {self.table!r}: partition_by column {n!r} is {schema.column(n).type}; "
                        f"partition by a {'/'.join(_PARTITION_TYPES)} column"
                    )
        return schema

    def _resolve_meta(self, paths: TablePaths) -> TableMeta | None:
        existing = load_meta(paths.schema_file)
        if self.declared_schema is None:
            if existing is not None:
                self._check_partitions(existing)
            return existing
        schema = self._complete(self.declared_schema)
        meta = TableMeta(schema, self._partitions(schema))
        stored = existing if existing is not None else store_meta(paths.schema_file, meta)
        if stored != meta:
            raise SchemaError(
                f"SparkSink {self.table!r}: the table at {paths.root} has {stored.describe()}, but this sink "
                f"declares {meta.describe()}; use another table name, or declare the table's schema"
            )
        return stored

    def _check_partitions(self, meta: TableMeta) -> None:
        ours = tuple(c.name for c in self.scheme.derived_columns())
        if not self.scheme.derived:
            ours = self.scheme.columns + ours
        if meta.partition_names != ours:
            raise SchemaError(
                f"SparkSink {self.table!r}: the table at {self.table_dir} is partitioned by "
                f"({', '.join(meta.partition_names)}), this sink by ({', '.join(ours)}); "
                "use another table name or the same partition_by"
            )

    def _infer_meta(self, rows: list[dict[str, Any]]) -> TableMeta:
        schema = infer_schema(rows)
        if not self.scheme.derived:
            for n in self.scheme.columns:
                if n not in schema:
                    schema = schema.with_column(Column(n, "STRING"))
        schema = self._complete(schema)
        meta = store_meta(TablePaths(self.table_dir).schema_file, TableMeta(schema, self._partitions(schema)))
        self._check_partitions(meta)
        log.info("SparkSink %s inferred %s", self.table, meta.describe())
        return meta

    # -- committer thread -----------------------------------------------------------

    def _set_up_engine(self) -> Callable[[], None] | None:
        """What starts the engine: Spark's session (a JVM, executors on a cluster), or nothing for an engine
        without one. Under exactly_once it runs on a thread of its own (EpochCommitter), under at_least_once
        before the committer's first batch (_setup)."""
        return self._start_session if self.engine == "spark" else None

    def _start_session(self) -> None:
        self._spark = get_session(self.master, self.table_dir.parent)

    def _setup(self) -> None:
        """The at-least-once committer's set-up: the engine, then the table in Spark's catalog."""
        start = self._set_up_engine()
        if start is not None:
            start()
        if self._meta is not None and self._spark is not None:
            self._ensure_catalog(self._meta)

    def _ensure_catalog(self, meta: TableMeta) -> None:
        if not self._catalog_ready:
            ensure_table(self._spark, self.table, self.table_dir, meta.data_columns(), meta.partitions)
            self._catalog_ready = True

    def _commit_batch(self, batch: Batch) -> None:
        """Encode, commit and account one batch (retried by the committer on error)."""
        started = time.perf_counter()
        assert self._writer is not None and self._rejects is not None
        meta = self._meta
        if meta is None:
            try:
                meta = self._meta = self._infer_meta(batch.rows)
            except SchemaError as exc:  # nothing usable to infer from: reject the batch
                for row in batch.rows:
                    self._rejects.write(row, f"cannot infer a table schema from this batch: {exc}", batch.batch_id)
                self._count_rejects(len(batch.rows))
                return
        enc = encode(batch.rows, meta.columns, drop=meta.partition_names)
        outcome = None
        if enc.table is not None:
            if self._spark is not None:
                self._ensure_catalog(meta)
            rel = self.scheme.batch_path(batch.partition, batch.batch_id)
            outcome = self._writer.commit(batch.batch_id, batch.seq, rel, enc.table)
            if self._spark is not None:
                try:
                    refresh_table(self._spark, self.table)
                except Exception as exc:  # noqa: BLE001 - the batch is committed; readers refresh too
                    log.warning("REFRESH TABLE %s failed after commit: %s", self.table, exc)
        for i, reason in enc.rejected:
            self._rejects.write(batch.rows[i], reason, batch.batch_id)
        if enc.rejected:
            self._count_rejects(len(enc.rejected))
        if outcome is Outcome.COMMITTED:
            self.rows_committed += enc.rows
            self._metrics.rows_committed.inc(enc.rows)
            self._metrics.batches.inc()
        self._metrics.commit_seconds.observe(time.perf_counter() - started)

    def _count_rejects(self, n: int) -> None:
        assert self._rejects is not None
        self._rejects.flush(durable=True)
        with self._stats_lock:  # the SPU thread and the committer thread both reject
            self.rows_rejected += n
        self._metrics.rows_rejected.inc(n)

    def _reject_now(self, row: dict[str, Any], reason: str) -> None:
        if self._rejects is None:
            raise SinkError(f"SparkSink {self.table!r} is closed; process() after close()")
        self._rejects.write(row, reason)
        self._count_rejects(1)
