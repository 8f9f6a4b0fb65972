"""BoltSpuActor: one sub-processing unit of a bolt (input router, PEs, output router).

Hot path: a DataBatch arrives as columns; each (key, value) goes to its key's
PE through one reused Tuple view; emits land in the output router's buffers.
After the batch, buffers leave as one DataBatch per destination and the
batch's acks (one XOR value per tree, not per tuple) as one AckUpdate.
"""

from __future__ import annotations

from time import perf_counter

from random import getrandbits
from typing import Any

from esault.dsl.bolt import Bolt
from esault.dsl.tuple import Tuple
from esault.elasticity.planner import HashSampler
from esault.keyhash import key_hash
from esault.errors import SerializationError, UnsaveableState
from esault.migration import handoff
from esault.migration.handoff import EarlyMessages, GiverHandoff, HeldBatch, ReceiverHandoff, chunk_states
from esault.datapath.anchors import BatchHold, DeferredAnchor
from esault.datapath.barriers import BarrierAligner
from esault.datapath.giver import GiverSide
from esault.datapath.parking import ParkedStates
from esault.datapath.context import log
from esault.user_errors import UserErrorLog
from esault.checkpoint.saveable import encode_key, key_owner, unsaveable_hook
from esault.checkpoint.store import bucket_of, pack_entries
from esault.messages.acking import AckUpdate
from esault.messages.checkpoints import Barrier, CheckpointComplete, CheckpointStart
from esault.messages.control import Probe, ProbeReturned
from esault.messages.data import DataBatch, Tick
from esault.messages.handoff import (
    CancelReconfiguration,
    EpochMarker,
    ForwardMarker,
    HandoffFinished,
    InstallRoutes,
    MarkerSeen,
    PrepareGive,
    PrepareReceive,
    Prepared,
    StateHandoff,
)
from esault.datapath.pe_class import NO_BUCKET, bucket_of_key, pe_class, state_is_instance_dict
from esault.datapath.pe_manager import PeManager
from esault.datapath.pe_services import PeServices
from esault.datapath.sender import SenderActor
from esault.transport.codec import decode, encode

_SAMPLE_EVERY = 16
"""Every 16th key goes to the hash sampler that picks load-aware split points."""


