"""BoltSpuActor: one sub-processing unit of a bolt (input router, PEs, output router).

Hot path: a DataBatch arrives, each tuple goes to its key's PE, emits land in
the output router's buffers and XOR ack deltas in a dict; after the batch,
buffers and acks leave as one message per destination.
"""

from __future__ import annotations

import threading
from typing import Any

from esault.dsl.tuple import Tuple
from esault.runtime.emitter import AnchorState, build_emit
from esault.elasticity.planner import HashSampler
from esault.keyhash import key_hash
from esault.migration.handoff import EarlyMessages, GiverHandoff, ReceiverHandoff
from esault.runtime.context import RateLimitedLog, log
from esault.runtime.messages import (
    AckFail, AckUpdate, DataBatch, EpochMarker, HandoffFinished, Prepared, PrepareGive,
    PrepareReceive, Probe, ProbeReturned, StateHandoff, Tick,
)
from esault.runtime.pe_manager import PeManager
from esault.runtime.sender import SenderActor
from esault.transport.codec import decode, encode


_SAMPLE_EVERY = 16
"""Every 16th key goes to the hash sampler that picks load-aware split points."""


class _DeferredAnchor:
    """Anchor returned by Bolt.defer(): the input is acked when this is (any thread)."""

    __slots__ = ("_acker", "_root", "_xor", "_lock", "_intent", "_done")

    def __init__(self, acker: Any, root: int) -> None:
        self._acker = acker
        self._root = root
        self._xor: int | None = None
        self._lock = threading.Lock()
        self._intent: tuple[bool, str] | None = None
        self._done = False

    def _finalize(self, xor: int) -> None:
        with self._lock:
            self._xor = xor
            intent = self._intent
        if intent is not None:
            self._send(*intent)

    def ack(self) -> None:
        self._resolve(True, "")

    def fail(self, reason: str) -> None:
        self._resolve(False, reason)

    def _resolve(self, ok: bool, reason: str) -> None:
        with self._lock:
            if self._xor is None:
                self._intent = (ok, reason)
                return
        self._send(ok, reason)

    def _send(self, ok: bool, reason: str) -> None:
        with self._lock:
            if self._done:
                return
            self._done = True
        if not self._root or self._acker is None:
            return
        if ok:
            self._acker.tell(AckUpdate({self._root: self._xor}))
        else:
            self._acker.tell(AckFail(self._root, reason or "failed by a deferred anchor"))


