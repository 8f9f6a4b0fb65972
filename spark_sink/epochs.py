"""EpochCommitter: the exactly-once sink's two-phase commit, one checkpoint epoch at a time.

Under guarantee="exactly_once" the runtime calls, on the SPU's thread:
  process()                   rows are buffered (the tuple is acked at once: trees are flow control only);
  on_checkpoint(e)            the buffered rows become epoch e's: staged durably (phase one) on this
                              committer's thread; the returned Future completes when they are, and the
                              checkpoint waits for it;
  on_checkpoint_complete(e)   every staged epoch <= e is published (phase two: rename into the table);
  open() after a rollback or restart with context.restored_epoch = E: staged epochs <= E are published
                              (their checkpoint completed, the process died before publishing), later
                              ones aborted (their rows come again from the replay), and published
                              epochs > E retracted (E is older than the latest: a fallback from a
                              damaged checkpoint, a restore_from, or a fresh start);
  abandon()                   a rollback discards the instance: nothing more is staged or published.
Batch ids are `<writer>.e<epoch>.p<part>` and the writer name is per instance, not per SPU, so a
relaunched instance finds its staged epochs and a republished epoch is recognised by the commit log.

One thread does all file and Spark work, in submission order, so an epoch's Future completes only
after every earlier epoch's step ran. A failed stage does not lose rows: the runtime lets the next
checkpoint retry (CHECKPOINTS.md), so the failed epoch's partly staged batches are aborted and its
rows are staged again with the next epoch. A step in progress when abandon() (or a timed-out close())
stops the thread ends at its next batch boundary: whatever it left is resolved by the next open().
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Callable, Protocol

from esault.errors import OutputMissing, SchemaError, SinkError
from spark_sink.encode import encode
from spark_sink.layout import PartitionScheme, epoch_batch_id
from spark_sink.metrics import SinkMetrics
from spark_sink.rejects import RejectedRows
from spark_sink.table_meta import TableMeta
from spark_sink.writer import BatchWriter

log = logging.getLogger(__name__)

Row = tuple[tuple[Any, ...], dict[str, Any]]
"""(partition value, row) as the sink placed it."""


class Stopped(SinkError):
    """abandon() or a timed-out close() ended the step in progress at a batch boundary."""


class EpochSink(Protocol):
    """The parts of a sink instance its committer drives (SparkSink is one: it hands itself down when it opens
    with exactly_once, so this module never imports it)."""

    table: str
    writer_id: str
    scheme: PartitionScheme
    rows_committed: int
    _writer: BatchWriter | None
    _rejects: RejectedRows | None
    _metrics: SinkMetrics
    _meta: TableMeta | None
    _spark: Any

    def _infer_meta(self, rows: list[dict[str, Any]]) -> TableMeta: ...
    def _ensure_catalog(self, meta: TableMeta) -> None: ...
    def _count_rejects(self, n: int) -> None: ...
    def _release(self) -> None: ...


class EpochCommitter:
    """Stages and publishes one sink instance's epochs on a single background thread."""

    def __init__(self, sink: EpochSink, restored_epoch: int | None, setup: Callable[[], None] | None) -> None:
        self.sink = sink
        self.fatal: BaseException | None = None
        self.epochs_staged = 0
        self.batches_published = 0
        self._rows: list[Row] = []  # the SPU's thread: rows since the last on_checkpoint
        self.accepted: int | None = 0 if restored_epoch is None else None
        """Rows the checkpoints up to the last barrier sent this instance, since the job's start (a restored
        instance learns its share from its checkpointed state, restore_accepted(); None: not known, e.g. a
        checkpoint of an older esault): the end-of-run audit compares the table with it."""
        self._last_barrier: tuple[int, int | None] | None = None  # (epoch, accepted through it) of the newest
        self._completed = -1  # the newest epoch whose publish was asked for
        self._carried: list[Row] = []  # the committer thread: rows of an epoch whose staging failed
        self._stop = threading.Event()
        self._closed = False
        self._phase = threading.Lock()
        self._futures: list[Future] = []
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"spark-sink-{sink.writer_id}")
        self._last: Future = self._submit(self._start, restored_epoch)
        if setup is not None:  # off the committer thread: no checkpoint waits for the engine's start
            threading.Thread(target=self._start_engine, args=(setup,), name=f"spark-start-{sink.writer_id}",
                             daemon=True).start()

    # -- the SPU's thread ---------------------------------------------------------

    @property
    def buffered_rows(self) -> int:
        """Rows received since the last checkpoint barrier (not staged yet)."""
        return len(self._rows)

    def add(self, partition: tuple[Any, ...], row: dict[str, Any]) -> None:
        self._rows.append((partition, row))

    def accepted_through_barrier(self) -> int | None:
        """accepted, with the rows of the epoch whose barrier is being taken now (the state a checkpoint keeps)."""
        return None if self.accepted is None else self.accepted + len(self._rows)

    def restore_accepted(self, rows: int) -> None:
        self.accepted = rows

    def checkpoint(self, epoch: int) -> Future:
        """Stage the rows received since the previous barrier as epoch `epoch`'s (see the module doc)."""
        rows, self._rows = self._rows, []
        if self.accepted is not None:
            self.accepted += len(rows)
        self._last_barrier = (epoch, self.accepted)
        return self._submit(self._stage, epoch, rows)

    def complete(self, epoch: int) -> Future:
        """Publish every staged epoch <= `epoch` (idempotent); the Future is for tests and close()."""
        self._completed = max(self._completed, epoch)
        return self._submit(self._publish_upto, epoch)

    def wait_idle(self, timeout: float) -> None:
        """Block until every step submitted so far has run (raises its error, or TimeoutError)."""
        self._last.result(timeout)

    def close(self, timeout: float) -> None:
        """A normal stop, after the final checkpoint: requested publishes get `timeout` seconds. Rows after
        it are not part of any checkpoint, so they cannot be published exactly once: they are dropped, and
        close() raises SinkError saying so once the rest is done (the run's verdict counts it; it passed for a
        success while bolts' end-of-job output was missing from the table). Then the published rows are checked
        against what the checkpoints sent (_audit): OutputMissing if they differ."""
        if self._closed:
            return
        self._closed = True
        dropped, self._rows = len(self._rows), []
        try:
            self._finish(timeout)
        finally:
            if dropped:
                raise SinkError.after_final_checkpoint(f"SparkSink {self.sink.table}", dropped, "row", "written")

    def _finish(self, timeout: float) -> None:
        missing: OutputMissing | None = None
        try:
            self._last.result(timeout)
            missing = self._audit()
        except FutureTimeout:
            log.error("SparkSink %s: publishing did not finish within close_timeout=%ss; the commit log keeps "
                      "the staged epochs and the next start publishes those of completed checkpoints",
                      self.sink.table, timeout)
            self._stop_thread()
            return
        except Exception as exc:  # noqa: BLE001 - reported; the commit log decides on restart
            log.error("SparkSink %s: the last epoch step failed at stop: %r", self.sink.table, exc)
        self._thread.shutdown(wait=True)
        self.sink._release()
        if missing is not None:
            raise missing

    def _audit(self) -> OutputMissing | None:
        """The end-of-run check (docs/GUARANTEES.md): once every staged epoch was published, the rows this
        writer has in the table must be the rows the committed checkpoints sent it. Exact only while no row was
        rejected (a rejected row is in the rejected-rows file instead: then nothing is compared), and only when
        the baseline is known (a job started afresh, or restored from a checkpoint that recorded it)."""
        if self._last_barrier is None:
            return None
        epoch, accepted = self._last_barrier
        writer = self.sink._writer
        rejected = self.sink._rejects
        if accepted is None or writer is None or epoch > self._completed or self.sink.rows_rejected \
                or (rejected is not None and rejected.path.exists() and rejected.path.stat().st_size > 0):
            return None  # not every epoch completed (a stop without its final checkpoint), or rows were rejected
        # Only published batches count: rows still staged for a completed epoch (a publish that never ran) are missing.
        published = sum(r.rows for r in writer.log.committed())
        if published == accepted:
            return None
        message = (f"SparkSink {self.sink.table!r} (writer {self.sink.writer_id}): the checkpoints up to epoch {epoch} "
                   f"sent it {accepted} row(s) and the table at {writer.paths.root} holds {published} of them: "
                   f"{abs(accepted - published)} row(s) {'missing' if published < accepted else 'too many'}; the "
                   "commit log beside the table lists every batch")
        log.error("%s", message)
        return OutputMissing(message, abs(accepted - published))

    def abandon(self) -> None:
        """A rollback: nothing buffered or queued is staged or published; the commit log is released as
        soon as the step in progress reaches a batch boundary (one batch's write at most). An engine still
        starting (a JVM, or executors on a cluster: tens of seconds) runs on a thread of its own and touches
        no commit log: it finishes on its own and the next instance finds the session."""
        if self._closed:
            return
        self._closed = True
        self._rows = []
        with self._phase:
            self._stop.set()
        self._thread.shutdown(wait=True, cancel_futures=True)
        self.sink._release()

    def _submit(self, fn: Callable[..., None], *args: Any) -> Future:
        if self._closed:
            failed: Future = Future()
            failed.set_exception(SinkError(f"SparkSink {self.sink.table!r} is closed"))
            return failed
        self._futures = [f for f in self._futures if not f.done()]
        future = self._thread.submit(fn, *args)
        self._futures.append(future)
        self._last = future
        return future

    def _stop_thread(self) -> None:
        """Stop without waiting: queued steps are dropped; the log is released when the running one ends."""
        self._stop.set()
        self._thread.shutdown(wait=False, cancel_futures=True)
        running = [f for f in self._futures if not f.done()]
        if running:
            running[-1].add_done_callback(lambda _f: self.sink._release())
        else:
            self.sink._release()

    # -- the committer thread ---------------------------------------------------------

    def _check_stop(self) -> None:
        if self._stop.is_set():
            raise Stopped(f"SparkSink {self.sink.table!r} was stopped")

    def _start_engine(self, setup: Callable[[], None]) -> None:
        """The engine's start (Spark's session), on a thread of its own. Until it is up, staging writes the same
        Parquet layout with pyarrow (SparkStager's fallback) and publishing is a rename, so a checkpoint never
        waits for a JVM; once it is, the table is registered in Spark's catalog on the committer thread. An
        engine that cannot start is fatal, as a failed stage of the commit protocol would be."""
        try:
            setup()
        except BaseException as exc:  # noqa: BLE001 - kept: process() and the next stage raise it
            log.error("SparkSink %s: its engine did not start: %r; the sink fails its next checkpoint",
                      self.sink.table, exc)
            self.fatal = exc
            return
        with self._phase:
            if self._stop.is_set():
                return
            try:
                self._thread.submit(self._refresh)  # registers the table once its schema is known
            except RuntimeError:  # closed meanwhile
                pass

    def _start(self, restored_epoch: int | None) -> None:
        """Resolve what earlier instances staged: without this, an epoch left staged could later be published
        next to its replayed rows, so any failure here is fatal."""
        try:
            writer = self.sink._writer
            published = False
            for rec in writer.log.staged():
                self._check_stop()
                if restored_epoch is not None and rec.epoch is not None and rec.epoch <= restored_epoch:
                    self._count(writer.publish(rec.batch))
                    published = True
                else:
                    writer.abort_staged(rec.batch)
            retracted = writer.retract_after(restored_epoch)
            if retracted:
                log.warning("SparkSink %s: took %d published batch(es) of epochs after the restored checkpoint %s "
                            "out of the table (the replay writes their rows again): %s", self.sink.table,
                            len(retracted), restored_epoch, retracted)
                published = True
        except Stopped:
            raise
        except BaseException as exc:
            log.error("SparkSink %s cannot start: %r", self.sink.table, exc)
            self.fatal = exc
            raise
        if published:
            self._refresh()

    def _stage(self, epoch: int, rows: list[Row]) -> None:
        if self.fatal is not None:
            raise SinkError(f"SparkSink {self.sink.table!r} is not running: {self.fatal!r}") from self.fatal
        rows, self._carried = self._carried + rows, []
        started = time.perf_counter()
        try:
            self._stage_rows(epoch, rows)
        except Stopped:
            raise
        except BaseException as exc:
            self._carried = rows
            log.error("SparkSink %s: staging epoch %d failed (%r); its %d rows are staged with the next "
                      "checkpoint", self.sink.table, epoch, exc, len(rows))
            self._abort_epoch(epoch)
            raise
        self.epochs_staged += 1
        if rows:  # the commit of exactly-once: encoding and writing the epoch's batches (publishing is a rename)
            self.sink._metrics.commit_seconds.observe(time.perf_counter() - started)

    def _stage_rows(self, epoch: int, rows: list[Row]) -> None:
        if not rows:
            return  # nothing to record: publishing an epoch with no batches is a no-op
        sink = self.sink
        meta = sink._meta
        if meta is None:
            try:
                meta = sink._meta = sink._infer_meta([row for _, row in rows])
            except SchemaError as exc:  # nothing usable to infer from: reject, as at-least-once does
                for _, row in rows:
                    sink._rejects.write(row, f"cannot infer a table schema from these rows: {exc}",
                                        f"epoch-{epoch}")
                sink._count_rejects(len(rows))
                return
        by_partition: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
        for partition, row in rows:
            by_partition[partition].append(row)
        writer = sink._writer
        for part, partition in enumerate(sorted(by_partition, key=repr)):
            self._check_stop()
            batch_rows = by_partition[partition]
            enc = encode(batch_rows, meta.columns, drop=meta.partition_names)
            for i, reason in enc.rejected:
                sink._rejects.write(batch_rows[i], reason, f"epoch-{epoch}")
            if enc.rejected:
                sink._count_rejects(len(enc.rejected))
            if enc.table is None:
                continue
            if sink._spark is not None:
                sink._ensure_catalog(meta)
            batch = epoch_batch_id(sink.writer_id, epoch, part)
            writer.stage(batch, writer.next_seq, sink.scheme.batch_path(partition, batch), enc.table, epoch)

    def _abort_epoch(self, epoch: int) -> None:
        """Drop what a failed stage of `epoch` left: its rows are staged again under a later epoch, so
        these batches must never be published. If that cannot be made durable, stop for good."""
        writer = self.sink._writer
        try:
            for rec in writer.log.staged():
                if rec.epoch == epoch:
                    writer.abort_staged(rec.batch)
        except BaseException as exc:
            log.error("SparkSink %s: cannot abort the partly staged epoch %d: %r", self.sink.table, epoch, exc)
            self.fatal = exc

    def _publish_upto(self, epoch: int) -> None:
        writer = self.sink._writer
        published = False
        try:
            for rec in writer.log.unpublished():
                if rec.epoch is not None and rec.epoch <= epoch:
                    self._check_stop()
                    self._count(writer.publish(rec.batch))
                    published = True
        except Stopped:
            raise
        except Exception as exc:
            log.error("SparkSink %s: publishing epochs <= %d failed (retried at the next completed checkpoint "
                      "or on restart): %r", self.sink.table, epoch, exc)
            raise
        finally:
            if published and not self._stop.is_set():
                self._refresh()

    def _count(self, rows: int) -> None:
        if rows:
            self.batches_published += 1
            self.sink.rows_committed += rows
            self.sink._metrics.rows_committed.inc(rows)
            self.sink._metrics.batches.inc()

    def _refresh(self) -> None:
        sink = self.sink
        if sink._spark is not None and sink._meta is not None:
            from spark_sink.catalog import refresh_table

            sink._ensure_catalog(sink._meta)
            try:
                refresh_table(sink._spark, sink.table)
            except Exception as exc:  # noqa: BLE001 - published; readers refresh too
                log.warning("REFRESH TABLE %s failed after publishing: %s", sink.table, exc)
