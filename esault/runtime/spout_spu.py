"""SpoutSpuActor: runs one spout instance, tracks its tuple trees, replays or dead-letters.

next_tuple() is called in rounds of up to batch_size tuples while fewer than
max_spout_pending trees are in flight; each round ends with a self-sent Pump,
so acks and control messages interleave with emitting. An idle spout (a
round that emitted nothing) waits for the next Tick instead of spinning.
"""

from __future__ import annotations

from collections import deque
from random import getrandbits
from typing import Any

from esault.metrics import registry as metrics
from esault.runtime.context import RateLimitedLog, log
from esault.runtime.emitter import AnchorState, build_emit
from esault.runtime.messages import AckInit, Pump, RegisterOwner, Tick, TreesDone
from esault.runtime.sender import SenderActor
from esault.transport.codec import _SIMPLE


class SpoutSpuActor(SenderActor):
    """One spout SPU; it owns the trees it roots and hears their outcomes from the ack server."""

    def __init__(self, cfg, spec, job) -> None:
        super().__init__(cfg, spec, job)
        conf = job.config
        self.max_pending = spec.max_pending or conf.max_spout_pending
        self.batch_size = conf.batch_size
        self.max_retries = conf.max_retries
        self.pending: dict[int, tuple[Any, Any, Any, float]] = {}  # root -> msg_id, key, value, emitted at
        self.failures: dict[Any, int] = {}  # msg_id -> failed attempts so far
        self._inits: list[tuple[int, int]] = []
        self._pumping = False
        self._emits = 0
        self._overflow: deque[tuple[Any, Any, Any]] = deque()
        self._now = job.clock.now()
        self._error_log = RateLimitedLog()
        self.spout: Any = None
        self.anchor = AnchorState()
        self._route = build_emit(self.router, spec.name, self.stats, self.anchor, self.check_emit)
        self._latency = metrics.TUPLE_LATENCY.labels(job.name, spec.name)
        self.finished = False
        self._handlers.update({Pump: self._on_pump, Tick: self._on_tick, TreesDone: self._on_trees_done})

    def on_start(self) -> None:
        self.job.stats.register(self.stats)
        self.acker.tell(RegisterOwner(self.spu_id, self.actor_ref))
        self.job.ticker.subscribe(self.actor_ref)
        self.spout = self.spec.instantiate()
        self.spout._esault_emit = self._emit
        try:
            self.spout.open(self.context())
        except Exception as exc:
            log.error("topology %r: spout %r open() raised %r; it emits nothing", self.job.name,
                      self.unit_name, exc)
            self._finish()
            return
        self.flush()
        self._schedule()

    def _finish(self) -> None:
        self.finished = True
        self.job.finished_spouts.add(self.spu_id)

    def on_stop(self) -> None:
        self.job.ticker.unsubscribe(self.actor_ref)
        try:
            if self.spout is not None:
                self.spout.close()
        except Exception as exc:
            log.error("spout %r close() raised %r", self.unit_name, exc)

    # --- emitting ---------------------------------------------------------

    def _emit(self, key: Any, value: Any, msg_id: Any = None) -> None:
        """Route one spout tuple; with a msg_id (acking on) it roots a tracked tree."""
        self._emits += 1
        if msg_id is None or not self.acking:
            self._route(key, value)  # anchor.root is 0: unanchored
            return
        if type(key) not in _SIMPLE or type(value) not in _SIMPLE:
            self.check_emit(key, value)  # refuse now, not when a held-back tuple leaves
        try:
            replay = msg_id in self.failures
        except TypeError:
            raise TypeError(f"spout {self.unit_name!r}: msg_id {msg_id!r} must be hashable (an int or str)") from None
        if len(self.pending) >= self.max_pending:
            self._overflow.append((key, value, msg_id))  # sent when trees complete: the bound is strict
            return
        anchor = self.anchor
        root = anchor.root = getrandbits(64) | 1
        anchor.xor = 0
        try:
            self._route(key, value)  # XORs every copy's edge id into anchor.xor
        finally:
            anchor.root = 0
        if replay:
            self.stats.replayed += 1
        self.pending[root] = (msg_id, key, value, self._now)
        self._inits.append((root, anchor.xor))

    def flush(self) -> None:
        # Register trees before their tuples can be acked downstream (the tracker copes either way).
        if self._inits:
            self.acker.tell(AckInit(self.spu_id, self._inits))
            self._inits = []
        self.stats.emitted += self.router.flush()
        self.stats.inflight = len(self.pending)
        self.stats.queue_depth = len(self._overflow)  # emitted by the spout, held back by max_pending

    # --- pumping ----------------------------------------------------------

    def _can_emit(self) -> bool:
        return not self.finished and not self._overflow and len(self.pending) < self.max_pending

    def _drain_overflow(self) -> None:
        overflow = self._overflow
        while overflow and len(self.pending) < self.max_pending:
            self._emit(*overflow.popleft())

    def _schedule(self) -> None:
        if not self._pumping and self._can_emit():
            self._pumping = True
            self.actor_ref.tell(Pump())

    def _on_pump(self, msg: Pump) -> None:
        self._pumping = False
        self._now = self.job.clock.now()
        spout = self.spout
        stats = self.stats
        produced = 0
        for _ in range(self.batch_size):
            if not self._can_emit():
                break
            before = self._emits
            try:
                spout.next_tuple()
            except Exception as exc:
                self._error_log("topology %r: spout %r next_tuple() raised %r", self.job.name,
                                self.unit_name, exc)
                stats.user_errors += 1
                break
            if spout._esault_finished:
                self._finish()
            if self._emits == before:
                break  # the source had nothing: wait for a Tick
            produced += 1
        self.flush()
        if produced and self._can_emit():
            self._pumping = True
            self.actor_ref.tell(Pump())

    def _on_tick(self, msg: Tick) -> None:
        self._schedule()

    # --- outcomes ---------------------------------------------------------

    def _on_trees_done(self, msg: TreesDone) -> None:
        self._now = self.job.clock.now()
        stats = self.stats
        spout = self.spout
        observe = self._latency.observe
        for root, ok, reason, latency in msg.outcomes:
            entry = self.pending.pop(root, None)
            if entry is None:
                continue
            msg_id = entry[0]
            if ok:
                stats.acked += 1
                self.failures.pop(msg_id, None)
                observe(latency)
                self._call(spout.ack, msg_id)
                continue
            stats.failed += 1
            attempts = self.failures.get(msg_id, 0) + 1
            if attempts > self.max_retries:
                self.failures.pop(msg_id, None)
                stats.dead_letters += 1
                self._dead_letter(msg_id, entry, reason, attempts)
                self._call(spout.drop, msg_id)
            else:
                self.failures[msg_id] = attempts
                self._call(spout.fail, msg_id)
        self._drain_overflow()
        self.flush()
        self._schedule()

    def _call(self, fn: Any, msg_id: Any) -> None:
        try:
            fn(msg_id)
        except Exception as exc:
            self._error_log("topology %r: spout %r %s(%r) raised %r", self.job.name, self.unit_name,
                            fn.__name__, msg_id, exc)
            self.stats.user_errors += 1

    def _dead_letter(self, msg_id: Any, entry: tuple, reason: str | None, attempts: int) -> None:
        log.warning("topology %r: spout %r gave up on msg_id %r after %d failures: %s",
                    self.job.name, self.unit_name, msg_id, attempts, reason)
        if self.job.dead_letters is not None:
            self.job.dead_letters.write(
                topology=self.job.name, unit=self.unit_name, msg_id=msg_id, key=entry[1],
                value=entry[2], error=reason or "unknown", attempts=attempts,
            )
