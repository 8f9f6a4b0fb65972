"""EpochCommitter: the exactly-once sink's two-phase commit, one checkpoint epoch at a time.

Under guarantee="exactly_once" the runtime calls, on the SPU's thread:
  process()                   rows are buffered (the tuple is acked at once: trees are flow control only);
  on_checkpoint(e)            the buffered rows become epoch e's: staged durably (phase one) on this
                              committer's thread; the returned Future completes when they are, and the
                              checkpoint waits for it;
  on_checkpoint_complete(e)   every staged epoch <= e is published (phase two: rename into the table);
  open() after a rollback or restart with context.restored_epoch = E: staged epochs <= E are published
                              (their checkpoint completed, the process died before publishing), later
                              ones aborted (their rows come again from the replay);
  abandon()                   a rollback discards the instance: nothing more is staged or published.
Batch ids are `<writer>.e<epoch>.p<part>` and the writer name is per instance, not per SPU, so a
relaunched instance finds its staged epochs and a republished epoch is recognised by the commit log.
One thread does all file and Spark work, in order.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Callable

from spark_sink.encode import encode
from spark_sink.layout import epoch_batch_id

if TYPE_CHECKING:
    from spark_sink.bolt import SparkSink

log = logging.getLogger(__name__)


class EpochCommitter:
    """Stages and publishes one sink instance's epochs on a single background thread."""

    def __init__(self, sink: "SparkSink", restored_epoch: int | None, setup: Callable[[], None] | None) -> None:
        self.sink = sink
        self._rows: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"spark-sink-{sink.writer_id}")
        self._last: Future = self._thread.submit(self._start, restored_epoch, setup)
        self.fatal: BaseException | None = None

    # -- the SPU's thread ---------------------------------------------------------

    def add(self, partition: tuple[Any, ...], row: dict[str, Any]) -> None:
        self._rows.append((partition, row))

    def checkpoint(self, epoch: int) -> Future:
        rows, self._rows = self._rows, []
        self._last = self._thread.submit(self._stage, epoch, rows)
        return self._last

    def complete(self, epoch: int) -> None:
        self._last = self._thread.submit(self._publish_upto, epoch)

    def close(self, timeout: float) -> None:
        """A normal stop, after the final checkpoint: rows after it are not part of any checkpoint."""
        if self._rows:
            log.warning("SparkSink %s: %d rows after the last checkpoint are not written (a restart produces them "
                        "again)", self.sink.table, len(self._rows))
            self._rows = []
        self._finish(timeout)

    def abandon(self) -> None:
        """A rollback: queued work is dropped, the running step ends, the commit log is released."""
        self._rows = []
        self._thread.shutdown(wait=True, cancel_futures=True)
        self.sink._release()

    def _finish(self, timeout: float) -> None:
        try:
            self._last.result(timeout)
        except Exception as exc:  # noqa: BLE001 - reported; the commit log decides on restart
            log.error("SparkSink %s: last epoch step failed at stop: %r", self.sink.table, exc)
        self._thread.shutdown(wait=True, cancel_futures=True)
        self.sink._release()

    # -- the committer thread ---------------------------------------------------------

    def _start(self, restored_epoch: int | None, setup: Callable[[], None] | None) -> None:
        try:
            if setup is not None:
                setup()
        except BaseException as exc:
            self.fatal = exc
            raise
        writer = self.sink._writer
        for rec in writer.log.staged():
            if restored_epoch is not None and rec.epoch is not None and rec.epoch <= restored_epoch:
                self._count(writer.publish(rec.batch))
            else:
                writer.abort_staged(rec.batch)
        self._refresh()

    def _stage(self, epoch: int, rows: list[tuple[tuple[Any, ...], dict[str, Any]]]) -> None:
        if self.fatal is not None:
            raise self.fatal
        if not rows:
            return
        sink = self.sink
        meta = sink._meta or sink._infer_meta([row for _, row in rows])
        sink._meta = meta
        by_partition: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
        for partition, row in rows:
            by_partition[partition].append(row)
        writer = sink._writer
        for part, partition in enumerate(sorted(by_partition, key=repr)):
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

    def _publish_upto(self, epoch: int) -> None:
        writer = self.sink._writer
        published = False
        for rec in writer.log.staged():
            if rec.epoch is not None and rec.epoch <= epoch:
                self._count(writer.publish(rec.batch))
                published = True
        if published:
            self._refresh()

    def _count(self, rows: int) -> None:
        if rows:
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
