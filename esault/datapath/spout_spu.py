"""SpoutSpuActor: runs one spout instance, tracks its batches as tuple trees, replays or dead-letters.

next_tuple() is called in rounds while fewer than max_spout_pending tracked
tuples are in flight; a round ends after batch_size tuples (or when the source
has nothing), its tuples leave as one batch per destination SPU, and the
round's tracked tuples form one tuple tree (one root for the whole batch, not
one per tuple). Each round ends with a self-sent Pump, so acks and control
messages interleave with emitting. An idle spout waits for the next Tick.
The SPU tracks its own trees (an AckTracker): the SPUs that process its
batches send their acks here (esault.datapath.ack_router), so neither a
round's start nor its outcome crosses to the driver.
A tree that fails or times out replays each of its msg_ids (spout.fail).
"""

from __future__ import annotations

import time
from collections import deque
from random import getrandbits
from typing import Any, Iterable

from esault.metrics import registry as metrics
from esault.metrics.partition_status import checked_rows
from esault.datapath.ack_router import UNREACHABLE
from esault.datapath.anchors import EdgeAnchor, NoAnchor
from esault.datapath.context import log
from esault.user_errors import UserErrorLog, user_frame
from esault.datapath.emitter import build_emit_many
from esault.checkpoint.saveable import POSITION_FIX
from esault.messages.acking import (AckFail, AckUpdate, DeadLettered, FailPending, OwnerGone, RangeGrant,
                                    RangeRequest, RegisterOwner, SpoutProgress)
from esault.messages.checkpoints import CheckpointAck, CheckpointComplete, TriggerCheckpoint
from esault.messages.data import Pump, Tick
from esault.messages.shares import ReleaseShare, ShareReleased, ShareTaken, TakeShare
from esault.datapath.sender import SenderActor
from esault.datapath.watermarks import SourceWatermarks, WatermarkOut
from esault.reliability.ack_tracker import AckTracker, TreeOutcome
from esault.reliability.roots import new_root, owner_key
from esault.thread_names import name_os_thread
from esault.transport.codec import _SIMPLE

class _Settle:
    """spout SPU -> itself: trees decided at their start (nothing to ack) settle after the current handler."""

    __slots__ = ()


_SETTLE = _Settle()
PARTITION_READ_INTERVAL = 0.2
"""Seconds between Spout.partition_status() reads: status is read by people, a heartbeat goes every 0.2 s."""


