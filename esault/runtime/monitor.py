"""LatencyMonitorActor: probes each SPU of one bolt and splits or merges it on its own.

Every probe_period a Probe goes to each SPU; it queues behind the data, so its
round trip is that SPU's processing latency. A probe not back within
max_latency counts as timed out at once (a late return is ignored). The
verdicts come from the pure LoadDetector (one per SPU); this actor adds the
policy: min_spus/max_spus, one change at a time, a cool-down after each, a
load-aware split point, and the less-loaded neighbour as merge target. Every
decision is logged with its evidence and goes through the same
ReconfigurationCoordinator as Job.split/merge.
"""

from __future__ import annotations

import itertools
import logging
from typing import Any

import pykka

from esault.dsl.topology import UnitSpec
from esault.elasticity.detector import Load, LoadDetector, ProbeSample, Verdict
from esault.elasticity.planner import choose_merge_target, choose_split_point
from esault.metrics import registry as metrics
from esault.routing.interval_table import IntervalTable
from esault.runtime.context import JobContext
from esault.runtime.coordinator import ReconfigurationCoordinator, ScaleRequest
from esault.runtime.messages import Probe, ProbeReturned, ScaleRefused, SpusChanged, Tick

log = logging.getLogger("esault.elasticity")


class LatencyMonitorActor(pykka.ThreadingActor):
    """One per elastic bolt unit, in the driver."""

    def __init__(self, job: JobContext, spec: UnitSpec, coordinator: ReconfigurationCoordinator,
                 spus: dict[int, Any], layout: dict[int, tuple[tuple[int, int], ...] | None]) -> None:
        super().__init__()
        self.job = job
        self.spec = spec
        self.cfg = spec.elasticity
        self.coordinator = coordinator
        self.spus = dict(spus)
        self.layout = dict(layout)
        self.detectors = {spu: LoadDetector(self.cfg) for spu in self.spus}
        self.load: dict[int, float] = {}
        self.hashes: dict[int, tuple[int, ...]] = {}
        self.outstanding: dict[int, tuple[int, float]] = {}  # probe id -> (spu, sent_at)
        self._ids = itertools.count(1)
        self.next_probe_at = job.clock.now()
        self.cooldown_until = 0.0
        self.changing = False
        self.decisions: list[tuple[str, int, str]] = []

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
            elif kind is ScaleRefused:
                self.changing = False
                self.cooldown_until = self.job.clock.now() + self.cfg.cooldown
            else:
                metrics.count_unknown_message("LatencyMonitorActor")
        except Exception:
            log.exception("latency monitor of %r failed handling %s", self.spec.name, type(message).__name__)
        return None

    # --- probing --------------------------------------------------------------

    def _on_tick(self, now: float) -> None:
        max_latency = self.cfg.max_latency
        for probe_id, (spu, sent_at) in list(self.outstanding.items()):
            if now - sent_at > max_latency:
                del self.outstanding[probe_id]
                self._observe(spu, ProbeSample(sent_at, None, 0), now)
        if now >= self.next_probe_at:
            self.next_probe_at = max(self.next_probe_at + self.cfg.probe_period, now)
            for spu, mailbox in self.spus.items():
                probe_id = next(self._ids)
                self.outstanding[probe_id] = (spu, now)
                mailbox.tell(Probe(probe_id, now, self.actor_ref))

    def _on_probe_returned(self, msg: ProbeReturned) -> None:
        # Latency from this actor's own record of the send, never from the echoed `sent_at`: no
        # received clock reading decides anything. A reply must come back for the SPU probed.
        probe = self.outstanding.get(msg.probe_id)
        if probe is None or probe[0] != msg.spu_id:
            return  # already counted as timed out, from an SPU that is gone, or not the one probed
        del self.outstanding[msg.probe_id]
        spu, sent_at = probe
        now = self.job.clock.now()
        latency = now - sent_at
        metrics.observe_probe_latency(self.job.name, self.spec.name, spu, latency)
        self.load[spu] = msg.processed
        if msg.hashes:
            self.hashes[spu] = msg.hashes
        self._observe(spu, ProbeSample(sent_at, latency, msg.processed), now)

    def _observe(self, spu: int, sample: ProbeSample, now: float) -> None:
        detector = self.detectors.get(spu)
        if detector is None:
            return
        verdict = detector.observe(sample)
        if verdict.kind is not Load.NORMAL:
            self._decide(spu, verdict, now)

    # --- policy -----------------------------------------------------------------

    def _decide(self, spu: int, verdict: Verdict, now: float) -> None:
        if self.changing or now < self.cooldown_until:
            return
        count = len(self.spus)
        if verdict.kind is Load.OVERLOAD:
            if count >= self.cfg.max_spus:
                return
            at = None
            owned = self.layout.get(spu)
            if owned:
                if sum(hi - lo + 1 for lo, hi in owned) == 1:
                    return  # one hash cannot be split further
                at = choose_split_point(self.hashes.get(spu, ()), owned[0][0], owned[-1][1])
            request = ScaleRequest("split", self.spec.name, spu, at, None, "overload")
        else:
            if count <= self.cfg.min_spus:
                return
            into = None
            if self.layout.get(spu) is not None:
                table = IntervalTable.from_intervals([(lo, s) for s, owned in self.layout.items() for lo, _ in owned])
                into = choose_merge_target(table, spu, self.load)
            request = ScaleRequest("merge", self.spec.name, spu, None, into, "underload")
        log.info("topology %r: %s of %r SPU %d (%d SPUs) because %s", self.job.name, request.action,
                 self.spec.name, spu, count, verdict.evidence)
        self.decisions.append((request.action, spu, verdict.evidence))
        self.changing = True
        future = self.coordinator.submit(request)
        me = self.actor_ref

        def refused(f: Any) -> None:
            if f.exception() is not None:
                try:
                    me.tell(ScaleRefused(str(f.exception())))
                except pykka.ActorDeadError:
                    pass

        future.add_done_callback(refused)

    def _on_spus_changed(self, msg: SpusChanged) -> None:
        for gone in set(self.spus) - set(msg.spus):  # its probe series ends with it (bounded labels)
            metrics.forget_probe_latency(self.job.name, self.spec.name, gone)
        self.spus = dict(msg.spus)
        self.layout = dict(msg.layout)
        # Only the SPUs the change touched start over. Resetting every detector would make
        # each learn the current (e.g. trough) rate as its peak, and a steady lull would then
        # never look light again. After a merge the receiver keeps its peak; after a split
        # both halves learn their new share afresh.
        result = msg.result
        touched: set[int] = set()
        if result is not None and result.action == "split":
            touched = {result.giver, result.receiver}
        elif result is not None and result.action == "assign_workload":
            touched = {spu for move in result.moves for spu in move[2:]} | set(result.started)
        self.detectors = {
            spu: (self.detectors[spu] if spu in self.detectors and spu not in touched else LoadDetector(self.cfg))
            for spu in self.spus
        }
        self.outstanding.clear()
        self.load = {s: v for s, v in self.load.items() if s in self.spus}
        self.hashes = {}
        self.changing = False
        self.cooldown_until = self.job.clock.now() + self.cfg.cooldown
