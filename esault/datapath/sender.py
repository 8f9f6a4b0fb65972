"""Shared by spout and bolt SPUs: the emit path (chained stages, output router), route switches."""

from __future__ import annotations

import logging
from concurrent.futures import Future
from typing import Any

import pykka

from esault.dsl.context import TopologyContext
from esault.dsl.topology import UnitSpec
from esault.errors import SerializationError, StoreDamaged, UnsaveableState
from esault.metrics import registry as metrics
from esault.metrics.stats import SpuStats
from esault.routing.output_router import OutputRouter
from esault.datapath.chain import Stage, sync_emitted
from esault.datapath.inbox import ControlFirstInbox
from esault.datapath.context import JobContext
from esault.datapath.emitter import build_emit
from esault.datapath.load_feed import LoadFeed
from esault.datapath.faults import UserFaults
from esault.user_errors import UserErrorLog, user_frame
from esault.checkpoint.saveable import PE_FIX, encode_state, unsaveable_hook
from esault.checkpoint.snapshots import Snapshot, SnapshotWriter
from esault.checkpoint.backends import CheckpointStorage, open_checkpoint_store
from esault.checkpoint.store import instance_slot
from esault.messages.checkpoints import Abandon, Barrier, CheckpointAck, CheckpointComplete
from esault.messages.control import SpuConfig
from esault.messages.data import Drain
from esault.messages.handoff import EpochMarker, InstallRoutes
from esault.transport.address import Address
from esault.transport.codec import check_serialisable
from esault.transport.frames import EncodedFrame

log = logging.getLogger("esault.spu")


class StartCheck:
    """launcher -> SPU (ask), in the SPU's own process only: the answer is why on_start failed, or None.

    An ask is answered after on_start ran, so a launcher that asks it knows the
    SPU's user code opened before it reports the SPU started.
    """


