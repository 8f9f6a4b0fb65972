"""Bolt: user processing logic; for key-grouped bolts one instance per key (a PE)."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any, Callable, Protocol

from esault.dsl.context import TopologyContext
from esault.dsl.tuple import Tuple


RUNTIME_ATTRIBUTES = ("key", "emit", "_esault_emit", "_esault_defer", "_esault_spu", "_esault_stats")
"""Instance attributes the runtime sets on a PE; they are not the user's state."""


class Anchor(Protocol):
    """A held input tuple: ack() or fail() it later, from any thread."""

    def ack(self) -> None: ...

    def fail(self, reason: str) -> None: ...


class SpuServices(Protocol):
    """What the SPU running a PE offers it beyond emit (esault.datapath.pe_services implements it)."""

    local: dict[str, Any]

    def now(self) -> float: ...

    def ticks(self, key: Any, on: bool) -> None: ...


class Bolt:
    """Subclass and implement process(tup); call self.emit(key, value) for output.

    Key-grouped bolts: the runtime creates one instance per key per SPU (a
    processing element) on the key's first tuple. self.key is that key and the
    instance's own attributes are that key's state: they move with the key when
    its SPU splits or merges (see snapshot_state). Other groupings: one
    instance per SPU. All calls run on the owning SPU's actor thread.
    """

    key: Any = None
    _esault_emit: Callable[[Any, Any], None] | None = None
    _esault_defer: Callable[[], Anchor] | None = None
    _esault_spu: SpuServices | None = None
    esault_tick_interval: float = 0.05
    """At most how often (seconds) on_tick() runs on a PE that asked for ticks."""
    esault_watermark_lag: float = 0.0
    """How far this bolt's output may lag the watermark of its input: an SPU forwards its inputs' watermark minus
    this (a window emits a window only once its bound passed: its output is that much older)."""

    def open(self, context: TopologyContext) -> None:
        """Called once before the first process() (for a PE: before its key's first tuple)."""

    def process(self, tup: Tuple) -> None:
        raise NotImplementedError(
            f"{type(self).__name__} must implement process(tup), calling self.emit(key, value)"
        )

    def on_batch_end(self) -> None:
        """Not key-grouped bolts: every tuple of one input batch went through process().

        Emits here join that batch's trees (acked, replayed and checkpointed with
        it): a combiner (TAG's partial aggregates) flushes what it folded here, so
        nothing it holds outlives the batch.
        """

    def on_expire(self) -> None:
        """A PE idle for pe_idle_timeout is about to leave memory; it may emit (unanchored).

        Its state (snapshot_state(), taken after this returns) is kept in the
        unit's state store and restored when the key's next tuple arrives, so
        expiry never loses state: reset attributes here to start the key afresh.
        """

    def on_tick(self, now: float) -> None:
        """Called on the SPU's thread every esault_tick_interval while this instance asked for ticks (want_ticks()).

        `now` is the job clock. It may emit (unanchored, like on_expire()). For
        a PE, a tick counts as use: a ticking PE does not expire, and what the
        tick changes enters the next checkpoint. Ticks pause while the SPU
        receives keys in a hand-off (their held tuples run first).
        """

    def want_ticks(self, on: bool = True) -> None:
        """Ask for on_tick() calls (on=True) or stop them. Call again after a move (restore_state())."""
        spu = self._esault_spu
        if spu is None:
            raise RuntimeError(f"{type(self).__name__}.want_ticks() was called outside the runtime; "
                               "call it from open(), process(), on_tick() or restore_state()")
        spu.ticks(self.key, on)

    def now(self) -> float:
        """The job clock (seconds, monotonic): processing time."""
        spu = self._esault_spu
        if spu is None:
            raise RuntimeError(f"{type(self).__name__}.now() was called outside the runtime")
        return spu.now()

    @property
    def spu_local(self) -> dict[str, Any]:
        """A dict shared by the PEs of this SPU, in memory only: not state, it neither moves nor is checkpointed."""
        spu = self._esault_spu
        if spu is None:
            raise RuntimeError(f"{type(self).__name__}.spu_local was used outside the runtime")
        return spu.local

    def finish(self) -> None:
        """The input has ended: emit what is still pending (a final count, a partial aggregate, a last batch).

        Called once per instance (for a key-grouped bolt: per PE, parked ones
        woken), after the last tuple and before close(), upstream bolts first,
        so what upstream finish() emits is processed here before this runs.
        Under exactly_once it runs at the final checkpoint's barrier, before the
        snapshot, and only if every source had finished (Flink's finish()): what
        it emits is inside that last checkpoint, so exactly-once sinks commit it
        once and a restart from it does not emit it again. A stop before the
        sources finished (job.stop() mid-stream, stop-with-savepoint) does not
        call it: a restart goes on with the state. A job restored from a
        checkpoint taken after its input ended does not call it again, even
        if its sources read new records (finished stays finished, as in Flink).
        Without checkpoints it runs when the job stops. Emit final results here,
        not in close(): under exactly_once, output after the last checkpoint is
        refused by exactly-once sinks. If it raises, the run fails.
        """

    def close(self) -> None:
        """Called once when the job stops (not when a PE expires or migrates): release resources.

        Emit final results in finish(), which runs before it at the end of the input."""

    def on_checkpoint(self, epoch: int) -> "Future[None] | None":
        """Checkpoint `epoch`'s barrier passed this instance: every input before it was processed.

        Called on the SPU's thread (for non-key-grouped bolts and chained
        stages). A sink pre-commits the epoch's output here; return a Future
        that completes once it is durable (the checkpoint waits for it), or None.
        """
        return None

    def on_checkpoint_complete(self, epoch: int) -> None:
        """Checkpoint `epoch` is recorded durably for the whole job: a sink publishes what it staged."""

    def abandon(self) -> None:
        """The runtime discards this instance without close() (a rollback): release resources, publish nothing."""

    def waiting_for(self) -> str | None:
        """What this instance waits for outside esault right now ("broker host:9092 (publishing epoch 5)"), or
        None. Non-keyed bolts only; read on the SPU's thread at its ticks (at least every
        WAITING_CHECK_INTERVAL seconds while it overrides this); the SPU notes since when, and Job.status() /
        `esault status` show "waiting for ... since ...", so a sink held by its store is visible as a wait."""
        return None

    def emit(self, key: Any, value: Any) -> None:
        """Send one tuple downstream, anchored to the input being processed."""
        emit = self._esault_emit
        if emit is None:
            raise RuntimeError(
                f"{type(self).__name__}.emit() was called outside the runtime; "
                "emit from process(), on_expire() or open()"
            )
        emit(key, value)

    def defer(self) -> Anchor:
        """Hold the current input: it is acked only when the returned anchor is.

        For sinks that ack after a durable commit. Call inside process().
        """
        defer = self._esault_defer
        if defer is None:
            raise RuntimeError(f"{type(self).__name__}.defer() must be called inside process()")
        return defer()

    def snapshot_state(self) -> dict[str, Any]:
        """This PE's state, to move with its key. Default: every public attribute.

        Values must be msgpack-serialisable (str, bytes, numbers, bool, None,
        lists, dicts): override with restore_state() for anything else.
        A keyed PE that keeps both defaults holds the attributes its methods
        store in slots (datapath/state_slots.py): its state is read by the
        runtime, so read your own by name, not through `__dict__` or vars()
        (asking for it gives the PE a dict for good, and slows every method call on it).
        """
        state = self.__dict__.copy()  # a copy and four pops: a checkpoint calls this for every changed key
        for name in RUNTIME_ATTRIBUTES:
            state.pop(name, None)
        return state

    def restore_state(self, state: dict[str, Any]) -> None:
        """Install state produced by snapshot_state() on a fresh instance."""
        vars(self).update(state)
