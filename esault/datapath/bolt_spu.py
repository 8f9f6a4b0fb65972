"""BoltSpuActor: one sub-processing unit of a bolt, an actor shell over parts with one job each.

The parts (docs/ARCHITECTURE.md, "A bolt SPU's parts"): the mailbox and handler
table (`SenderActor`), the output router and the batch's trees (roots, held
anchors, acks), the PE table with its services and parked states, checkpoint
participation (`BarrierAligner`), a giver's hand-off steps (`GiverSide`), stats
and faults, and one processing part that differs per kind (`Processing`):
`KeyedProcessing` runs a bolt's PEs, `ChainProcessing` a join chain's worker.
The runtime picks the kind from the declaration (esault.datapath.actors).
"""

from __future__ import annotations

from time import perf_counter

from typing import Any

from esault.elasticity.planner import HashSampler
from esault.keyhash import key_hash
from esault.errors import UnsaveableState
from esault.migration.handoff import EarlyMessages, GiverHandoff
from esault.datapath.anchors import BatchHold, DeferredAnchor
from esault.datapath.barriers import BarrierAligner
from esault.datapath.bolt_waits import BoltWaits
from esault.datapath.giver import GiverSide
from esault.datapath.inbox import ControlFirstInbox
from esault.datapath.parking import ParkedStates
from esault.datapath.processing import Processing
from esault.datapath.context import log
from esault.user_errors import UserErrorLog
from esault.checkpoint.saveable import encode_key, key_owner, unsaveable_hook
from esault.messages.checkpoints import Barrier, CheckpointComplete, CheckpointStart
from esault.messages.control import Probe, ProbeReturned
from esault.messages.data import DataBatch, Tick, Watermark, WatermarkInputs
from esault.messages.handoff import (
    CancelReconfiguration,
    EpochMarker,
    ForwardMarker,
    InstallRoutes,
    MarkerSeen,
    PeersLost,
    PrepareGive,
    PrepareReceive,
)
from esault.datapath.pe_class import pe_class, state_is_instance_dict
from esault.datapath.pe_manager import PeManager
from esault.datapath.pe_services import PeServices
from esault.datapath.pe_ticks import PeTicks
from esault.datapath.sender import SenderActor
from esault.datapath.watermarks import InputWatermarks, WatermarkOut
from esault.thread_names import name_os_thread
from esault.transport.codec import encode

_SAMPLE_EVERY = 16
"""Every 16th key goes to the hash sampler that picks load-aware split points."""


