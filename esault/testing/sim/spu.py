"""SimSpu: a stand-in SPU that answers the driver as a real one would and does no data work.

The driver-scale simulation (bench/scale_sim.py) runs thousands of these in a few processes. Each answers the
control protocol with the real messages over the real wire: Prepared and HandoffFinished for a hand-off (with its
EpochMarkers from the upstream SPUs and its StateHandoff chunks between giver and receiver, the pure hand-off
state machines of esault.migration.handoff deciding when), CheckpointAck after its snapshot rows are written to
the job's real checkpoint store, ProbeReturned, the spout's SpoutProgress. What flows between SPUs as data does
not exist here: the counts a paced load would move are advanced by `SimLoad` instead, and heartbeats carry them.

Handlers run on the endpoint's I/O thread (never block there): store writes go to the worker's one writer
thread.
"""

from __future__ import annotations

import logging
import random
import threading
from typing import Any

from esault.checkpoint.snapshots import Snapshot, SnapshotWriter
from esault.checkpoint.store import bucket_of, pack_entries
from esault.datapath.context import JobContext
from esault.messages.acking import SpoutProgress
from esault.messages.checkpoints import (Abandon, Barrier, CheckpointAck, CheckpointComplete, CheckpointStart,
                                         TriggerCheckpoint)
from esault.messages.control import Probe, ProbeReturned, SpuConfig
from esault.messages.handoff import (CancelReconfiguration, EpochMarker, ForwardMarker, HandoffFinished,
                                     InstallRoutes, MarkerSeen, PeersLost, PrepareGive, Prepared, PrepareReceive,
                                     StateHandoff)
from esault.metrics.stats import SpuStats
from esault.migration.handoff import EarlyMessages, GiverHandoff, ReceiverHandoff
from esault.transport.codec import encode
from esault.transport.state_chunks import pack_states

log = logging.getLogger("esault.sim")

STATE_ROW_BYTES = 1024
"""Bytes of one simulated state row (a bucket of keys) in a snapshot or a hand-off."""