class SpoutSpuActor(SenderActor):
    """One spout SPU; it owns the trees it roots, and tracks them: their acks come to it."""

    def __init__(self, cfg, spec, job) -> None:
        super().__init__(cfg, spec, job)
        conf = job.config
        self.max_pending = spec.max_pending or conf.max_spout_pending
        self.batch_size = conf.batch_size
        self.batch_delay = conf.batch_delay
        self.max_retries = conf.max_retries
        self.owner = owner_key(cfg.spu_id)  # what the roots of its trees carry (esault.reliability.roots)
        self._me: Any = None  # how the ack server knows this SPU (RegisterOwner); OwnerGone names it again
        self.tracker = AckTracker(job.clock, conf.message_timeout)
        self._decided: list[TreeOutcome] = []  # trees decided at their start, settled by the next _Settle
        # root -> (the batch's tracked (msg_id, key, value, tuples), time its round started); an
        # emit_batch() entry holds lists of keys and values and counts len(keys) tuples
        self.pending: dict[int, tuple[list[tuple[Any, Any, Any, int]], float]] = {}
        self.pending_count = 0  # tracked tuples in `pending`
        self.failures: dict[Any, int] = {}  # msg_id -> failed attempts so far
        self._batch: list[tuple[Any, Any, Any, int]] = []  # tracked entries of the round being emitted
        self._batch_count = 0  # tuples in them
        self._root = 0  # the round's tree, made on first need (a chained stage's defer(), or flush)
        self._extra_xor = 0  # edges of anchors deferred in this round, acked by their anchors
        self._pumping = False
        self._emits = 0
        # key(s), value(s), msg_id, many, when the spout emitted them (their latency counts from then)
        self._overflow: deque[tuple[Any, Any, Any, bool, float]] = deque()
        self._emitted_at: float | None = None  # set while held-back tuples go out: their original emit time
        self._batch_since: float | None = None  # the earliest emit time of the tracked tuples in the batch
        self._now = job.clock.now()
        self._error_log = UserErrorLog(now=job.clock.now)  # next_tuple()
        self._callback_log = UserErrorLog(now=job.clock.now)  # ack(), fail(), drop()
        self.max_errors = conf.max_spout_errors
        self._waiting_for: str | None = None  # what Spout.waiting_for() last said
        self._partitions_due = 0.0  # the tick time from which Spout.partition_status() is read again
        self._errors_in_a_row = 0  # next_tuple() calls that raised since the last one that returned
        self.error = ""  # why this spout stopped early (open() or next_tuple() kept raising); "" if it did not
        self.spout: Any = None
        self._route = self.emit_path
        self._route_many = (build_emit_many(self.router, self._route, self.check_emit) if not self.stages
                            else build_emit_many(None, self._route, self.check_emit))
        self._latency = metrics.TUPLE_LATENCY.labels(job.name, spec.name)
        self.finished = False
        self._reported = (False, False, "")  # (finished, drained, error) as last told to the ack server
        self._barrier_due: TriggerCheckpoint | None = None  # injected at the next round boundary
        self._positions: dict[int, Any] = {}  # epoch -> the position its barrier recorded, until it completes
        self._replaces = cfg.replaces  # the lost SPUs this one replaced: named in its first range request
        self.unit_ref = cfg.extra.get("unit_ref")
        self._releasing: tuple[int, float] | None = None  # a live rescale: (its id, when to answer at the latest)
        self.watermarks: SourceWatermarks | None = None
        """The spout emits watermarks (a KafkaSource on event time): sent on ticks (datapath/watermarks.py)."""
        if cfg.extra.get("watermarks"):  # the unit decided it from the topology (esault.dsl.watermark_flow)
            self.watermarks = SourceWatermarks(WatermarkOut(cfg.spu_id, self.router.broadcast, self.flush),
                                               f"topology {job.name!r}: spout {spec.name!r} SPU {cfg.spu_id}")
        self._handlers.update({Pump: self._on_pump, Tick: self._on_tick, AckUpdate: self._on_ack_update,
                               AckFail: self._on_ack_fail, FailPending: self._on_fail_pending, _Settle: self._on_settle,
                               TriggerCheckpoint: self._on_trigger, RangeGrant: self._on_range_grant,
                               ReleaseShare: self._on_release_share, TakeShare: self._on_take_share})

    def on_start(self) -> None:
        share = None
        name_os_thread(f"spu-{self.spu_id} {self.unit_name}")  # top -H tells the SPUs apart
        self.job.stats.register(self.stats)
        # In a worker, named by address: this actor may start before the postman has registered it.
        me = self._me = self.reachable_self()
        self.job.acks.register(self.owner, self.actor_ref)  # this process's SPUs ack it directly
        self.acker.tell(RegisterOwner(self.spu_id, me))  # others, through the ack server, which says where it is
        self.job.ticker.subscribe(self.actor_ref)
        step = "open() of a bolt chained into it"
        try:
            self.open_stages()
            step = "constructor"
            self.spout = self.spec.instantiate()
            self.spout._esault_emit = self._emit
            self.spout._esault_emit_batch = self._emit_batch
            self.spout._esault_dead_letter = self._spout_dead_letter
            self.spout._esault_request_range = self._request_range
            step = "open()"
            self.spout.open(self.context())
            if self.cfg.restore_epoch is not None:
                step = "restore from a checkpoint"
                self.restore_stages()
                if self.cfg.position is not None:
                    step = "restore_position()"
                    self.spout.restore_position(self.cfg.position)
            share = self.cfg.extra.get("take_share")  # started by a live rescale: [rescale id, position]
            if share is not None:
                step = "take_share()"
                self.spout.take_share(self.cfg.instances, share[1])
        except Exception as exc:
            self.failed_to_start(step, exc)
            self.error = self.start_error or ""
            if share is not None:
                self._tell_unit(ShareTaken(share[0], self.spu_id, self.error or repr(exc)))
            self._finish()
            self.flush()
            return
        if share is not None:
            self._tell_unit(ShareTaken(share[0], self.spu_id, ""))
        self.flush()
        self._schedule()

    def _finish(self) -> None:
        """No more next_tuple(); the job hears of it at the next flush, once the last round has left."""
        self.finished = True

    def _report_progress(self) -> None:
        """Tell the driver (through the ack server, wherever this SPU runs) when finished or drained change."""
        drained = not self.pending and not self._overflow and not self._batch
        state = (self.finished, drained, self.error)
        if state != self._reported:
            self._reported = state
            self.acker.tell(SpoutProgress(self.spu_id, self.finished, drained, self.stats.untracked, self.error))

    def on_stop(self) -> None:
        self.job.ticker.unsubscribe(self.actor_ref)
        self.job.acks.forget(self.owner, self.actor_ref)
        if self._me is not None:  # the ack server forgets it too (no FailPending after a rollback, no relay to it)
            try:
                self.acker.tell(OwnerGone(self.spu_id, self._me))
            except UNREACHABLE:  # the driver is gone, or the job's ack server stopped first
                pass
        if self._waiting_for is not None:
            metrics.clear_waiting(metrics.SPOUT_WAITING, self.job.name, self.unit_name, self.spu_id)
        self._error_log.close(f"topology {self.job.name!r}: spout {self.unit_name!r} next_tuple()")
        self._callback_log.close(f"topology {self.job.name!r}: spout {self.unit_name!r} ack()/fail()/drop()")
        if self._abandoned:  # a rollback: no close(), nothing published; a restored SPU takes over
            if self.spout is not None and self.start_error is None:
                try:
                    self.spout.abandon()
                except Exception as exc:
                    log.error("spout %r abandon() raised %r", self.unit_name, exc)
            self.abandon_stages()
            self.close_checkpointing()
            self.job.stats.retire(self.stats)
            return
        try:
            if self.spout is not None and self.start_error is None:
                self.spout.close()
        except Exception as exc:
            log.error("spout %r close() raised %r", self.unit_name, exc)
            self.stats.close_errors += 1
        if not self.job.exactly_once:  # no final checkpoint to finish at: the stop is the end of the input
            self.finish_stages()
        self.close_stages(retire=False)
        super().flush()  # what chained bolts' close() emitted leaves untracked, as a bolt SPU's does
        self.close_checkpointing()

    # --- emitting ---------------------------------------------------------

    def _emit(self, key: Any, value: Any, msg_id: Any = None) -> None:
        """Route one spout tuple; with a msg_id (acking on) it joins the round's tracked batch."""
        self._emits += 1
        if msg_id is None or not self.acking:
            self.stats.untracked += 1
            self._route(key, value)
            return
        if type(key) not in _SIMPLE or type(value) not in _SIMPLE:
            self.check_emit(key, value)  # refuse now, not when a held-back tuple leaves
        try:
            replay = msg_id in self.failures
        except TypeError:
            raise TypeError(f"spout {self.unit_name!r}: msg_id {msg_id!r} must be hashable (an int or str)") from None
        at = self._now if self._emitted_at is None else self._emitted_at
        if self.pending_count + self._batch_count >= self.max_pending:
            self._overflow.append((key, value, msg_id, False, at))  # sent when trees complete: the bound is strict
            return
        self._route(key, value)
        self._batch.append((msg_id, key, value, 1))
        if self._batch_since is None or at < self._batch_since:
            self._batch_since = at
        self._batch_count += 1
        if replay:
            self.stats.replayed += 1

    def _defer(self) -> Any:
        """defer() in a bolt chained into this spout: an extra edge of the round's tree."""
        if not self.acking:
            return NoAnchor()
        if not self._root:
            self._root = new_root(self.owner)
        edge = getrandbits(64) | 1
        self._extra_xor ^= edge
        return EdgeAnchor(self.job.acks, self._root, edge)

    def _emit_batch(self, keys: list, values: list, msg_id: Any = None) -> None:
        """Route many tuples; with a msg_id they are one tracked entry of the round's batch."""
        n = len(keys)
        self._emits += n
        if msg_id is None or not self.acking:
            self.stats.untracked += n
            self._route_many(keys, values)
            return
        try:
            replay = msg_id in self.failures
        except TypeError:
            raise TypeError(f"spout {self.unit_name!r}: msg_id {msg_id!r} must be hashable (an int or str)") from None
        at = self._now if self._emitted_at is None else self._emitted_at
        if self.pending_count + self._batch_count >= self.max_pending:
            self._overflow.append((keys, values, msg_id, True, at))
            return
        self._route_many(keys, values)
        self._batch.append((msg_id, keys, values, n))
        self._batch_count += n
        if self._batch_since is None or at < self._batch_since:
            self._batch_since = at
        if replay:
            self.stats.replayed += n

    def flush(self) -> None:
        """The round's buffers leave; its tracked tuples become one tree, tracked here from now on."""
        entries = self._batch
        if entries or self._root:
            self._batch = []
            root = self._root or new_root(self.owner)
            sent, xors = self.router.flush([root])
            # End-to-end latency counts from the spout's emit: for tuples max_pending held back, the
            # emit call, not the round that released them (one sample per batch, from its oldest).
            self.pending[root] = (entries, self._now if self._batch_since is None else self._batch_since)
            self._batch_since = None
            self.pending_count += self._batch_count
            self._batch_count = 0
            # Started after its batches left and before this actor reads its mailbox again, so every ack
            # for it finds it started.
            decided = self.tracker.start(root, self.owner, xors[0] ^ self._extra_xor)
            self._root = self._extra_xor = 0
            if decided is not None:  # no edge to ack (its tuples went nowhere): it completes now
                if not self._decided:
                    self.actor_ref.tell(_SETTLE)
                self._decided.append(decided)
        else:
            sent = self.router.flush()[0]
        self.count_sent(sent)
        self.stats.inflight = self.pending_count
        self.stats.trees = self.tracker.pending
        self.stats.queue_depth = len(self._overflow)  # emitted by the spout, held back by max_pending
        if self.finished:
            self._report_progress()

    # --- pumping ----------------------------------------------------------

    def _can_emit(self) -> bool:
        return not self.finished and not self._overflow and self.pending_count + self._batch_count < self.max_pending

    def _drain_overflow(self) -> None:
        overflow = self._overflow
        while overflow and self.pending_count + self._batch_count < self.max_pending:
            key, value, msg_id, many, self._emitted_at = overflow.popleft()
            try:
                (self._emit_batch if many else self._emit)(key, value, msg_id)
            finally:
                self._emitted_at = None

    def _schedule(self) -> None:
        if not self._pumping and self._can_emit():
            self._pumping = True
            self.actor_ref.tell(Pump())

    def _on_pump(self, msg: Pump) -> None:
        self._pumping = False
        now = self.job.clock.now
        started = self._now = now()
        deadline = started + self.batch_delay
        spout = self.spout
        start = self._emits
        end = start + self.batch_size
        produced = False
        while self._emits < end and self._can_emit() and (not produced or now() < deadline):
            before = self._emits
            try:
                spout.next_tuple()
            except Exception as exc:
                self._next_tuple_failed(exc)
                break
            self._errors_in_a_row = 0
            if spout._esault_finished:
                self._finish()
            if self._emits == before:
                break  # the source had nothing: wait for a Tick
            produced = True
        self.flush()
        if produced and self._can_emit():
            self._pumping = True
            self.actor_ref.tell(Pump())

    def _on_tick(self, msg: Tick) -> None:
        expired = self.tracker.expire()  # message_timeout
        if expired:
            self._settle(expired)
        if self._releasing is not None:
            self._check_released()
        self.load_feed.on_tick(msg.now)
        self._read_backlog()
        self._read_waiting()
        if msg.now >= self._partitions_due:
            self._partitions_due = msg.now + PARTITION_READ_INTERVAL
            self._read_partitions()
        if self.watermarks is not None and self.spout is not None and self.start_error is None:
            if not self._overflow and not self._batch:  # what it emitted has left: its watermark covers no more
                self.watermarks.capture(self.spout)
            self.watermarks.on_tick(msg.now, self.finished)
        self._schedule()

    def _on_install_routes(self, msg: Any) -> None:
        super()._on_install_routes(msg)
        if self.watermarks is not None:  # new downstream SPUs hear the watermark at the next tick
            self.watermarks.out.routes_changed()

    def _read_backlog(self) -> None:
        try:
            backlog = self.spout.backlog()
        except Exception as exc:
            self._callback_log("topology %r: spout %r backlog() raised %s: %s%s", self.job.name, self.unit_name,
                               type(exc).__name__, exc, user_frame(exc), exc=exc)
            self.stats.user_errors += 1
            return
        if backlog is not None and (not isinstance(backlog, int) or isinstance(backlog, bool) or backlog < 0):
            self._callback_log("topology %r: spout %r backlog() returned %r; return a whole number >= 0 or None",
                            self.job.name, self.unit_name, backlog)
            backlog = None
        self.stats.backlog = backlog or 0

    def _read_partitions(self) -> None:
        """Spout.partition_status(), checked: its well-formed rows on the SPU's stats (Job.status() reads them)."""
        if self.spout is None or self.start_error is not None:
            return
        try:
            report = self.spout.partition_status()
        except Exception as exc:
            self._callback_log("topology %r: spout %r partition_status() raised %s: %s%s", self.job.name,
                               self.unit_name, type(exc).__name__, exc, user_frame(exc), exc=exc)
            self.stats.user_errors += 1
            return
        if report is None:
            self.stats.partitions = None
            return
        rows, dropped = checked_rows(report)
        if dropped:
            self._callback_log("topology %r: spout %r partition_status() returned %d malformed row(s), dropped; "
                               "return a list of (topic, partition, offset, end_offset or None, lag or None, "
                               "idle) with whole numbers >= 0, a printable topic of 1 to 249 characters, "
                               "each partition once", self.job.name, self.unit_name, dropped)
        self.stats.partitions = rows

    def _read_waiting(self) -> None:
        """Spout.waiting_for(): noted with since when (one gauge series), cleared once it is None again."""
        try:
            what = self.spout.waiting_for()
        except Exception as exc:
            self._callback_log("topology %r: spout %r waiting_for() raised %s: %s%s", self.job.name, self.unit_name,
                               type(exc).__name__, exc, user_frame(exc), exc=exc)
            what = None
        if what is not None and not isinstance(what, str):
            what = repr(what)
        if what == self._waiting_for:
            return
        self._waiting_for = what
        if what is None:
            metrics.clear_waiting(metrics.SPOUT_WAITING, self.job.name, self.unit_name, self.spu_id)
        else:
            metrics.set_waiting(metrics.SPOUT_WAITING, self.job.name, self.unit_name, self.spu_id, what, time.time())

    # --- shared ranges ----------------------------------------------------

    def _request_range(self, size: int, done: list, block: int) -> None:
        """Spout.request_range(): the ack server (the driver) leases the unit's next free block."""
        pairs = [(int(a), int(b)) for a, b in done]
        replaces, self._replaces = self._replaces, ()  # named once: their blocks are queued again then
        self.acker.tell(RangeRequest(self.spu_id, self.unit_name, self.cfg.generation, int(size), pairs, int(block),
                                     replaces))

    def _on_range_grant(self, msg: RangeGrant) -> None:
        if msg.generation != self.cfg.generation or self.spout is None or self.start_error is not None or self.finished:
            return
        if msg.error:
            log.error("topology %r: spout %r: its range request was refused: %s", self.job.name, self.unit_name,
                      msg.error)
        try:
            self.spout.on_range(msg.start, msg.end, msg.error)
        except Exception as exc:
            self._next_tuple_failed(exc)
        self._schedule()

    def _next_tuple_failed(self, exc: Exception) -> None:
        """Log it (rate-limited, with its traceback); max_spout_errors in a row stop the spout and fail the job."""
        self.stats.user_errors += 1
        self._errors_in_a_row += 1
        at = user_frame(exc)
        self._error_log("topology %r: spout %r next_tuple() raised %s: %s%s", self.job.name, self.unit_name,
                        type(exc).__name__, exc, at, exc=exc)
        if self._errors_in_a_row >= self.max_errors:
            self.error = (f"spout {self.unit_name!r} next_tuple() raised {self._errors_in_a_row} times in a row "
                          f"(last: {type(exc).__name__}: {exc}{at}); it was stopped. Fix the source, or raise "
                          f"JobConfig.max_spout_errors ({self.max_errors}) for one that recovers")
            log.error("topology %r: %s", self.job.name, self.error)
            self._finish()

    # --- outcomes ---------------------------------------------------------

    def _on_ack_update(self, msg: AckUpdate) -> None:
        done = self.tracker.update_many(msg.deltas.items())
        if done:
            self._settle(done)

    def _on_ack_fail(self, msg: AckFail) -> None:
        outcome = self.tracker.fail(msg.root, msg.reason)
        if outcome is not None:
            self._settle([outcome])

    def _on_fail_pending(self, msg: FailPending) -> None:
        """A worker died or the job rolled back: every tree in flight fails now, not at message_timeout."""
        failed = self.tracker.fail_all(msg.reason)
        if failed:
            self._settle(failed)

    def _on_settle(self, msg: _Settle) -> None:
        decided, self._decided = self._decided, []
        self._settle(decided)

    def _settle(self, outcomes: Iterable[TreeOutcome]) -> None:
        """Decided trees: ack, replay (fail) or drop their msg_ids, then go on emitting."""
        now = self._now = self.job.clock.now()
        stats = self.stats
        spout = self.spout
        observe = self._latency.observe
        for outcome in outcomes:
            root, ok, reason = outcome.root, outcome.ok, outcome.reason
            entry = self.pending.pop(root, None)
            if entry is None:
                continue
            entries, emitted_at = entry
            tuples = sum(e[3] for e in entries)
            self.pending_count -= tuples
            if ok:
                stats.acked += tuples
                observe(now - emitted_at)  # from the spout's emit, one sample per batch
                failures = self.failures
                ack = spout.ack
                for entry in entries:
                    msg_id = entry[0]
                    if failures:
                        failures.pop(msg_id, None)
                    try:
                        ack(msg_id)
                    except Exception as exc:
                        self._call_failed(ack, msg_id, exc)
                continue
            stats.failed += tuples
            if self.exactly_once:  # recovery is the rollback to a checkpoint: never replay one tree
                for entry in entries:
                    self._call(spout.drop, entry[0])
                continue
            for msg_id, key, value, _ in entries:
                attempts = self.failures.get(msg_id, 0) + 1
                if attempts > self.max_retries:
                    self.failures.pop(msg_id, None)
                    stats.dead_letters += 1
                    self._dead_letter(msg_id, key, value, reason, attempts)
                    self._call(spout.drop, msg_id)
                else:
                    self.failures[msg_id] = attempts
                    self._call(spout.fail, msg_id)
        held = bool(self._overflow)
        self._drain_overflow()
        self.flush()
        if held and not self._overflow and self.watermarks is not None:  # its held-back tuples all left now
            self.watermarks.capture(self.spout)
        if self._barrier_due is not None:
            self._inject_barrier()
        if self._releasing is not None:
            self._check_released()
        self._schedule()

    # --- live rescale (at_least_once) -------------------------------------------

    def _tell_unit(self, message: Any) -> None:
        try:
            self.unit_ref.tell(message)
        except UNREACHABLE as exc:  # the driver is gone: nothing waits for the answer
            log.warning("topology %r: spout %r SPU %d could not answer its unit: %r", self.job.name,
                        self.unit_name, self.spu_id, exc)

    def _on_release_share(self, msg: ReleaseShare) -> None:
        """Stop reading what this instance does not own at msg.instances; answer once its tuples in flight
        settled, or at message_timeout (their trees have expired by then, or the answer says where anyway)."""
        if self.spout is None or self.start_error is not None:
            self._tell_unit(ShareReleased(msg.rescale_id, self.spu_id, None, self.start_error or "not open"))
            return
        try:
            self.spout.release_share(msg.instances)
        except Exception as exc:
            self._call_failed(self.spout.release_share, msg.instances, exc)
            self._tell_unit(ShareReleased(msg.rescale_id, self.spu_id, None, f"release_share() raised {exc!r}"))
            return
        self._releasing = (msg.rescale_id, self.job.clock.now() + self.job.config.message_timeout)
        self._check_released()

    def _check_released(self) -> None:
        rescale_id, deadline = self._releasing
        final = self.job.clock.now() >= deadline
        try:
            position = self.spout.released_position(final)
        except Exception as exc:
            self._releasing = None
            self._call_failed(self.spout.released_position, final, exc)
            self._tell_unit(ShareReleased(rescale_id, self.spu_id, None, f"released_position() raised {exc!r}"))
            return
        if position is None and not final:
            return
        self._releasing = None
        self._tell_unit(ShareReleased(rescale_id, self.spu_id, position, ""))

    def _on_take_share(self, msg: TakeShare) -> None:
        """Read what this instance owns at msg.instances and did not keep, from msg.position; a finished
        spout (a bounded read that ended) reads again if it took something."""
        error = ""
        if self.spout is None or self.start_error is not None:
            error = self.start_error or "not open"
        else:
            try:
                self.spout.take_share(msg.instances, msg.position)
            except Exception as exc:
                self._call_failed(self.spout.take_share, msg.instances, exc)
                error = f"take_share() raised {exc!r}"
            if self.finished and not self.error:
                self.finished = self.spout._esault_finished = False  # next_tuple() says whether it ends again
                self._report_progress()
        self._tell_unit(ShareTaken(msg.rescale_id, self.spu_id, error))
        self._schedule()

    # --- checkpoints ------------------------------------------------------------

    def _on_trigger(self, msg: TriggerCheckpoint) -> None:
        self._barrier_due = msg
        self._inject_barrier()

    def _inject_barrier(self) -> None:
        """At a round boundary with nothing held back: record the position, send the barrier.

        Tuples held back by max_spout_pending were produced before the position
        would be taken, so the barrier waits until they are sent.
        """
        if self._overflow or self._batch:
            return
        due, self._barrier_due = self._barrier_due, None
        self.flush()
        try:
            position = self.spout.snapshot_position()
        except Exception as exc:
            log.error("topology %r: spout %r snapshot_position() raised %r; checkpoint %d fails",
                      self.job.name, self.unit_name, exc, due.epoch)
            self.job.checkpoints.tell(CheckpointAck(due.epoch, self.spu_id, self.unit_name, self.cfg.instance,
                                                    None, f"snapshot_position() raised {exc!r}"))
            return
        owner = f"spout {self.unit_name!r} (instance {self.cfg.instance}) cannot save its position"
        if self.save_state(position, owner, POSITION_FIX) is None:
            position = None  # lost: send_barrier refuses this snapshot
        self._positions[due.epoch] = position
        ended = due.may_finish and self.finished  # the source finished: nothing follows this barrier
        if ended:
            self.finish_stages()  # fused bolts emit their final output before the snapshot and the barrier
        snapshot = self.new_snapshot(due.epoch, position, input_ended=ended)
        self.snapshot_stages(snapshot)
        self.send_barrier(snapshot, ended)
        if due.final:
            self._finish()
            self.flush()

    def _on_checkpoint_complete(self, msg: CheckpointComplete) -> None:
        """The spout hears of the epoch with the position it recorded; positions of epochs up to it are done."""
        position = self._positions.pop(msg.epoch, None)
        for epoch in [e for e in self._positions if e < msg.epoch]:
            del self._positions[epoch]  # checkpoints that failed: a later one completed
        if position is not None and self.spout is not None and self.start_error is None:
            try:
                self.spout.on_checkpoint_complete(msg.epoch, position)
            except Exception as exc:
                self._callback_log("topology %r: spout %r on_checkpoint_complete(%d) raised %s: %s%s", self.job.name,
                                   self.unit_name, msg.epoch, type(exc).__name__, exc, user_frame(exc), exc=exc)
                self.stats.user_errors += 1
        super()._on_checkpoint_complete(msg)

    def _spout_dead_letter(self, key: Any, value: Any, error: str, msg_id: Any) -> None:
        """Spout.dead_letter(): an input the source gave up on before it became a tuple."""
        self.stats.dead_letters += 1
        log.warning("topology %r: spout %r dead-lettered %r: %s", self.job.name, self.unit_name, msg_id, error)
        self.acker.tell(DeadLettered(self.unit_name, self.spu_id, key, value, str(error), 1, msg_id))

    def _call(self, fn: Any, msg_id: Any) -> None:
        try:
            fn(msg_id)
        except Exception as exc:
            self._call_failed(fn, msg_id, exc)

    def _call_failed(self, fn: Any, msg_id: Any, exc: Exception) -> None:
        self._callback_log("topology %r: spout %r %s(%r) raised %s: %s%s", self.job.name, self.unit_name,
                           fn.__name__, msg_id, type(exc).__name__, exc, user_frame(exc), exc=exc)
        self.stats.user_errors += 1

    def _dead_letter(self, msg_id: Any, key: Any, value: Any, reason: str | None, attempts: int) -> None:
        log.warning("topology %r: spout %r gave up on msg_id %r after %d failures: %s",
                    self.job.name, self.unit_name, msg_id, attempts, reason)
        self.acker.tell(DeadLettered(self.unit_name, self.spu_id, key, value, reason or "unknown", attempts, msg_id))