class BoltSpuActor(SenderActor):
    """Runs the PEs of one SPU. All user code of this SPU runs on this actor's thread."""

    def __init__(self, cfg, spec, job) -> None:
        super().__init__(cfg, spec, job)
        self.unit_ref = cfg.extra.get("unit_ref")
        self.pes = PeManager(self._make_pe, spec.per_key, job.pe_idle_timeout(spec))
        self.sampler = HashSampler(capacity=1024, every=1)
        self._sample_countdown = _SAMPLE_EVERY
        self._acks: dict[int, int] = {}
        self.anchor = AnchorState()
        self._emit = build_emit(self.router, spec.name, self.stats, self.anchor, self.check_emit)
        self._deferred: _DeferredAnchor | None = None
        self._giving: GiverHandoff | None = None
        self._receiving: ReceiverHandoff | None = None
        self._early = EarlyMessages()
        self._retiring = False
        self._last_expiry_scan = job.clock.now()
        self._error_log = RateLimitedLog()
        self.processed_since_probe = 0
        self._handlers.update({
            DataBatch: self._on_data,
            Tick: self._on_tick,
            PrepareGive: self._on_prepare_give,
            PrepareReceive: self._on_prepare_receive,
            EpochMarker: self._on_marker,
            StateHandoff: self._on_state,
            Probe: self._on_probe,
        })

    # --- lifecycle --------------------------------------------------------

    def on_start(self) -> None:
        self.job.stats.register(self.stats)
        self.job.ticker.subscribe(self.actor_ref)
        if not self.spec.per_key:
            self.pes.single()
        if self.cfg.receive is not None:
            self._on_prepare_receive(self.cfg.receive)

    def on_stop(self) -> None:
        self.job.ticker.unsubscribe(self.actor_ref)
        for key, pe in self.pes.items():
            try:
                pe.close()
            except Exception as exc:
                log.error("bolt %r close() raised %r (key %r)", self.unit_name, exc, key)
        self.flush()
        if self._retiring:
            self.job.stats.retire(self.stats)

    def _make_pe(self, key: Any) -> Any:
        pe = self.spec.instantiate()
        pe.key = key
        pe.emit = self._emit  # an instance attribute: user emits call the router directly
        pe._esault_emit = self._emit
        pe._esault_defer = self._defer
        pe.open(self.context(key))
        self.stats.pes = len(self.pes.pes) + 1 if self.spec.per_key else 1
        return pe

    # --- the hot path -----------------------------------------------------

    def _defer(self) -> _DeferredAnchor:
        if self._deferred is None:
            self._deferred = _DeferredAnchor(self.acker if self.acking else None, self.anchor.root)
        return self._deferred

    def _on_data(self, msg: DataBatch) -> None:
        tuples = msg.tuples
        receiving = self._receiving
        if receiving is not None:
            now = self.job.clock.now()
            passing = []
            for tup in tuples:
                if receiving.holds(key_hash(tup.key)):
                    receiving.buffer(tup, now)
                else:
                    passing.append(tup)
            tuples = passing
        if tuples:
            self._process(tuples)
        self.flush()

    def _process(self, tuples: list[Tuple]) -> None:
        per_key = self.spec.per_key
        pes = self.pes.pes
        make = self.pes.create
        single = None if per_key else self.pes.single()
        acks = self._acks
        track_idle = self.pes.idle_timeout is not None
        last_used = self.pes.last_used
        now = self.job.clock.now()
        record = self.sampler.record
        countdown = self._sample_countdown
        anchor = self.anchor
        for tup in tuples:
            key = tup.key
            if per_key:
                pe = pes.get(key)
                if pe is None:
                    try:
                        pe = make(key)
                    except Exception as exc:
                        self._user_error(tup, exc, "open()")
                        continue
                if track_idle:
                    last_used[key] = now
                countdown -= 1
                if not countdown:  # sample every 16th key; the planner hashes them when splitting
                    record(key)
                    countdown = _SAMPLE_EVERY
            else:
                pe = single
            root = anchor.root = tup.root
            anchor.xor = tup.edge
            try:
                pe.process(tup)
            except Exception as exc:
                self._deferred = None
                self._user_error(tup, exc, "process()")
                continue
            if root:
                if self._deferred is None:
                    acks[root] = acks.get(root, 0) ^ anchor.xor
                else:
                    self._deferred._finalize(anchor.xor)
                    self._deferred = None
        self._sample_countdown = countdown
        n = len(tuples)
        self.stats.processed += n
        self.processed_since_probe += n
        anchor.root = 0

    def flush(self) -> None:
        self.stats.emitted += self.router.flush()
        if self._acks:
            self.acker.tell(AckUpdate(self._acks))
            self._acks = {}

    def _user_error(self, tup: Tuple, exc: Exception, where: str) -> None:
        self.stats.user_errors += 1
        self.stats.failed += 1
        reason = f"bolt {self.unit_name!r} {where} raised {type(exc).__name__}: {exc} (key {tup.key!r})"
        self._error_log("topology %r: %s", self.job.name, reason)
        if tup.root and self.acking:
            self.acker.tell(AckFail(tup.root, reason))

    # --- timers -----------------------------------------------------------

    def _on_tick(self, msg: Tick) -> None:
        timeout = self.pes.idle_timeout
        if timeout is None or msg.now - self._last_expiry_scan < min(timeout / 4, 1.0):
            return
        self._last_expiry_scan = msg.now
        expired = self.pes.idle(msg.now)
        if not expired:
            return
        self.anchor.root = 0
        for key, pe in expired:
            try:
                pe.on_expire()
            except Exception as exc:
                self._error_log("topology %r: bolt %r on_expire() raised %r (key %r)",
                                self.job.name, self.unit_name, exc, key)
        self.stats.pes = len(self.pes.pes)
        self.flush()

    # --- latency probes (PAPER_NOTES §5) -------------------------------------

    def _on_probe(self, msg: Probe) -> None:
        """The probe waited in the mailbox behind the data; it leaves after the output router flushed."""
        self.flush()
        hashes = tuple(key_hash(k) for k in self.sampler.snapshot()) if msg.want_hashes and self.spec.per_key else ()
        msg.reply_to.tell(ProbeReturned(self.spu_id, msg.probe_id, msg.sent_at, self.processed_since_probe, hashes))
        self.processed_since_probe = 0

    # --- key hand-off (docs/PROTOCOLS.md) ----------------------------------

    def _on_prepare_give(self, msg: PrepareGive) -> None:
        self._giving = GiverHandoff(msg.reconfig_id, msg.lo, msg.hi, msg.upstream, msg.retire)
        self._giving_to = (msg.receiver_id, msg.receiver)
        for sender in self._early.take_markers(msg.reconfig_id):
            self._giving.marker(sender)
        self.unit_ref.tell(Prepared(msg.reconfig_id, self.spu_id))
        if self._giving.ready:
            self._hand_off()

    def _on_marker(self, msg: EpochMarker) -> None:
        giving = self._giving
        if giving is None or giving.reconfig_id != msg.reconfig_id:
            self._early.markers.setdefault(msg.reconfig_id, set()).add(msg.sender)
            return
        giving.marker(msg.sender)
        if giving.ready:
            self._hand_off()

    def _hand_off(self) -> None:
        giving = self._giving
        self._giving = None
        self.flush()
        states: list[tuple[Any, bytes]] = []
        if self.spec.per_key and giving.lo <= giving.hi:
            for key, pe in self.pes.take_range(giving.lo, giving.hi):
                states.append((key, self._snapshot(key, pe)))
            self.stats.pes = len(self.pes.pes)
        self._retiring = giving.retire
        self.sampler.clear()
        receiver_id, receiver = self._giving_to
        if receiver is not None:
            receiver.tell(StateHandoff(giving.reconfig_id, self.spu_id, states))
        self.unit_ref.tell(HandoffFinished(giving.reconfig_id, self.spu_id, "giver", len(states), 0.0))

    def _snapshot(self, key: Any, pe: Any) -> bytes:
        try:
            return encode(pe.snapshot_state())
        except Exception as exc:
            log.error(
                "topology %r: state of key %r in bolt %r cannot move (%s); the key restarts empty on "
                "its new SPU. Keep PE attributes msgpack-serialisable or override "
                "snapshot_state()/restore_state()", self.job.name, key, self.unit_name, exc,
            )
            return encode(None)

    def _on_prepare_receive(self, msg: PrepareReceive) -> None:
        self._receiving = ReceiverHandoff(msg.reconfig_id, msg.lo, msg.hi, msg.giver_id, self.job.clock.now())
        if self.unit_ref is not None:
            self.unit_ref.tell(Prepared(msg.reconfig_id, self.spu_id))
        early = self._early.handoffs.pop(msg.reconfig_id, None)
        if early is not None:
            self._on_state(early)

    def _on_state(self, msg: StateHandoff) -> None:
        receiving = self._receiving
        if receiving is None or receiving.reconfig_id != msg.reconfig_id:
            self._early.handoffs[msg.reconfig_id] = msg
            return
        for key, blob in msg.states:
            try:
                pe = self.pes.create(key)
                state = decode(blob)
                if state is not None:
                    pe.restore_state(dict(state))
            except Exception as exc:
                log.error("topology %r: bolt %r could not restore state of key %r: %r",
                          self.job.name, self.unit_name, key, exc)
        now = self.job.clock.now()
        paused = receiving.paused_seconds(now)
        self._receiving = None
        if receiving.buffered:
            self._process(receiving.buffered)
        self.stats.pes = len(self.pes.pes)
        self.flush()
        self.unit_ref.tell(
            HandoffFinished(msg.reconfig_id, self.spu_id, "receiver", len(msg.states), paused)
        )