class SimSpu:
    """One simulated SPU: registered with its worker's postman as "spu-<id>", told on the I/O thread."""

    def __init__(self, cfg: SpuConfig, is_spout: bool, job: JobContext, writer: SnapshotWriter,
                 state_rows: int) -> None:
        self.cfg = cfg
        self.spu_id = cfg.spu_id
        self.is_spout = is_spout
        self.job = job
        self.actor_urn = f"sim-spu-{cfg.spu_id}"
        self.unit_ref = cfg.extra.get("unit_ref")
        self.stats = SpuStats(cfg.topology, cfg.unit, cfg.spu_id)
        self.stats.pes = 0 if is_spout else state_rows
        self._writer = writer
        self._state_rows = state_rows
        self._lock = threading.Lock()  # the load thread moves counts, the I/O thread reads and resets them
        self._since_probe = 0
        self._dirty = 0  # rows changed since the last snapshot: an incremental checkpoint writes only these
        self._position = 0
        self._early = EarlyMessages()
        self._giving: GiverHandoff | None = None
        self._receivers: dict[int, Any] = {}
        self._receiving: ReceiverHandoff | None = None
        self._abandoned = False
        job.stats.register(self.stats)
        if is_spout:
            self._tell(job.acker, SpoutProgress(self.spu_id, False, True, 0))
        if cfg.receive is not None:
            self._prepare_receive(cfg.receive)

    # --- what a StartCheck / stop asks of an actor ref -----------------------------

    def ask(self, message: Any) -> None:
        """The host's StartCheck: a stand-in always starts."""
        return None

    def stop(self, block: bool = True, timeout: float | None = None) -> None:
        self.job.stats.retire(self.stats)

    # --- the paced load ----------------------------------------------------------

    def advance(self, tuples: int) -> None:
        """`tuples` more processed (and, for a spout, emitted) since the last call: what heartbeats report."""
        with self._lock:
            self.stats.processed += tuples
            self.stats.emitted += tuples
            self._since_probe += tuples
            self._position += tuples
            if tuples:
                self._dirty = self._state_rows

    # --- the protocol --------------------------------------------------------------

    def tell(self, message: Any) -> None:
        handler = _HANDLERS.get(type(message))
        if handler is None:
            log.debug("sim SPU %d ignored %s", self.spu_id, type(message).__name__)
            return
        try:
            handler(self, message)
        except Exception:  # noqa: BLE001 - a stand-in's bug must show, not stop its worker's I/O thread
            log.exception("sim SPU %d failed on %s", self.spu_id, type(message).__name__)

    def _tell(self, mailbox: Any, message: Any) -> None:
        try:
            mailbox.tell(message)
        except Exception as exc:  # noqa: BLE001 - a peer or the driver gone: a real SPU logs and goes on
            log.debug("sim SPU %d could not send %s: %r", self.spu_id, type(message).__name__, exc)

    def _snapshot(self, epoch: int) -> None:
        with self._lock:
            rows, self._dirty = self._dirty, 0
            position = self._position if self.is_spout else None
        ack = CheckpointAck(epoch, self.spu_id, self.cfg.unit, self.cfg.instance, position)
        self._writer.submit(Snapshot(ack, {self.cfg.unit: self._rows(rows)} if rows and not self.is_spout else {}))

    def _rows(self, count: int) -> list[tuple[int, bytes]]:
        """`count` state rows in buckets of this SPU's key ranges, as a keyed SPU's snapshot writes them."""
        lo, hi = (self.cfg.intervals or ((0, 0),))[0]
        first, last = bucket_of(lo), bucket_of(hi)
        return [(min(first + i, last), pack_entries([f"k{self.spu_id}-{i}", random.randbytes(STATE_ROW_BYTES)]))
                for i in range(count)]

    def _on_trigger(self, msg: TriggerCheckpoint) -> None:
        self._snapshot(msg.epoch)

    def _on_checkpoint_start(self, msg: CheckpointStart) -> None:
        self._snapshot(msg.epoch)  # no barrier travels between stand-ins: its upstream's are taken as in

    def _on_probe(self, msg: Probe) -> None:
        with self._lock:
            processed, self._since_probe = self._since_probe, 0
        hashes: tuple[int, ...] = ()
        if msg.want_hashes and self.cfg.intervals and processed:
            lo, hi = self.cfg.intervals[0]
            hashes = tuple(sorted(random.randint(lo, hi) for _ in range(16)))
        self._tell(msg.reply_to, ProbeReturned(self.spu_id, msg.probe_id, msg.sent_at, processed, hashes))

    def _on_install_routes(self, msg: InstallRoutes) -> None:
        for mailbox in msg.notify.values():
            self._tell(mailbox, EpochMarker(msg.reconfig_id, self.spu_id))

    def _on_prepare_give(self, msg: PrepareGive) -> None:
        giving = self._giving = GiverHandoff(msg.reconfig_id, msg.ranges, msg.upstream, msg.retire)
        self._receivers = dict(msg.receivers)
        for sender in self._early.take_markers(msg.reconfig_id):
            giving.marker(sender)
        self._tell(self.unit_ref, Prepared(msg.reconfig_id, self.spu_id, "giver"))
        self._give_if_ready()

    def _on_marker(self, msg: EpochMarker) -> None:
        giving = self._giving
        if giving is None or giving.reconfig_id != msg.reconfig_id:
            self._early.markers.setdefault(msg.reconfig_id, set()).add(msg.sender)
            return
        giving.marker(msg.sender)
        self._give_if_ready()

    def _give_if_ready(self) -> None:
        giving = self._giving
        if giving is None or not giving.ready:
            return
        self._giving = None
        moved = 0
        by_receiver = giving.by_receiver()
        for receiver_id in by_receiver:
            rows = max(1, self._state_rows // max(1, len(by_receiver)))
            states = [(f"k{self.spu_id}-{i}", encode(random.randbytes(STATE_ROW_BYTES))) for i in range(rows)]
            moved += rows
            receiver = self._receivers.get(receiver_id)
            if receiver is not None:
                self._tell(receiver, StateHandoff(giving.reconfig_id, self.spu_id, pack_states(states), True))
        self._tell(self.unit_ref, HandoffFinished(giving.reconfig_id, self.spu_id, "giver", moved, 0.0))

    def _on_prepare_receive(self, msg: PrepareReceive) -> None:
        self._prepare_receive(msg)

    def _prepare_receive(self, msg: PrepareReceive) -> None:
        self._receiving = ReceiverHandoff(msg.reconfig_id, msg.ranges)  # no downstream: no MarkerSeen to wait for
        self._tell(self.unit_ref, Prepared(msg.reconfig_id, self.spu_id, "receiver"))
        for chunk in self._early.handoffs.pop(msg.reconfig_id, None) or ():
            self._on_state(chunk)
        self._finish_receiving()

    def _on_state(self, msg: StateHandoff) -> None:
        receiving = self._receiving
        if receiving is None or receiving.reconfig_id != msg.reconfig_id:
            self._early.keep_handoff(msg)
            return
        if msg.last:
            receiving.state_done(msg.giver_id)
            self._finish_receiving()

    def _finish_receiving(self) -> None:
        receiving = self._receiving
        if receiving is None:
            return
        for giver in receiving.ready_givers():
            receiving.pending_givers.discard(giver)
        if receiving.done:
            self._receiving = None
            self._early.forget(receiving.reconfig_id)
            self._tell(self.unit_ref, HandoffFinished(receiving.reconfig_id, self.spu_id, "receiver", 0, 0.0))

    def _on_peers_lost(self, msg: PeersLost) -> None:
        if self._giving is not None and self._giving.reconfig_id == msg.reconfig_id:
            self._giving.peers_lost(msg.spus)
            self._give_if_ready()
        if self._receiving is not None and self._receiving.reconfig_id == msg.reconfig_id:
            self._receiving.peers_lost(msg.spus)
            self._finish_receiving()

    def _on_cancel(self, msg: CancelReconfiguration) -> None:
        if self._giving is not None and self._giving.reconfig_id == msg.reconfig_id:
            self._giving = None
        if self._receiving is not None and self._receiving.reconfig_id == msg.reconfig_id:
            self._receiving = None
        self._early.forget(msg.reconfig_id)

    def _on_abandon(self, msg: Abandon) -> None:
        self._abandoned = True

    def _ignore(self, msg: Any) -> None:
        """Messages a real SPU takes with no answer to the driver."""


_HANDLERS = {
    TriggerCheckpoint: SimSpu._on_trigger,
    CheckpointStart: SimSpu._on_checkpoint_start,
    Probe: SimSpu._on_probe,
    InstallRoutes: SimSpu._on_install_routes,
    PrepareGive: SimSpu._on_prepare_give,
    EpochMarker: SimSpu._on_marker,
    PrepareReceive: SimSpu._on_prepare_receive,
    StateHandoff: SimSpu._on_state,
    PeersLost: SimSpu._on_peers_lost,
    CancelReconfiguration: SimSpu._on_cancel,
    Abandon: SimSpu._on_abandon,
    CheckpointComplete: SimSpu._ignore,
    Barrier: SimSpu._ignore,
    ForwardMarker: SimSpu._ignore,
    MarkerSeen: SimSpu._ignore,
}
