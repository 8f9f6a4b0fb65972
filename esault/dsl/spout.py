"""Spout: a source of tuples, driven by the runtime calling next_tuple()."""

from __future__ import annotations

import itertools
from typing import Any, Callable

from esault.dsl.context import TopologyContext

EmitFn = Callable[[Any, Any, Any], None]
EmitBatchFn = Callable[[list, list, Any], None]
DeadLetterFn = Callable[[Any, Any, str, Any], None]


class Spout:
    """Subclass and implement next_tuple(), which calls self.emit() zero or more times.

    The runtime calls next_tuple() repeatedly on the SPU's actor thread while
    fewer than max_spout_pending tuple trees are in flight. Call self.finish()
    once the source is exhausted; ack/fail keep arriving for pending tuples.
    Framework attributes start with `_esault_` and never collide with yours.
    """

    _esault_emit: EmitFn | None = None
    _esault_emit_batch: EmitBatchFn | None = None
    _esault_dead_letter: DeadLetterFn | None = None
    _esault_request_range: Callable[[int, list, int], None] | None = None
    _esault_finished: bool = False

    def open(self, context: TopologyContext) -> None:
        """Called once on the SPU's thread before the first next_tuple()."""

    def next_tuple(self) -> None:
        raise NotImplementedError(
            f"{type(self).__name__} must implement next_tuple(), calling self.emit(key, value)"
        )

    def ack(self, msg_id: Any) -> None:
        """The tuple tree rooted at msg_id completed."""

    def fail(self, msg_id: Any) -> None:
        """The tree of msg_id failed or timed out; re-emit it to get at-least-once."""

    def drop(self, msg_id: Any) -> None:
        """The runtime gave up on msg_id after max_retries failures and dead-lettered it."""

    def close(self) -> None:
        """Called once when the job stops."""

    def abandon(self) -> None:
        """The runtime discards this instance without close() (a rollback): release connections, commit nothing.

        A restored instance takes over from the last completed checkpoint's position.
        """

    def backlog(self) -> int | None:
        """Tuples the source holds ready but has not emitted yet (a Kafka consumer's lag, the rest of a
        burst), or None when it cannot tell. Read on the SPU's thread at every tick and exported as the
        spout's `backlog`: a rate-based controller (DS2) sees the demand max_spout_pending hides."""
        return None

    def waiting_for(self) -> str | None:
        """What the source waits for outside esault right now ("broker host:9092"), or None. Read at every
        tick; the SPU notes since when, and Job.status() / `esault status` show "waiting for ... since ...",
        so a stalled input is visible as a wait, not as a quiet job."""
        return None

    def partition_status(self) -> list[tuple[str, int, int, int | None, int | None, bool]] | None:
        """The partitions this instance reads, one (topic, partition, offset, end_offset, lag, idle) each:
        offset the next one to emit, end_offset the log's end (None: not known yet), lag the records between
        (None: not known), idle whether it is left out of the watermark for now. None (the default): the
        source has no partitions to show. Read on the SPU's thread every few ticks; Job.status(),
        `esault status`, the REST API and the web page show the rows (KafkaSource implements it)."""
        return None

    def watermark(self) -> float | None:
        """Event-time progress, for a source that declares watermarks (`esault_emits_watermarks`): no tuple it
        emits from now on has an event time below this (the unit of its timestamps), except one that is late in
        its own input. None: it cannot say yet. Read on the SPU's thread at every tick, between next_tuple()
        calls; the SPU sends it downstream in band when it moved (docs/WINDOWS.md, "Watermarks per channel")."""
        return None

    def watermark_idle(self) -> bool:
        """True while the source has nothing to emit for a while (KafkaSource: every partition it reads idle for
        its idle_timeout): the SPUs downstream leave this instance out of their minimum until it emits again."""
        return False

    @classmethod
    def esault_emits_watermarks(cls, params: dict[str, Any]) -> bool:
        """Whether instances made with `params` implement watermark(). The topology decides from this, before
        anything runs, which SPUs combine watermarks per input channel (esault.dsl.watermark_flow)."""
        return False

    def snapshot_position(self) -> Any:
        """Where this source is, for a checkpoint: everything emitted so far lies before it.

        Called on the SPU's thread between next_tuple() calls. Return a
        msgpack-serialisable value (an offset, an index, a dict). A spout that
        implements this and restore_position() can rewind, so its job may run
        with guarantee="exactly_once" (the default).
        """
        raise NotImplementedError

    def restore_position(self, position: Any) -> None:
        """Resume after `position` (from snapshot_position()): called after open(), before next_tuple()."""
        raise NotImplementedError

    def on_checkpoint_complete(self, epoch: int, position: Any) -> None:
        """Checkpoint `epoch`, which recorded this instance at `position` (its snapshot_position()), is durable
        job-wide: a source may acknowledge it upstream (KafkaSource commits its offsets to the group).

        Called on the SPU's thread. Not called for a checkpoint that failed, nor twice for one epoch.
        """

    @classmethod
    def can_rewind(cls) -> bool:
        """True if the class implements snapshot_position() and restore_position()."""
        return (cls.snapshot_position is not Spout.snapshot_position
                and cls.restore_position is not Spout.restore_position)

    # A live rescale under at_least_once (esault.job.spout_rescale): the instances move shares of the input
    # (KafkaSource: partitions) without a checkpoint. All three run on the SPU's thread between next_tuple() calls.

    def release_share(self, instances: int) -> None:
        """The source is to run `instances` instances: stop reading what this instance does not own at that
        count (everything, for an instance that retires); go on with the rest."""
        raise NotImplementedError

    def released_position(self, final: bool) -> Any:
        """Where what release_share() gave up is to be read from by the instances that take it: a position at
        or before every record of it not acked yet. None while its tuples in flight may still be acked (asked
        again after each ack, fail and tick); `final` (message_timeout passed): answer now."""
        raise NotImplementedError

    def take_share(self, instances: int, position: Any) -> None:
        """Run as one of `instances` instances: read what this instance owns at that count and did not keep,
        from `position` (the merge, by esault_merge_positions, of every giver's released_position()). Called
        on a surviving instance, and on a new one right after open()."""
        raise NotImplementedError

    @classmethod
    def moves_shares_live(cls) -> bool:
        """True if the class implements release_share(), released_position() and take_share()."""
        return all(getattr(cls, name) is not getattr(Spout, name)
                   for name in ("release_share", "released_position", "take_share"))

    def emit(self, key: Any, value: Any, msg_id: Any = None) -> None:
        """Send one tuple downstream; with a msg_id its tree is tracked and acked."""
        emit = self._esault_emit
        if emit is None:
            raise RuntimeError(
                f"{type(self).__name__}.emit() was called before the runtime opened the spout; "
                "emit from next_tuple(), ack(), fail() or open()"
            )
        emit(key, value, msg_id)

    def emit_batch(self, keys: list, values: list, msg_id: Any = None) -> None:
        """Send many tuples downstream as one tracked unit: acked, failed and replayed together.

        For sources whose natural unit is a chunk (a range of file offsets, a
        Kafka fetch): one msg_id for all of them costs the bookkeeping of one.
        """
        emit = self._esault_emit_batch
        if emit is None:
            raise RuntimeError(
                f"{type(self).__name__}.emit_batch() was called before the runtime opened the spout; "
                "emit from next_tuple(), ack(), fail() or open()"
            )
        if len(keys) != len(values):
            raise ValueError(f"{type(self).__name__}.emit_batch(): {len(keys)} keys but {len(values)} values; "
                             "pass one value per key")
        emit(keys, values, msg_id)

    def request_range(self, size: int, done: list, block: int) -> None:
        """Lease the next block of a space this spout's instances share, [0, size) (a file's bytes), that none
        of them has leased: whoever is free reads next, so instances on busier processes read less
        (esault.reliability.shared_ranges). `done` is what this instance restored as read (the merged position
        its merge hook gave every instance; [] on a fresh start), `block` the most bytes one lease covers. The
        answer comes later, on the SPU's thread, to on_range(). A block is leased again after a rollback when no
        checkpointed position covers it (exactly_once), or to the replacement of an instance lost with its
        worker (at_least_once)."""
        request = self._esault_request_range
        if request is None:
            raise RuntimeError(f"{type(self).__name__}.request_range() was called before the runtime opened the "
                               "spout; call it from next_tuple()")
        request(size, done, block)

    def on_range(self, start: int | None, end: int | None, error: str) -> None:
        """The answer to request_range(): [start, end) is this instance's to read; start None once every block
        is leased, or when `error` says why the request was refused."""

    def dead_letter(self, key: Any, value: Any, error: str, msg_id: Any = None) -> None:
        """Give up on one input that cannot become a tuple (a record that does not decode): it goes to the job's
        dead letters with `error`, counted, and the source goes on. msg_id says where it was (e.g. a dict of
        topic, partition, offset); key and value are kept as JSON when they can be, else as their repr()."""
        dead_letter = self._esault_dead_letter
        if dead_letter is None:
            raise RuntimeError(f"{type(self).__name__}.dead_letter() was called before the runtime opened the "
                               "spout; call it from next_tuple()")
        dead_letter(key, value, error, msg_id)

    def finish(self) -> None:
        """Declare the source exhausted: next_tuple() is not called again."""
        self._esault_finished = True

    @property
    def finished(self) -> bool:
        return self._esault_finished


