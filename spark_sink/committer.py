"""AsyncCommitter: the sink's one background thread, so Spark latency never stalls the topology.

The topology's thread calls add(); the committer thread seals due batches
(by row count or age), commits them one at a time in seal order, and acks each
batch's anchors after its commit (or fails them after commit_retries retries).
Backpressure: add() blocks while max_buffered_batches sealed batches are
waiting or committing. All waits are on one Condition; time comes from an
injected Clock (call wake() after advancing a ManualClock).
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from typing import Any, Callable

from esault.clock import Clock, SystemClock
from esault.errors import ConfigError, SinkError
from esault.thread_names import os_named
from spark_sink.batcher import Batch, Batcher

log = logging.getLogger(__name__)


def check_settings(max_buffered_batches: int, commit_retries: int, retry_backoff: float) -> None:
    """Raise ConfigError naming a bad committer setting."""
    mbb = max_buffered_batches
    if not isinstance(mbb, int) or isinstance(mbb, bool) or mbb < 1:
        raise ConfigError(f"max_buffered_batches must be a whole number >= 1, got {mbb!r}")
    if not isinstance(commit_retries, int) or isinstance(commit_retries, bool) or commit_retries < 0:
        raise ConfigError(f"commit_retries must be a whole number >= 0, got {commit_retries!r}")
    if not isinstance(retry_backoff, (int, float)) or isinstance(retry_backoff, bool) or retry_backoff < 0:
        raise ConfigError(f"retry_backoff must be seconds >= 0, got {retry_backoff!r}")


class AsyncCommitter:
    """Seal and commit a Batcher's batches on a background thread (see module doc).

    commit(batch) must be idempotent per batch id: after an exception it is
    called again with the same batch. setup() runs first on the thread (e.g.
    to start Spark); if it raises, the committer is dead: every buffered
    anchor is failed, add() fails anchors at once, and `fatal` says why.
    """

    def __init__(
        self,
        batcher: Batcher,
        commit: Callable[[Batch], None],
        *,
        max_buffered_batches: int = 4,
        commit_retries: int = 3,
        retry_backoff: float = 0.5,
        clock: Clock | None = None,
        setup: Callable[[], None] | None = None,
        on_commit_error: Callable[[Batch, BaseException], None] | None = None,
        on_stop: Callable[[], None] | None = None,
        name: str = "spark-sink",
    ) -> None:
        check_settings(max_buffered_batches, commit_retries, retry_backoff)
        self._batcher = batcher
        self._commit = commit
        self._max = max_buffered_batches
        self._retries = commit_retries
        self._backoff = float(retry_backoff)
        self._clock: Clock = clock or SystemClock()
        self._setup = setup
        self._on_error = on_commit_error
        self._on_stop = on_stop
        self._cond = threading.Condition(threading.Lock())  # never re-entered; cheaper than an RLock
        self._queue: collections.deque[Batch] = collections.deque()
        self._busy = False
        self._closing = False
        self._abort = threading.Event()
        self.fatal: BaseException | None = None
        self.ready = False  # setup() has finished
        self.batches_committed = 0
        self.batches_failed = 0
        self.blocked_adds = 0
        self._thread = threading.Thread(target=os_named(self._run), name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    # -- topology thread ---------------------------------------------------

    def add(self, partition: tuple[Any, ...], row: dict[str, Any], anchor: Any) -> None:
        """Buffer one row; may block (backpressure) until the committer has room."""
        with self._cond:
            if self.fatal is not None or self._closing:
                _fail(anchor, self._unusable_reason())
                return
            batcher = self._batcher
            now = self._clock.now() if batcher.buffered_rows == 0 else 0.0  # only the oldest row's time is kept
            if batcher.add(partition, row, anchor, now):
                self._seal_locked(block=True)
            elif batcher.buffered_rows == 1:
                self._cond.notify_all()  # a deadline now exists: the committer must time it

    def flush(self) -> None:
        """Seal what is buffered now (blocking for room like add())."""
        with self._cond:
            self._seal_locked(block=True)

    def wake(self) -> None:
        """Make the committer re-read the clock (after advancing a ManualClock)."""
        with self._cond:
            self._cond.notify_all()

    def _seal_locked(self, block: bool) -> bool:
        need = self._batcher.pending_batches()
        if need == 0:
            return False
        if self._queue and len(self._queue) + need > self._max:
            if not block:
                return False
            self.blocked_adds += 1
            while (
                self._queue and len(self._queue) + need > self._max
                and self.fatal is None and not self._abort.is_set()
            ):
                self._cond.wait()
            if self.fatal is not None or self._abort.is_set():
                return False  # the buffered anchors were failed by whoever set it
        self._queue.extend(self._batcher.seal(self._clock.now()))
        self._cond.notify_all()
        return True

    def _unusable_reason(self) -> str:
        if self.fatal is not None:
            return f"Spark sink is not running: {type(self.fatal).__name__}: {self.fatal}"
        return "Spark sink is closed"

    # -- state for the owner -------------------------------------------------

    @property
    def buffered_rows(self) -> int:
        """Rows not yet sealed into a batch."""
        with self._cond:
            return self._batcher.buffered_rows

    @property
    def queued_batches(self) -> int:
        with self._cond:
            return len(self._queue)

    # -- committer thread ----------------------------------------------------

    def _run(self) -> None:
        try:
            self._loop()
        finally:
            if self._on_stop is not None:
                self._on_stop()

    def _loop(self) -> None:
        if self._setup is not None:
            try:
                self._setup()
            except BaseException as exc:  # noqa: BLE001 - reported through `fatal`
                log.error("Spark sink setup failed: %s", exc)
                with self._cond:
                    self.fatal = exc
                    self._fail_everything_locked(self._unusable_reason())
                    self._cond.notify_all()
                return
        with self._cond:
            self.ready = True
            self._cond.notify_all()
        while True:
            with self._cond:
                batch = None
                while batch is None:
                    if self._abort.is_set():
                        self._fail_everything_locked("Spark sink closed before this batch was committed")
                        self._cond.notify_all()
                        return
                    now = self._clock.now()
                    if self._batcher.buffered_rows and (self._closing or self._batcher.due(now)):
                        self._seal_locked(block=False)
                    if self._queue:
                        batch = self._queue[0]
                        self._busy = True
                        break
                    if self._closing and self._batcher.buffered_rows == 0:
                        self._cond.notify_all()
                        return
                    deadline = self._batcher.deadline()
                    self._cond.wait(None if deadline is None else max(0.0, deadline - now))
            ok = self._commit_with_retries(batch)
            with self._cond:
                self._queue.popleft()
                self._busy = False
                if ok:
                    self.batches_committed += 1
                else:
                    self.batches_failed += 1
                self._cond.notify_all()

    def _commit_with_retries(self, batch: Batch) -> bool:
        reason = "not attempted"
        for attempt in range(self._retries + 1):
            if self._abort.is_set():
                reason = "Spark sink closed before this batch was committed"
                break
            batch.attempts += 1
            try:
                self._commit(batch)
            except Exception as exc:  # noqa: BLE001 - any failure is retried, then reported
                reason = f"{type(exc).__name__}: {exc}"
                log.warning("commit of batch %s failed (attempt %d of %d): %s",
                            batch.batch_id, attempt + 1, self._retries + 1, reason)
                if self._on_error is not None:
                    self._on_error(batch, exc)
                if attempt < self._retries:
                    self._abort.wait(self._backoff * (2**attempt))
                continue
            for a in batch.anchors:
                if a is not None:
                    a.ack()
            return True
        msg = f"batch {batch.batch_id} was not committed after {batch.attempts} attempt(s): {reason}"
        for a in batch.anchors:
            _fail(a, msg)
        return False

    def _fail_everything_locked(self, reason: str) -> None:
        """Fail the anchors of every queued (not in-flight) and buffered row."""
        keep = 1 if self._busy and self._queue else 0
        while len(self._queue) > keep:
            for a in self._queue.pop().anchors:
                _fail(a, reason)
        for b in self._batcher.seal(self._clock.now()):
            for a in b.anchors:
                _fail(a, reason)

    # -- shutdown --------------------------------------------------------------

    def close(self, timeout: float) -> None:
        """Commit everything buffered, then stop the thread; wait at most `timeout` seconds.

        Raises SinkError if the sink died (setup failed) or the timeout passed;
        anything not committed by then has its anchors failed (it is replayed).
        """
        end = time.monotonic() + timeout
        with self._cond:
            self._closing = True
            self._cond.notify_all()
            if self._thread.ident is None:  # never started
                self._fail_everything_locked("Spark sink closed before it started")
                if self._on_stop is not None:
                    self._on_stop()
                return
        self._thread.join(max(0.0, end - time.monotonic()))
        if self._thread.is_alive():
            self._abort.set()
            with self._cond:
                self._fail_everything_locked(f"Spark sink close() timed out after {timeout}s")
                self._cond.notify_all()
            raise SinkError(
                f"Spark sink did not finish committing within close_timeout={timeout}s; the "
                "uncommitted rows' tuples were failed (they are replayed if the spout replays). "
                "Raise close_timeout if Spark is slow"
            )
        if self.fatal is not None:
            raise SinkError(self._unusable_reason()) from self.fatal


def _fail(anchor: Any, reason: str) -> None:
    if anchor is not None:
        anchor.fail(reason)