class BoltSpuActor(SenderActor):
    """Runs the PEs of one SPU. All user code of this SPU runs on this actor's thread."""

    def __init__(self, cfg, spec, job) -> None:
        self._roots: list[int] = []  # the trees of the batch being processed
        self._hold: BatchHold | None = None
        super().__init__(cfg, spec, job)
        self.unit_ref = cfg.extra.get("unit_ref")
        self.pes = PeManager(self._make_pe, spec.per_key, job.pe_idle_timeout(spec), job.clock.now())
        self.services = PeServices(job.clock)
        self._pe_class = pe_class(spec.cls, self.emit_path, self._defer, self.services, self.stats)
        self._state_is_dict = state_is_instance_dict(spec.cls)
        self._tick_interval = float(getattr(spec.cls, "esault_tick_interval", 0.05))
        self._last_pe_tick = float("-inf")
        self.sampler = HashSampler(capacity=1024, every=_SAMPLE_EVERY)
        self._acks: dict[int, int] = {}
        self._view = Tuple()
        self._receiving: ReceiverHandoff | None = None
        self._early = EarlyMessages()
        self.giver = GiverSide(self, self._early, self.unit_ref, cfg.spu_id)
        self._retiring = False
        # on_batch_end() is called only for bolts that are not key grouped and define it (a combiner)
        self._calls_batch_end = not spec.per_key and getattr(spec.cls, "on_batch_end", None) is not Bolt.on_batch_end
        self._last_expiry_scan = job.clock.now()
        self._error_log = UserErrorLog(now=job.clock.now)
        self.processed_since_probe = 0
        self.parked = ParkedStates(self, job.data_dir / "state" / f"{spec.name}.sqlite", job.exactly_once,
                                   spec.name, f"topology {job.name!r}: bolt {spec.name!r}")
        self.barriers = BarrierAligner(self, self._run_now,
                                       f"topology {job.name!r}: bolt {spec.name!r} SPU {cfg.spu_id}")
        self._handlers.update({
            DataBatch: self._on_data,
            Tick: self._on_tick,
            PrepareGive: self.giver.on_prepare_give,
            PrepareReceive: self._on_prepare_receive,
            CancelReconfiguration: self._on_cancel,
            EpochMarker: self.giver.on_marker,
            StateHandoff: self._on_state,
            ForwardMarker: self._on_forward_marker,
            MarkerSeen: self._on_marker_seen,
            Probe: self._on_probe,
            Barrier: self.barriers.on_barrier,
            CheckpointStart: self.barriers.on_checkpoint_start,
        })

    # --- lifecycle --------------------------------------------------------

    def on_start(self) -> None:
        self.job.stats.register(self.stats)
        self.job.ticker.subscribe(self.actor_ref)
        step = "open() of a bolt chained into it"
        try:
            self.open_stages()
            if not self.spec.per_key:
                step = "constructor or open()"
                self.pes.single()  # one instance: its constructor and open() run now
            elif hasattr(self.spec.cls, "esault_check_at_start"):
                step = "constructor"  # per key, later: what can fail for every key fails the unit now
                self.spec.cls.esault_check_at_start(self.spec.params)
            if self.cfg.restore_epoch is not None:
                step = f"restore from checkpoint {self.cfg.restore_epoch}"
                self._restore(self.cfg.restore_epoch)
        except Exception as exc:
            self.failed_to_start(step, exc)
            return
        if self.cfg.receive is not None:
            self._on_prepare_receive(self.cfg.receive)

    def on_stop(self) -> None:
        self.job.ticker.unsubscribe(self.actor_ref)
        self._error_log.close(f"topology {self.job.name!r}: bolt {self.unit_name!r} on_expire()")
        self._state_error_log.close(f"topology {self.job.name!r}: bolt {self.unit_name!r} state")
        self.faults.close()
        if self.start_error is not None:  # nothing opened: nothing to close or publish
            self.job.stats.retire(self.stats)
            return
        if self._abandoned:  # a rollback: no close(), nothing published; a restored SPU takes over
            for _, pe in self.pes.items():
                if not self.spec.per_key:
                    try:
                        pe.abandon()
                    except Exception as exc:
                        log.error("bolt %r abandon() raised %r", self.unit_name, exc)
            self.abandon_stages()
            self.close_checkpointing()
            self.job.stats.retire(self.stats)
            self.parked.close()
            return
        for key in list(self.parked.keys):  # parked keys close like every other: wake them first
            try:
                self.pes.create(key)
            except Exception as exc:
                log.error("bolt %r could not wake parked key %r to close it: %r", self.unit_name, key, exc)
        for key, pe in self.pes.items():
            try:
                pe.close()
            except Exception as exc:
                log.error("bolt %r close() raised %r (key %r)", self.unit_name, exc, key)
        self.close_stages(retire=False)
        self.flush()  # may still count what close() emitted: retire the counts after it
        if self._retiring:
            for stage in self.stages:
                self.job.stats.retire(stage.stats)
            self.job.stats.retire(self.stats)
        self.parked.close()
        self.close_checkpointing()

    def _make_pe(self, key: Any) -> Any:
        if self.spec.per_key:  # the runtime's attributes are on the SPU's PE class (datapath/pe_class.py)
            pe = self._pe_class(**self.spec.params)
            pe.key = key
            pe._esault_bucket = bucket_of_key(key)
        else:
            pe = self.spec.instantiate()
            pe.key = key
            pe.emit = self.emit_path  # an instance attribute: user emits call the router directly
            pe._esault_emit = self.emit_path
            pe._esault_defer = self._defer
            pe._esault_spu = self.services
            pe._esault_stats = self.stats  # for counts a bolt keeps itself (a join's shed tuples)
        pe.open(self.context(key))
        parked = self.parked.keys
        if parked and key in parked:
            self.parked.unpark(key, pe)
        self.stats.pes = len(self.pes) + 1 if self.spec.per_key else 1
        return pe

    # --- checkpoints: align, snapshot, restore ----------------------------------

    def ready_to_seal(self, epoch: int) -> bool:
        """EpochSeal: every barrier is in, so every input before them is processed: seal now."""
        return True

    def seal_epoch(self, epoch: int, final: bool) -> None:
        """EpochSeal: at the final epoch (a stop) the input ends first; then the snapshot and the barrier."""
        if final:
            self._end_input()
        self._snapshot_epoch(epoch)

    def _run_now(self, message: Any) -> None:
        """A message held back (by the alignment, or till the SPU can take it) runs as if it arrived now."""
        self._handlers[type(message)](message)

    def _end_input(self) -> None:
        """The final checkpoint aligned: no input follows. PEs that flush at the end of the input
        (esault_end_of_input(), as a WindowBolt with flush_on_close fires its pending windows) emit now,
        before the snapshot and the barrier: their output is inside the last checkpoint, so exactly-once
        sinks commit it, and a restart from that checkpoint does not emit it again."""
        if getattr(self.spec.cls, "esault_end_of_input", None) is None:
            return
        ticking = self.services.ticking  # what a PE can still emit waits for time: its key asked for ticks
        for key in list(ticking):
            pe = self._ticking_pe(key)
            if pe is None:
                ticking.discard(key)
                continue
            try:
                pe.esault_end_of_input()
            except Exception as exc:
                self._error_log("topology %r: bolt %r end of input raised %r (key %r)",
                                self.job.name, self.unit_name, exc, key, exc=exc)

    def _snapshot_epoch(self, epoch: int) -> None:
        """Every input before barrier `epoch` is processed: encode the dirty state, pass the barrier on."""
        self.flush()
        snapshot = self.new_snapshot(epoch)
        if self.spec.per_key:
            buckets: dict[int, list] = {}
            plain = self._state_is_dict  # the PE's __dict__ is its state: packed as it is, right below
            for key, pe in self.pes.take_dirty().items():  # expired ones are parked (below), moved ones gone
                state = pe.__dict__ if plain else self._state_of(key, pe)
                bucket = pe._esault_bucket
                if bucket == NO_BUCKET:
                    bucket = bucket_of(key_hash(key))
                entries = buckets.get(bucket)
                if entries is None:
                    entries = buckets[bucket] = []
                entries += (key, state)
            self.parked.snapshot_into(buckets, epoch)
            snapshot.rows[self.unit_name] = [(b, self._pack(entries)) for b, entries in buckets.items()]
        else:
            self.snapshot_instance(self.unit_name, self.pes.single(), snapshot)
        self.snapshot_stages(snapshot)
        self.send_barrier(snapshot)

    def _on_checkpoint_complete(self, msg: CheckpointComplete) -> None:
        if not self.spec.per_key:
            self._call_complete(self.unit_name, self.pes.single(), msg.epoch)
        super()._on_checkpoint_complete(msg)
        self.parked.completed(msg.epoch)

    def _restore(self, epoch: int) -> None:
        """Start from completed checkpoint `epoch`: this SPU's key range (or instance) and its chained stages."""
        try:
            if self.spec.per_key:
                states: dict[Any, Any] = {}
                for lo, hi in self.cfg.intervals or ():
                    states.update(self.checkpoint_store().read_range(self.unit_name, epoch, lo, hi))
                for key, state in states.items():
                    pe = self.pes.create(key)
                    if state is not None:
                        pe.restore_state(dict(state))
                self.pes.take_dirty()  # restored PEs equal the checkpoint: not dirty
                self.stats.pes = len(self.pes)
            else:
                self.restore_instance(self.unit_name, self.pes.single())
            self.restore_stages()
        except Exception as exc:
            log.error("topology %r: bolt %r SPU %d could not restore checkpoint %d: %r",
                      self.job.name, self.unit_name, self.spu_id, epoch, exc)
            raise

    # --- the hot path -----------------------------------------------------

    def _defer(self) -> DeferredAnchor:
        hold = self._hold
        if hold is None:
            hold = self._hold = BatchHold(self.acker if self.acking else None, self._roots)
        return hold.anchor()

    def _on_data(self, msg: DataBatch) -> None:
        align = self.barriers.align
        if align is not None and align.holds(msg.sender):  # after its barrier: the next epoch waits
            align.hold(msg)
            return
        started = perf_counter()
        self._process_data(msg)
        stats = self.stats
        stats.busy_us += int((perf_counter() - started) * 1e6)
        stats.backlog = self.actor_inbox.qsize()  # messages waiting behind this one

    def _process_data(self, msg: DataBatch) -> None:
        keys, values, edges = msg.keys, msg.values, msg.edges
        receiving = self._receiving
        if receiving is not None:
            keys, values, held_k, held_v = receiving.divide(keys, values, key_hash)
            if held_k:  # the held part stays in the batch's trees under edge ids of its own
                own = [self._new_edge() for _ in msg.roots]
                receiving.buffer(HeldBatch(msg.source, held_k, held_v, msg.roots, own), self.job.clock.now())
                edges = [e ^ o for e, o in zip(edges, own)]
        self._run_batch(msg.source, keys, values, msg.roots, edges)
        self._send_acks()

    @staticmethod
    def _new_edge() -> int:
        return getrandbits(64) | 1

    def _run_batch(self, source: str, keys: list[Any], values: list[Any], roots: list[int], edges: list[int]) -> None:
        """Process one batch, flush its emits into the same trees, and record (or hold) its acks."""
        self._roots = roots
        if keys:
            if self.spec.per_key:
                self._process_keyed(source, keys, values)
            else:
                self._process_single(source, keys, values)
                if self._calls_batch_end:
                    self._end_batch()
            n = len(keys)
            self.stats.processed += n
            self.processed_since_probe += n
        sent, xors = self.router.flush(roots)
        self.count_sent(sent)
        hold, self._hold = self._hold, None
        self._roots = []
        if not roots:
            if hold is not None:
                hold.seal({})
            return
        if hold is not None:
            hold.seal({root: edge ^ x for root, edge, x in zip(roots, edges, xors)})
            return
        acks = self._acks
        for root, edge, x in zip(roots, edges, xors):
            acks[root] = acks.get(root, 0) ^ edge ^ x

    def _process_keyed(self, source: str, keys: list[Any], values: list[Any]) -> None:
        view = self._view
        view.source = source
        pes = self.pes.active
        for key, value in zip(keys, values):
            try:
                pe = pes[key]
            except KeyError:
                pe = self._open_pe(key, value, source)
                if pe is None:
                    continue
            except TypeError:  # an unhashable key (a list, say): it has no PE
                self.faults.give_up(key, value, TypeError(f"unhashable key type {type(key).__name__}"), "routing", 1)
                continue
            view.key = key
            view.value = value
            try:
                pe.process(view)
            except Exception as exc:
                self.faults.retry(pe, view, key, value, source, exc)
        self.pes.used(self.job.clock.now())
        self.sampler.record_many(keys)

    def _process_single(self, source: str, keys: list[Any], values: list[Any]) -> None:
        view = self._view
        view.source = source
        pe = self.pes.single()
        process = pe.process
        for key, value in zip(keys, values):
            view.key = key
            view.value = value
            try:
                process(view)
            except Exception as exc:
                self.faults.retry(pe, view, key, value, source, exc)

    def _end_batch(self) -> None:
        try:
            self.pes.single().on_batch_end()
        except Exception as exc:
            self.stats.user_errors += 1
            self._error_log("topology %r: bolt %r on_batch_end() raised %r", self.job.name, self.unit_name, exc,
                            exc=exc)

    def _open_pe(self, key: Any, value: Any, source: str) -> Any:
        """The key's first tuple: create its PE; on a failing open() the tuple is given up."""
        try:
            return self.pes.wake_or_create(key)
        except Exception as exc:
            self.stats.user_errors += 1
            self.faults.give_up(key, value, exc, "open()", 1)
            return None

    def _send_acks(self) -> None:
        if self._acks:
            self.acker.tell(AckUpdate(self._acks))
            self._acks = {}

    def flush(self) -> None:
        super().flush()
        self._send_acks()

    # --- timers -----------------------------------------------------------

    def _on_tick(self, msg: Tick) -> None:
        self.load_feed.on_tick(msg.now)
        if self.services.ticking and self._receiving is None:
            self._tick_pes(msg.now)
        timeout = self.pes.idle_timeout
        if timeout is None or msg.now - self._last_expiry_scan < min(timeout / 4, 1.0):
            return
        self._last_expiry_scan = msg.now
        self._keep_ticking_pes(msg.now)
        expired = self.pes.idle(msg.now)
        if not expired:
            return
        for key, pe in expired:
            try:
                pe.on_expire()
            except Exception as exc:
                self._error_log("topology %r: bolt %r on_expire() raised %r (key %r)",
                                self.job.name, self.unit_name, exc, key, exc=exc)
        self.parked.park(expired)
        self.stats.pes = len(self.pes)
        self.flush()

    def _tick_pes(self, now: float) -> None:
        """on_tick() on the PEs that asked for ticks, every esault_tick_interval.

        O(ticking PEs) per tick, or O(due PEs) when the bolt class tells which
        are due (a classmethod esault_due_keys(spu_local, now), as WindowBolt
        does). Paused while keys arrive in a hand-off: their held tuples must
        run before time-driven work (a window firing) judges them. A ticked PE
        counts as used: what the tick changed enters the next checkpoint."""
        if now - self._last_pe_tick < self._tick_interval:
            return
        self._last_pe_tick = now
        ticking = self.services.ticking
        due = getattr(self.spec.cls, "esault_due_keys", None)
        keys = list(ticking) if due is None else [k for k in due(self.services.local, now) if k in ticking]
        if not keys:
            return
        for key in keys:
            pe = self._ticking_pe(key)
            if pe is None:  # moved away: it asks again on its new SPU
                ticking.discard(key)
                continue
            try:
                pe.on_tick(now)
            except Exception as exc:
                self._error_log("topology %r: bolt %r on_tick() raised %r (key %r)",
                                self.job.name, self.unit_name, exc, key, exc=exc)
        if self.spec.per_key:
            self.pes.used(now)
        self.flush()

    def _ticking_pe(self, key: Any) -> Any:
        """The PE of a key that asked for ticks, made active (a use); None if it left this SPU."""
        if not self.spec.per_key:
            return self.pes.single()
        pe = self.pes.active.get(key)
        if pe is None and self.pes.get(key) is not None:
            pe = self.pes.wake_or_create(key)
        return pe

    def _keep_ticking_pes(self, now: float) -> None:
        """Before an expiry scan: PEs waiting for ticks are in use (a window pending), so they do not expire.

        O(ticking PEs) once per scan (at most every second), not per tick."""
        ticking = self.services.ticking
        if not ticking or not self.spec.per_key:
            return
        for key in list(ticking):
            if self._ticking_pe(key) is None:
                ticking.discard(key)
        self.pes.used(now)

    # --- latency probes (PAPER_NOTES §5) -------------------------------------

    def _on_probe(self, msg: Probe) -> None:
        """The probe waited in the mailbox behind the data; it leaves after the output router flushed."""
        self.flush()
        hashes = tuple(key_hash(k) for k in self.sampler.snapshot()) if msg.want_hashes and self.spec.per_key else ()
        msg.reply_to.tell(ProbeReturned(self.spu_id, msg.probe_id, msg.sent_at, self.processed_since_probe, hashes))
        self.processed_since_probe = 0

    # --- key hand-off (docs/PROTOCOLS.md) ----------------------------------

    def _on_install_routes(self, msg: InstallRoutes) -> None:
        super()._on_install_routes(msg)
        if self._receiving is not None:  # a downstream unit's SPUs changed while this receives keys
            self._receiving.downstream_changed(self.router.downstream_spus())
            self._release_ready()

    def _on_cancel(self, msg: CancelReconfiguration) -> None:
        """Called off before the switch: no marker came and no moved key was held, so forgetting is all."""
        self.giver.cancel(msg.reconfig_id)
        if self._receiving is not None and self._receiving.reconfig_id == msg.reconfig_id:
            self._receiving = None
        self._early.forget(msg.reconfig_id)

    def give(self, giving: GiverHandoff, mailboxes: dict[int, Any]) -> None:
        """Gives: every upstream SPU switched: the moved keys' state is final; each receiver gets its ranges'."""
        self.flush()
        receivers = {r: mailboxes[r] for r in giving.by_receiver() if r in mailboxes}
        # In band behind this SPU's last output of the moved keys: each downstream SPU tells the receivers.
        self.router.broadcast(ForwardMarker(giving.reconfig_id, self.spu_id, receivers))
        moved = 0
        for receiver_id, ranges in giving.by_receiver().items():
            states: list[tuple[Any, bytes]] = []
            if self.spec.per_key:
                for lo, hi in ranges:
                    for key, pe in self.pes.take_range(lo, hi):
                        states.append((key, self._snapshot(key, pe)))
                    states.extend(self.parked.take(lo, hi))
            moved += len(states)
            receiver = mailboxes.get(receiver_id)
            if receiver is not None:
                self._send_states(receiver, giving.reconfig_id, states)
        self.stats.pes = len(self.pes)
        self._retiring = giving.retire
        self.sampler.clear()
        self.unit_ref.tell(HandoffFinished(giving.reconfig_id, self.spu_id, "giver", moved, 0.0))

    def _send_states(self, receiver: Any, reconfig_id: int, states: list[tuple[Any, bytes]]) -> None:
        """The moved keys' states in chunks under the frame cap; the last chunk says the hand-off is done."""
        chunks = chunk_states(states, handoff.HANDOFF_CHUNK_BYTES)
        for i, chunk in enumerate(chunks):
            message = StateHandoff(reconfig_id, self.spu_id, chunk, i == len(chunks) - 1)
            try:
                receiver.tell(message)
            except SerializationError as exc:  # one key's state alone is over the frame cap
                self.state_lost(UnsaveableState(
                    f"bolt {self.unit_name!r} cannot move the state of key(s) {[k for k, _ in chunk][:5]} ({exc}); "
                    "keep a key's state under the transport's max_frame_bytes"))
                receiver.tell(StateHandoff(reconfig_id, self.spu_id, [(k, encode(None)) for k, _ in chunk],
                                           message.last))

    def _snapshot(self, key: Any, pe: Any) -> bytes:
        """A PE's state, encoded to move with its key (encode(None) if it cannot be: see state_lost())."""
        return self._encode_state(key, self._state_of(key, pe))

    def _state_of(self, key: Any, pe: Any) -> Any:
        """pe.snapshot_state(); None, after state_lost(), if it raised."""
        try:
            return pe.snapshot_state()
        except Exception as exc:
            self.state_lost(unsaveable_hook(key_owner(self.unit_name, key), "snapshot_state()", exc))
            return None

    def _encode_state(self, key: Any, state: Any) -> bytes:
        blob = self.save_state(state, key_owner(self.unit_name, key))
        return encode(None) if blob is None else blob

    def _pack(self, entries: list) -> bytes:
        """One checkpoint bucket row; a key whose state cannot be encoded is saved as None, after state_lost()
        (under exactly_once this snapshot is then refused: its checkpoint fails)."""
        try:
            return pack_entries(entries)
        except Exception:
            kept: list = []
            for key, state in zip(entries[::2], entries[1::2]):
                if self._save_key(key) is None:
                    continue
                if self.save_state(state, key_owner(self.unit_name, key)) is None:
                    state = None
                kept += (key, state)
            return pack_entries(kept)

    def _save_key(self, key: Any) -> bytes | None:
        """The encoded key; None, after state_lost(), if it cannot be (its state cannot be stored under it)."""
        try:
            return encode_key(key, self.unit_name)
        except UnsaveableState as exc:
            self.state_lost(exc)
            return None

    def _on_prepare_receive(self, msg: PrepareReceive) -> None:
        self._receiving = ReceiverHandoff(msg.reconfig_id, msg.ranges, self.router.downstream_spus())
        if self.unit_ref is not None:
            self.unit_ref.tell(Prepared(msg.reconfig_id, self.spu_id, "receiver"))
        for giver, sender in self._early.seen.pop(msg.reconfig_id, ()):
            self._receiving.marker_seen(giver, sender)
        early = self._early.handoffs.pop(msg.reconfig_id, None)
        for chunk in early or ():
            self._on_state(chunk)
        self._release_ready()

    def _on_state(self, msg: StateHandoff) -> None:
        receiving = self._receiving
        if receiving is None or receiving.reconfig_id != msg.reconfig_id:
            self._early.handoffs.setdefault(msg.reconfig_id, []).append(msg)
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
        receiving.moved += len(msg.states)
        self.pes.used(self.job.clock.now())
        if msg.last:  # that giver's keys stay held until its last chunk and the downstream answers
            receiving.state_done(msg.giver_id)
            self._release_ready()

    def _on_forward_marker(self, msg: ForwardMarker) -> None:
        """A giver upstream of this SPU handed keys off: its output for them is all here (FIFO)."""
        for receiver in msg.receivers.values():
            try:
                receiver.tell(MarkerSeen(msg.reconfig_id, msg.giver, self.spu_id))
            except Exception as exc:  # noqa: BLE001 - its process died: the job aborts the reconfiguration
                log.warning("topology %r: receiver of a hand-off unreachable: %r", self.job.name, exc)

    def _on_marker_seen(self, msg: MarkerSeen) -> None:
        receiving = self._receiving
        if receiving is None or receiving.reconfig_id != msg.reconfig_id:
            self._early.seen.setdefault(msg.reconfig_id, []).append((msg.giver, msg.sender))
            return
        receiving.marker_seen(msg.giver, msg.sender)
        self._release_ready()

    def _release_ready(self) -> None:
        """Run what is held for each giver whose state is in and whose downstream all saw its marker."""
        receiving = self._receiving
        if receiving is None:
            return
        now = self.job.clock.now()
        for giver in receiving.ready_givers():
            for held in receiving.release(giver, now, key_hash, self._new_edge):
                self._run_batch(held.source, held.keys, held.values, held.roots, held.edges)
        self.stats.pes = len(self.pes)
        self.flush()
        if not receiving.done:
            return
        self._receiving = None
        self.unit_ref.tell(
            HandoffFinished(receiving.reconfig_id, self.spu_id, "receiver", receiving.moved, receiving.paused)
        )