class SenderActor(pykka.ThreadingActor):
    """Base of SPU actors: one output router, stats, and the route-switch step of a reconfiguration."""

    @staticmethod
    def _create_actor_inbox() -> ControlFirstInbox:
        """Reconfiguration commands go ahead of queued data (esault.datapath.inbox)."""
        return ControlFirstInbox()

    def __init__(self, cfg: SpuConfig, spec: UnitSpec, job: JobContext) -> None:
        super().__init__()
        self.cfg = cfg
        self.spec = spec
        self.job = job
        self.spu_id = cfg.spu_id
        self.unit_name = spec.name
        self.stats = SpuStats(job.name, spec.name, cfg.spu_id)
        metrics.init_unknown_message_series(type(self).__name__)
        self.acking = job.config.acking
        self.acker = job.acker
        self.faults = UserFaults(job.name, spec.name, cfg.spu_id, self.stats, job.acker, job.config.max_retries)
        out = spec.stages[-1].name if spec.stages else spec.name
        self.router = OutputRouter(cfg.spu_id, out, cfg.downstream)
        self.load_feed = LoadFeed(job.name, self.router, job.stats, job.clock.now())
        """TAG/PKG routes: downstream loads in, heavy-key windows closed (on ticks)."""
        self.stages: list[Stage] = []
        self.emit_path = self._build_emit_path()
        """emit(key, value) for this SPU's user code: into the first chained stage, or the router."""
        self.exactly_once = job.exactly_once
        self._writer: SnapshotWriter | None = None
        self._store: CheckpointStorage | None = None
        self._abandoned = False
        self.lost_state: str | None = None
        """exactly_once: why a state this SPU had to keep could not be saved (None while all could). Every
        later snapshot of this SPU is refused with it, so no checkpoint completes without that state."""
        self._state_error_log = UserErrorLog(now=job.clock.now)
        self.start_error: str | None = None
        """Why this SPU could not start (its user code's constructor, open() or restore raised); None if it runs."""
        self._handlers: dict[type, Any] = {
            InstallRoutes: self._on_install_routes,
            Drain: self._on_drain,
            CheckpointComplete: self._on_checkpoint_complete,
            Abandon: self._on_abandon,
        }

    def reachable_self(self) -> Any:
        """How other processes reach this SPU in a message it sends: its address in a worker process, its
        actor ref when the whole job runs in one process."""
        return Address(self.job.process, f"spu-{self.spu_id}") if self.job.process else self.actor_ref

    def _build_emit_path(self) -> Any:
        emit = build_emit(self.router, self.check_emit)
        chain = self.spec.stages
        defer = self._defer  # each SPU kind holds deferred acks its own way
        for i in reversed(range(len(chain))):
            stage_spec = chain[i]
            stats = SpuStats(self.job.name, stage_spec.name, self.spu_id)
            faults = UserFaults(self.job.name, stage_spec.name, self.spu_id, stats, self.acker,
                                self.job.config.max_retries)
            source = chain[i - 1].name if i else self.spec.name
            stage = Stage(stage_spec, source, emit, stats, faults, defer)
            self.stages.insert(0, stage)
            emit = stage.feed
        return emit

    def _defer(self) -> Any:
        raise NotImplementedError

    def open_stages(self) -> None:
        """Register the chained stages' stats and open their bolts (on this actor's thread)."""
        for stage in self.stages:
            self.job.stats.register(stage.stats)
            stage.pe.open(self.context_of(stage.spec.name))

    def finish_stages(self) -> None:
        """The input ended: each chained stage's finish(), in chain order (what one emits feeds the next
        first)."""
        for stage in self.stages:
            try:
                stage.pe.finish()
            except Exception as exc:
                log.error("bolt %r finish() raised %r", stage.spec.name, exc)
                stage.stats.close_errors += 1

    def close_stages(self, retire: bool) -> None:
        for stage in self.stages:
            try:
                stage.pe.close()
            except Exception as exc:
                log.error("bolt %r close() raised %r", stage.spec.name, exc)
                stage.stats.close_failed(exc)
            if retire:
                self.job.stats.retire(stage.stats)

    def count_sent(self, sent: int) -> None:
        """Tuples the router sent were emitted by the last unit of this SPU's chain."""
        if self.stages:
            sync_emitted(self.stats, self.stages, sent)
        else:
            self.stats.emitted += sent

    def context_of(self, unit: str, key: Any = None) -> TopologyContext:
        spec = self.spec if unit == self.spec.name else next(s.spec for s in self.stages if s.spec.name == unit)
        return TopologyContext(
            topology=self.job.name, unit=unit, spu_id=self.spu_id,
            data_dir=self.job.data_dir, params=dict(spec.params), key=key,
            per_key=spec.per_key, instance=self.cfg.instance, instances=self.cfg.instances,
            guarantee=self.job.config.guarantee, restored_epoch=self.cfg.restore_epoch,
            durable=self.job.checkpoint_location,
        )

    def context(self, key: Any = None) -> TopologyContext:
        return self.context_of(self.unit_name, key)

    def failed_to_start(self, what: str, exc: BaseException) -> None:
        """User code raised in on_start: keep the cause for StartCheck; the launcher fails the unit with it."""
        kind = "spout" if self.spec.is_spout else "bolt"
        damaged = isinstance(exc, StoreDamaged)  # its message says it all: no code of the user's is at fault
        self.start_error = (f"{kind} {self.unit_name!r} {what} raised {type(exc).__name__}: {exc}"
                            f"{'' if damaged else user_frame(exc)}")
        log.error("topology %r: %s", self.job.name, self.start_error,
                  exc_info=None if damaged else (type(exc), exc, exc.__traceback__))

    def on_receive(self, message: Any) -> Any:
        if type(message) is StartCheck:
            return self.start_error
        if self._abandoned:
            return None  # a rollback discarded this SPU: its stop is on the way
        if type(message) is EncodedFrame:  # data decoded here, on this thread, not on the I/O thread
            message = message.open()
            if message is None:
                return None
        handler = self._handlers.get(type(message))
        if handler is None:
            metrics.count_unknown_message(type(self).__name__)
            log.warning("%s %s/%d ignored unknown message %r", type(self).__name__, self.unit_name,
                        self.spu_id, type(message).__name__)
            return None
        try:
            return handler(message)
        except Exception:  # a framework bug must not kill the SPU and its data
            log.exception("%s %s/%d failed handling %s", type(self).__name__, self.unit_name,
                          self.spu_id, type(message).__name__)
            return None

    def check_emit(self, key: Any, value: Any) -> None:
        """Refuse, at emit time, what could not cross a process boundary."""
        for what, v in (("key", key), ("value", value)):
            try:
                check_serialisable(v)
            except TypeError as exc:
                raise SerializationError(
                    f"{self.router.source!r} emitted a {what} that cannot be serialised ({exc}); "
                    f"key={key!r}. Emit str, bytes, int, float, bool, None, or lists/tuples/dicts of those"
                ) from None

    def flush(self) -> None:
        """Send what was emitted outside any tracked batch (open(), ticks, control messages)."""
        self.count_sent(self.router.flush()[0])

    def _on_install_routes(self, msg: InstallRoutes) -> None:
        # Everything routed by the old table leaves before the marker (channels are FIFO).
        self.flush()
        self.router.install(msg.route)
        for giver, mailbox in msg.notify.items():
            try:
                mailbox.tell(EpochMarker(msg.reconfig_id, self.spu_id))
            except Exception as exc:  # noqa: BLE001 - its process died; the other givers still get theirs
                log.warning("topology %r: giver SPU %d of %r unreachable for its marker: %r", self.job.name, giver,
                            msg.route.unit, exc)

    def _on_drain(self, msg: Drain) -> bool:
        self.flush()
        return True

    # --- checkpoints (docs/CHECKPOINTS.md) ------------------------------------------

    def checkpoint_store(self) -> CheckpointStorage:
        """This actor's connection to the job's checkpoint store (restores and parked keys)."""
        if self._store is None:
            self._store = open_checkpoint_store(self.job)
        return self._store

    def snapshot_writer(self) -> SnapshotWriter:
        if self._writer is None:
            self._writer = SnapshotWriter(lambda: open_checkpoint_store(self.job), self.job.checkpoints,
                                          f"esault-snapshots-{self.spu_id}", self.job.config.checkpoint_timeout)
        return self._writer

    def new_snapshot(self, epoch: int, position: Any = None, input_ended: bool = False) -> Snapshot:
        return Snapshot(CheckpointAck(epoch, self.spu_id, self.unit_name, self.cfg.instance, position,
                                      input_ended=input_ended))

    def save_state(self, state: Any, owner: str, fix: str = PE_FIX) -> bytes | None:
        """`state` encoded for a checkpoint or a key's move; None, after state_lost(), if it cannot be.

        `owner` says whose state it is (esault.checkpoint.saveable.key_owner). The one place every
        snapshot (PE, instance, join chain, spout position) and every hand-off encodes through."""
        try:
            return encode_state(state, owner, fix)
        except UnsaveableState as exc:
            self.state_lost(exc)
            return None

    def state_lost(self, error: UnsaveableState) -> None:
        """A state could not be saved (encoded, or its snapshot hook raised).

        exactly_once: the guarantee is broken, so the job fails: every later snapshot of this SPU is
        refused (send_barrier), its checkpoint with it, and the coordinator stops the job's checkpoints.
        at_least_once and none keep no checkpoints: the state is lost where it had to leave memory (a
        split, a merge, an idle expiry), and the key restarts empty there; that is logged."""
        if self.exactly_once:
            if self.lost_state is None:
                self.lost_state = (
                    f"topology {self.job.name!r}: {error}. Guarantee 'exactly_once' needs every state in every "
                    "checkpoint, so the job fails: no checkpoint completes without it (under guarantee "
                    "'at_least_once' it would be lost instead, at every split, merge or idle expiry of the key)")
                log.error("%s", self.lost_state)
                self._report_lost_state()
            return
        self._state_error_log("topology %r: %s. Under guarantee %r it is lost where it leaves memory: the key "
                              "restarts empty after this split, merge or idle expiry", self.job.name, error,
                              self.job.config.guarantee)

    def _report_lost_state(self) -> None:
        """Tell the coordinator at once, not only in this SPU's next snapshot: a merge's giver that lost a
        key's state retires before any (a fatal ack counts whatever its epoch; -1: outside a checkpoint)."""
        try:
            self.job.checkpoints.tell(CheckpointAck(-1, self.spu_id, self.unit_name, self.cfg.instance, None,
                                                    self.lost_state, True))
        except Exception as exc:  # noqa: BLE001 - the driver is gone; this SPU's next snapshot is refused anyway
            log.warning("topology %r: %s SPU %d could not report its lost state: %r", self.job.name,
                        self.unit_name, self.spu_id, exc)

    def snapshot_instance(self, unit: str, pe: Any, snapshot: Snapshot) -> None:
        """A non-keyed instance's part of a checkpoint: its state row, and its pre-commit (a sink's)."""
        epoch = snapshot.ack.epoch
        owner = f"bolt {unit!r} (instance {self.cfg.instance}, not key grouped) cannot save its state"
        try:
            state = pe.snapshot_state()
        except Exception as exc:
            self.state_lost(unsaveable_hook(owner, "snapshot_state()", exc))
        else:  # an empty state too: a restore must never find an older row of this instance instead
            blob = self.save_state(state or {}, owner)
            if blob is not None:
                snapshot.rows.setdefault(unit, []).append((instance_slot(self.cfg.instance), blob))
        try:
            future = pe.on_checkpoint(epoch)
        except Exception as exc:  # the pre-commit failed: so does this checkpoint (the next one retries)
            future = Future()
            future.set_exception(exc)
        if future is not None:
            snapshot.waits.append(future)

    def snapshot_stages(self, snapshot: Snapshot) -> None:
        for stage in self.stages:
            self.snapshot_instance(stage.spec.name, stage.pe, snapshot)

    def restore_instance(self, unit: str, pe: Any) -> None:
        """Install a non-keyed instance's state of the checkpoint this SPU restores from, if it has one."""
        epoch = self.cfg.restore_epoch
        if epoch is None:
            return
        state = self.checkpoint_store().read_slot(unit, epoch, instance_slot(self.cfg.instance))
        if state:
            pe.restore_state(dict(state))

    def restore_stages(self) -> None:
        for stage in self.stages:
            try:
                self.restore_instance(stage.spec.name, stage.pe)
            except Exception as exc:
                log.error("topology %r: could not restore the state of %r: %r", self.job.name, stage.spec.name, exc)

    def send_barrier(self, snapshot: Snapshot, end_of_input: bool = False) -> None:
        """Everything this SPU emitted so far leaves, then the barrier behind it; the snapshot goes to disk
        (or, if this SPU lost a state it had to keep, is refused: its checkpoint fails, and the job).
        `end_of_input`: this SPU's input ended (final epoch): the barrier says so downstream. A snapshot still
        being encoded (`deferred`) goes to the writer once its last key is in (submit_snapshot)."""
        self.flush()
        self.router.broadcast(Barrier(snapshot.ack.epoch, self.spu_id, end_of_input))
        if not snapshot.deferred:
            self.submit_snapshot(snapshot)

    def submit_snapshot(self, snapshot: Snapshot) -> None:
        """To the writer, which acks it once durable; refused if this SPU lost a state it had to keep."""
        if self.lost_state is not None:
            snapshot.refuse(self.lost_state)
        self.snapshot_writer().submit(snapshot)

    def _on_checkpoint_complete(self, msg: CheckpointComplete) -> None:
        for stage in self.stages:
            self._call_complete(stage.spec.name, stage.pe, msg.epoch)

    def _call_complete(self, unit: str, pe: Any, epoch: int) -> None:
        try:
            pe.on_checkpoint_complete(epoch)
        except Exception as exc:
            log.error("topology %r: %r on_checkpoint_complete(%d) raised %r", self.job.name, unit, epoch, exc)

    def _on_abandon(self, msg: Abandon) -> None:
        self._abandoned = True

    def abandon_stages(self) -> None:
        for stage in self.stages:
            try:
                stage.pe.abandon()
            except Exception as exc:
                log.error("bolt %r abandon() raised %r", stage.spec.name, exc)
            self.job.stats.retire(stage.stats)

    def close_checkpointing(self) -> None:
        """On stop: finish (or, abandoned, drop) queued snapshot writes; close the store connection."""
        if self._writer is not None:
            self._writer.close(discard=self._abandoned)
            self._writer = None
        if self._store is not None:
            self._store.close()
            self._store = None