MERGE_HOOK = "esault_merge_positions"
"""A spout class may define `esault_merge_positions(positions: list) -> position` (a staticmethod): one
position covering every instance's, from which each instance of any count restores its own share
(KafkaSource's: the union of the partitions' offsets). Such a spout can be rescaled on a running job
(Job.rescale) and restored with another parallelism (docs/CONNECTORS.md, "Rescaling a source")."""


def merge_hook(spout_class: type) -> Callable[[list], Any] | None:
    """The class's esault_merge_positions, or None: without it a spout's instance count is fixed."""
    return getattr(spout_class, MERGE_HOOK, None)


class ReplayingSpout(Spout):
    """A spout that keeps emitted-but-unacked tuples and re-emits them on fail().

    emit() without a msg_id assigns a sequence number, so every tuple is
    tracked. Memory is bounded by the runtime's max_spout_pending.
    """

    def __init__(self) -> None:
        self._esault_pending: dict[Any, tuple[Any, Any]] = {}
        self._esault_seq = itertools.count()
        self.replayed = 0

    def emit(self, key: Any, value: Any, msg_id: Any = None) -> None:
        if msg_id is None:
            msg_id = next(self._esault_seq)
        self._esault_pending[msg_id] = (key, value, False)
        Spout.emit(self, key, value, msg_id)

    def emit_batch(self, keys: list, values: list, msg_id: Any = None) -> None:
        if msg_id is None:
            msg_id = next(self._esault_seq)
        self._esault_pending[msg_id] = (keys, values, True)
        Spout.emit_batch(self, keys, values, msg_id)

    def ack(self, msg_id: Any) -> None:
        self._esault_pending.pop(msg_id, None)

    def fail(self, msg_id: Any) -> None:
        entry = self._esault_pending.get(msg_id)
        if entry is not None:
            self.replayed += 1
            (Spout.emit_batch if entry[2] else Spout.emit)(self, entry[0], entry[1], msg_id)

    def drop(self, msg_id: Any) -> None:
        self._esault_pending.pop(msg_id, None)

    @property
    def pending_count(self) -> int:
        return len(self._esault_pending)