class BoltSpuActor(SenderActor):
    """Runs one SPU of a bolt. All user code of this SPU runs on this actor's thread.

    `processing` is the kind's part (a `Processing` class, built here once as `processing(self)`): every
    step that differs between a keyed bolt SPU and a join-chain SPU is one of its hooks, each called in one
    place below (the giver's and the alignment's through this actor's `give` and `EpochSeal` hooks).
    """

    def __init__(self, cfg, spec, job, processing: type[Processing]) -> None:
        self._inbox_class = getattr(processing, "inbox", ControlFirstInbox)  # before Pykka makes the mailbox
        self._roots: list[int] = []  # the trees of the batch being processed
        self._hold: BatchHold | None = None
        super().__init__(cfg, spec, job)
        self.unit_ref = cfg.extra.get("unit_ref")
        self.pes = PeManager(self._make_pe, spec.per_key, job.pe_idle_timeout(spec), job.clock.now(),
                             track_touched=job.exactly_once)
        self.services = PeServices(job.clock)
        self._pe_class = pe_class(spec.cls, self.emit_path, self._defer, self.services, self.stats) \
            if spec.per_key else None  # keyed SPUs only: one instance keeps its attributes (_make_pe)
        self.state_is_dict = state_is_instance_dict(spec.cls)  # a PE's __dict__ is its state (pe_class.py)
        self.read_state = None if self._pe_class is None else self._pe_class._esault_read_state  # state slots
        self.sampler = HashSampler(capacity=1024, every=_SAMPLE_EVERY)
        self._acks: dict[int, int] = {}
        self._early = EarlyMessages()
        self.giver = GiverSide(self, self._early, self.unit_ref, cfg.spu_id)
        self._retiring = False
        self._closed = False  # close_pes() ran
        self._dormant = False
        """No ticks asked for until a deadline or any other message (esault.datapath.ticker): an idle SPU sleeps."""
        self._error_log = UserErrorLog(now=job.clock.now)
        self.waits = BoltWaits(job.name, cfg.spu_id, [], self._error_log)
        """What its non-keyed instances wait for outside esault (set once they opened, in on_start)."""
        self.ticks = PeTicks(spec, self.pes, self.services, self._error_log, self.flush, job.name)
        self.processed_since_probe = 0
        self.parked = ParkedStates(self, job.data_dir / "state" / f"{spec.name}.sqlite", job.exactly_once,
                                   spec.name, f"topology {job.name!r}: bolt {spec.name!r}")
        self.barriers = BarrierAligner(self, self._run_now,
                                       f"topology {job.name!r}: bolt {spec.name!r} SPU {cfg.spu_id}",
                                       self.actor_inbox.alignment_over)
        self.watermarks: InputWatermarks | None = None
        """Every input sends watermarks: this SPU combines them per channel and forwards them (else None)."""
        if cfg.extra.get("watermarks"):  # the unit decided it from the topology (esault.dsl.watermark_flow)
            lag = spec.cls.esault_watermark_lag + sum(s.cls.esault_watermark_lag for s in spec.stages)
            self.watermarks = InputWatermarks(
                cfg.spu_id, f"topology {job.name!r}: bolt {spec.name!r} SPU {cfg.spu_id}", self.services.local,
                WatermarkOut(cfg.spu_id, self.router.broadcast, self.flush), lag,
                cfg.extra.get("watermark_inputs", ()))
        self._handlers.update({
            DataBatch: self._on_data,
            Tick: self._on_tick,
            PrepareGive: self.giver.on_prepare_give,
            PrepareReceive: self._on_prepare_receive,
            CancelReconfiguration: self._on_cancel,
            PeersLost: self._on_peers_lost,
            EpochMarker: self.giver.on_marker,
            ForwardMarker: self._on_forward_marker,
            Probe: self._on_probe,
            Barrier: self.barriers.on_barrier,
            CheckpointStart: self.barriers.on_checkpoint_start,
            Watermark: self._on_watermark,
            WatermarkInputs: self._on_watermark_inputs,
        })
        self.processing: Processing = processing(self)
        self.processing.install(self._handlers)
        self.actor_inbox.answer_markers_as(cfg.spu_id)

    def _create_actor_inbox(self) -> ControlFirstInbox:  # type: ignore[override]
        """The processing kind's mailbox (`Processing.inbox`): a join chain's lets its links pass queued
        entries too. Pykka calls this from Actor.__init__."""
        return self._inbox_class()

    # --- lifecycle --------------------------------------------------------

    def on_start(self) -> None:
        name_os_thread(f"spu-{self.spu_id} {self.unit_name}")  # top -H tells the SPUs apart
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
        own = [] if self.spec.per_key else [(self.unit_name, self.pes.single())]
        self.waits = BoltWaits(self.job.name, self.spu_id, own + [(s.spec.name, s.pe) for s in self.stages],
                               self._error_log)
        if self.cfg.receive is not None:
            self._on_prepare_receive(self.cfg.receive)

    def on_stop(self) -> None:
        self.job.ticker.unsubscribe(self.actor_ref)
        self.waits.clear()
        self._error_log.close(f"topology {self.job.name!r}: bolt {self.unit_name!r} on_expire()")
        self._state_error_log.close(f"topology {self.job.name!r}: bolt {self.unit_name!r} state")
        self.faults.close()
        if self.start_error is not None:  # nothing opened: nothing to close or publish
            self.job.stats.retire(self.stats)
            return
        if self._abandoned:  # a rollback: no close(), nothing published; a restored SPU takes over
            if not self._closed:  # (a retiring SPU may have closed already: nothing is left to abandon)
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
        self.close_pes()
        if self._retiring and self.watermarks is not None:
            self.watermarks.out.retire()  # once (a keyed giver retired its watermark at the hand-off)
        if self._retiring:
            for stage in self.stages:
                self.job.stats.retire(stage.stats)
            self.job.stats.retire(self.stats)
        self.parked.close()
        self.close_checkpointing()

    def close_pes(self) -> None:
        """The end of this SPU: without checkpoints its input ends here (finish()); then every PE's close() and
        the chained stages', their output flushed. Once: at the stop, or before it when a non-keyed SPU retires
        under exactly_once (its close() output must leave ahead of its retire marker: migration/retirement.py);
        no PE ticks after it."""
        if self._closed:
            return
        self._closed = True
        self.job.ticker.unsubscribe(self.actor_ref)
        if not self.job.exactly_once:  # no final checkpoint to finish at: the stop is the end of the input
            self.processing.finish_input()
            self.finish_stages()
        self.wake_parked("close")  # parked keys close like every other
        for key, pe in self.pes.items():
            try:
                pe.close()
            except Exception as exc:
                log.error("bolt %r close() raised %r (key %r)", self.unit_name, exc, key)
                self.stats.close_failed(exc)
        self.close_stages(retire=False)
        self.flush()  # may still count what close() emitted: retire the counts after it (on_stop)

    def wake_parked(self, why: str) -> int:
        """Make the PE of every parked key again (its state back in it), to `why` it; how many could not be."""
        failed = 0
        for key in list(self.parked.keys):
            try:
                self.pes.create(key)
            except Exception as exc:
                log.error("bolt %r could not wake parked key %r to %s it: %r", self.unit_name, key, why, exc)
                failed += 1
        return failed

    def _make_pe(self, key: Any) -> Any:
        if self.spec.per_key:  # the runtime's attributes are on the SPU's PE class (datapath/pe_class.py)
            pe = self._pe_class(**self.spec.params)
            pe.key = key  # its `_esault_bucket` is the PeManager's to set
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
        """EpochSeal: the processing part says (a bolt's PEs at once, a chain once its links are quiet)."""
        return self.processing.ready_to_seal(epoch)

    def seal_epoch(self, epoch: int, final: bool, input_ended: bool = False) -> None:
        """EpochSeal: every input before barrier `epoch` is processed: snapshot, pass the barrier on.
        At the final epoch (a stop) the input ends first; if every upstream's input had ended, the PEs and
        the chained stages finish() (in chain order) before the snapshot, and the barrier says so on."""
        processing = self.processing
        if final:
            processing.end_input()
        if input_ended:
            processing.finish_input()
            self.finish_stages()
        self.flush()
        snapshot = self.new_snapshot(epoch)
        processing.snapshot(snapshot)
        self.snapshot_stages(snapshot)
        self.send_barrier(snapshot, input_ended)
        processing.sealed(epoch, final)

    def _run_now(self, message: Any) -> None:
        """A message held back (by the alignment, or till the SPU can take it) runs as if it arrived now."""
        self._handlers[type(message)](message)

    def _on_checkpoint_complete(self, msg: CheckpointComplete) -> None:
        if not self.spec.per_key:
            self._call_complete(self.unit_name, self.pes.single(), msg.epoch)
        super()._on_checkpoint_complete(msg)
        self.parked.completed(msg.epoch)

    def _restore(self, epoch: int) -> None:
        """Start from completed checkpoint `epoch`: the processing part's state, then the chained stages'."""
        try:
            self.processing.restore(epoch)
            self.restore_stages()
        except Exception as exc:
            log.error("topology %r: bolt %r SPU %d could not restore checkpoint %d: %r",
                      self.job.name, self.unit_name, self.spu_id, epoch, exc)
            raise

    # --- the hot path -----------------------------------------------------

    def _defer(self) -> DeferredAnchor:
        hold = self._hold
        if hold is None:
            hold = self._hold = BatchHold(self.job.acks if self.acking else None, self._roots)
        return hold.anchor()

    def _on_data(self, msg: DataBatch) -> None:
        align = self.barriers.align
        if align is not None and align.holds(msg.sender):  # after its barrier: the next epoch waits
            align.hold(msg)
            return
        watermarks = self.watermarks
        if watermarks is not None and msg.sender not in watermarks.inputs:
            watermarks.saw_data(msg.sender)
        started = perf_counter()
        self.processing.process_data(msg)
        stats = self.stats
        stats.busy_us += int((perf_counter() - started) * 1e6)
        stats.backlog = self.actor_inbox.qsize()  # messages waiting behind this one

    def _send_acks(self) -> None:
        if self._acks:
            self.job.acks.update(self._acks)  # to the spout SPUs that own the trees
            self._acks = {}

    def flush(self) -> None:
        super().flush()
        self._send_acks()

    # --- timers -----------------------------------------------------------

    def on_receive(self, message: Any) -> Any:
        if self._dormant and type(message) is not Tick:  # anything may start time-driven work: tick again
            self._dormant = False
            self.job.ticker.wake(self.actor_ref)
        return super().on_receive(message)

    def _on_tick(self, msg: Tick) -> None:
        if self._closed:  # a tick queued before close_pes(): a closed PE does nothing more
            return
        self.load_feed.on_tick(msg.now)
        self.processing.on_tick(msg.now)
        self.waits.read()
        if self.watermarks is not None:  # after the windows this tick fired: their output leaves first
            self.watermarks.on_tick(msg.now)
        due = self._next_tick(msg.now)
        if due is None or due > msg.now + 2 * self.job.ticker.interval:
            self._dormant = True
            self.job.ticker.sleep_until(self.actor_ref, due)

    def _next_tick(self, now: float) -> float | None:
        """When this SPU next has time-driven work (None: not before a message comes): the earliest of its
        parts' deadlines. A part that cannot tell (a join chain, watermarks) keeps it ticking."""
        next_tick = getattr(self.processing, "next_tick", None)
        if next_tick is None or self.watermarks is not None:
            return now
        dues = [due for due in (next_tick(now), self.load_feed.next_due(), self.waits.next_due(now))
                if due is not None]
        return min(dues) if dues else None

    # --- watermarks (datapath/watermarks.py) -----------------------------------

    def _on_watermark(self, msg: Watermark) -> None:
        """In band: a channel held by a checkpoint's alignment keeps its watermark behind its held data."""
        if self.watermarks is None:  # an input that does not send them all: windows keep their own tracker
            return
        align = self.barriers.align
        if align is not None and align.holds(msg.sender):
            align.hold(msg)
            return
        self.watermarks.on_watermark(msg)

    def _on_watermark_inputs(self, msg: WatermarkInputs) -> None:
        if self.watermarks is not None:
            self.watermarks.on_inputs(msg)

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
        self.processing.routes_installed()
        if self.watermarks is not None:
            self.watermarks.out.routes_changed()

    def _on_cancel(self, msg: CancelReconfiguration) -> None:
        """Called off before the switch: each side forgets it."""
        self.giver.cancel(msg.reconfig_id)
        self.processing.cancel(msg.reconfig_id)
        self._early.forget(msg.reconfig_id)

    def _on_peers_lost(self, msg: PeersLost) -> None:
        """SPUs of this reconfiguration died with their worker (no exactly_once): neither side waits for them."""
        self.giver.peers_lost(msg)
        self.processing.peers_lost(msg)

    def give(self, giving: GiverHandoff, receivers: dict[int, Any]) -> None:
        """Gives: every upstream SPU switched: the processing part hands the moved ranges off (a retiring
        giver's counts retire with it at its stop)."""
        self._retiring = giving.retire
        self.processing.give(giving, receivers)
        if giving.retire and self.watermarks is not None and (self.spec.per_key or self.exactly_once):
            self.watermarks.out.retire()  # behind its last output: no longer an input downstream (else at its stop,
            # after what close() emits: a non-keyed SPU retiring without exactly_once closes then)

    def _on_prepare_receive(self, msg: PrepareReceive) -> None:
        self.processing.on_prepare_receive(msg)

    def _on_forward_marker(self, msg: ForwardMarker) -> None:
        """A giver upstream of this SPU handed keys off: its output for them is all here (FIFO). Every bolt
        SPU downstream of a giver answers, whatever its kind (a join chain may read a keyed bolt). Usually
        the mailbox answered as the marker arrived (inbox.py); it leaves to this SPU a marker that came
        while a checkpoint's alignment was open or its barrier queued, and one on a held channel waits
        with that channel's data. The SPUs taking the giver's keys start at its watermark here (again, no
        higher, if the marker was held)."""
        if self.watermarks is not None:
            self.watermarks.on_forward_marker(msg)
        if self.actor_inbox.already_answered(msg):
            return
        align = self.barriers.align
        if align is not None and align.holds(msg.giver):
            align.hold(msg)
            return
        for receiver in msg.receivers.values():
            try:
                receiver.tell(MarkerSeen(msg.reconfig_id, msg.giver, self.spu_id))
            except Exception as exc:  # noqa: BLE001 - its process died: the job aborts the reconfiguration
                log.warning("topology %r: receiver of a hand-off unreachable: %r", self.job.name, exc)

    # --- states: the one place they are taken, encoded and reported lost ---------------------------

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

    def _save_key(self, key: Any) -> bytes | None:
        """The encoded key; None, after state_lost(), if it cannot be (its state cannot be stored under it)."""
        try:
            return encode_key(key, self.unit_name)
        except UnsaveableState as exc:
            self.state_lost(exc)
            return None
