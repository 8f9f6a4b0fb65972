"""LatencyProberActor: sends the latency probes of one elastic bolt and records each round trip.

Every probe_period a Probe goes to each SPU; it queues behind the data, so its
round trip is that SPU's processing latency. A probe not back within
max_latency counts as timed out at once (a late return is ignored). Each
outcome goes to the job's ControlEvents as a ProbeRecord, where the
LatencyController (esault/control/latency.py) reads it: this actor measures,
the controller decides.

A timeout is only recorded once the SPU's worker is known to have been alive
after it (a heartbeat received later, or a later probe back): the probes of an
SPU on a dead worker must never read as overload (a split of a dead SPU would
wait out its timeout, and the job's recovery behind it). Until the worker's
death is declared they wait unconfirmed, then they are dropped with the SPU.
Costs at most one heartbeat interval of reaction time for worker SPUs.
"""

from __future__ import annotations

import itertools
import logging
import math
import time
from typing import Any, Callable

import pykka

from esault.control.events import ControlEvents, ProbeRecord
from esault.dsl.topology import UnitSpec
from esault.elasticity.detector import ProbeSample
from esault.metrics import registry as metrics
from esault.datapath.context import JobContext
from esault.messages.control import Probe, ProbeReturned, SpusChanged
from esault.messages.data import Tick

log = logging.getLogger("esault.elasticity")


class LatencyProberActor(pykka.ThreadingActor):
    """One per elastic bolt unit, in the driver."""

    def __init__(self, job: JobContext, spec: UnitSpec, events: ControlEvents, spus: dict[int, Any],
                 last_beat_of: Callable[[int], float] = lambda spu: math.inf) -> None:
        super().__init__()
        self.job = job
        self.spec = spec
        self.cfg = spec.elasticity
        self.events = events
        self.spus = dict(spus)
        self.outstanding: dict[int, tuple[int, float]] = {}  # probe id -> (spu, sent_at)
        self.last_beat_of = last_beat_of  # time.monotonic() of the SPU's worker's last heartbeat
        self.unconfirmed: dict[int, list[tuple[float, float]]] = {}  # spu -> [(sent_at, timed out at)]
        self._ids = itertools.count(1)
        self.next_probe_at = job.clock.now()
        metrics.init_unknown_message_series("LatencyProberActor")

    def on_stop(self) -> None:
        for spu in self.spus:  # the job is over: its probe series go with it
            metrics.forget_probe_latency(self.job.name, self.spec.name, spu)

    def on_receive(self, message: Any) -> Any:
        try:
            kind = type(message)
            if kind is Tick:
                self._on_tick(message.now)
            elif kind is ProbeReturned:
                self._on_probe_returned(message)
            elif kind is SpusChanged:
                self._on_spus_changed(message)
            else:
                metrics.count_unknown_message("LatencyProberActor")
        except Exception:
            log.exception("latency prober of %r failed handling %s", self.spec.name, type(message).__name__)
        return None

    def _on_tick(self, now: float) -> None:
        max_latency = self.cfg.max_latency
        for probe_id, (spu, sent_at) in list(self.outstanding.items()):
            if now - sent_at > max_latency:
                del self.outstanding[probe_id]
                self.unconfirmed.setdefault(spu, []).append((sent_at, time.monotonic()))
        self._confirm()
        if now >= self.next_probe_at:
            self.next_probe_at = max(self.next_probe_at + self.cfg.probe_period, now)
            for spu, mailbox in list(self.spus.items()):
                probe_id = next(self._ids)
                try:
                    mailbox.tell(Probe(probe_id, now, self.actor_ref))
                except pykka.ActorDeadError:  # merged away or discarded by a rollback: SpusChanged names the rest
                    self._forget(spu)
                    continue
                self.outstanding[probe_id] = (spu, now)

    def _on_probe_returned(self, msg: ProbeReturned) -> None:
        # Latency from this actor's own record of the send, never from the echoed `sent_at`: no
        # received clock reading decides anything. A reply must come back for the SPU probed.
        probe = self.outstanding.get(msg.probe_id)
        if probe is None or probe[0] != msg.spu_id:
            return  # already counted as timed out, from an SPU that is gone, or not the one probed
        del self.outstanding[msg.probe_id]
        spu, sent_at = probe
        self._confirm(alive=spu)  # an answer proves its worker alive: its earlier timeouts count first
        latency = self.job.clock.now() - sent_at
        metrics.observe_probe_latency(self.job.name, self.spec.name, spu, latency)
        hashes = tuple(h for h in msg.hashes if isinstance(h, int))[:4096]  # a frame's content is not trusted
        self.events.record(ProbeRecord(self.spec.name, spu, ProbeSample(sent_at, latency, max(0, int(msg.processed))),
                                       hashes))

    def _confirm(self, alive: int | None = None) -> None:
        """Record the timeouts whose SPU's worker beat after them (or SPU `alive`'s, proven alive)."""
        for spu in list(self.unconfirmed):
            beat = math.inf if spu == alive else self.last_beat_of(spu)
            pending = self.unconfirmed[spu]
            while pending and beat > pending[0][1]:
                sent_at, _ = pending.pop(0)
                self.events.record(ProbeRecord(self.spec.name, spu, ProbeSample(sent_at, None, 0)))
            if not pending:
                del self.unconfirmed[spu]

    def _forget(self, spu: int) -> None:
        """Stop probing `spu`: its probes in flight and unconfirmed timeouts go (a reply it sent before it
        stopped must not bring its series back), and its probe series ends (labels stay bounded to live SPUs)."""
        del self.spus[spu]
        for probe_id in [p for p, (probed, _) in self.outstanding.items() if probed == spu]:
            del self.outstanding[probe_id]
        self.unconfirmed.pop(spu, None)
        metrics.forget_probe_latency(self.job.name, self.spec.name, spu)

    def _on_spus_changed(self, msg: SpusChanged) -> None:
        for gone in set(self.spus) - set(msg.spus):
            self._forget(gone)
        self.spus = dict(msg.spus)
        # Probes in flight measured the old layout: drop them (the controller also ignores samples of a
        # touched SPU sent before the change finished), and timeouts no live worker confirmed.
        self.outstanding.clear()
        self.unconfirmed.clear()
