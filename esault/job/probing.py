"""JobProbes: what measures a job's bolts for its controllers (prober actors) and the built-in latency policy.

Its own part because measuring is the job's one long-lived concern that every
change touches: a split, merge or replacement gives a bolt new SPUs to probe, a
rollback relaunches them all under new ids, a lost worker's SPUs must stop being
probed (their timeouts are not overload), and a user controller asks for every
scalable bolt to be probed. The job tells it each change; the probers and the
LatencyControllers it started live here.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from esault.control.events import Change
from esault.control.latency import LatencyController
from esault.dsl.topology import Grouping, UnitSpec
from esault.job.prober import LatencyProberActor
from esault.messages.control import GetLayout, GetSpus, ScaleResult, SpusChanged
from esault.metrics import registry as metrics

__all__ = ["JobProbes"]

log = logging.getLogger("esault")

Job = Any
"""An esault.job.job.Job (not imported: job.py imports this part)."""


class JobProbes:
    """One per job. probe() and refresh() from any driver-side thread (the driver's, the control thread,
    the cluster actor's), never from an actor of the job."""

    def __init__(self, job: Job) -> None:
        self.job = job
        self.probers: dict[str, Any] = {}
        """Per bolt probed, its LatencyProberActor (subscribed to the job's ticker)."""
        self.latency_controllers: dict[str, LatencyController] = {}
        """The built-in policy's controller per elastic bolt (none with elasticity=False)."""
        self._lock = threading.Lock()

    def scalable_bolts(self) -> list[UnitSpec]:
        """Bolts with SPUs of their own that can be reconfigured (not chained, not global-grouped)."""
        topology = self.job.topology
        return [spec for spec in topology.units
                if not spec.is_spout and not topology.chained(spec.name)
                and not any(i.grouping is Grouping.GLOBAL for i in spec.inputs)]

    def probe(self, spec: UnitSpec) -> None:
        """Start probing `spec`'s SPUs (once): probe latencies and key samples reach every controller."""
        job = self.job
        with self._lock:
            if spec.name in self.probers:
                return
            spus = job.units[spec.name].ask(GetSpus())
            beats = getattr(job.launcher, "last_beat_of", None)
            prober = job._start_named(f"monitor-{spec.name}", lambda: LatencyProberActor.start(
                job.ctx, spec, job.events, spus, *([beats] if beats else [])))
            job.ctx.ticker.subscribe(prober)
            self.probers[spec.name] = prober

    def start_latency_control(self) -> None:
        """The built-in policy: per elastic bolt that can scale (not global-grouped), a prober actor that
        measures and a LatencyController that decides, run like any user controller."""
        job = self.job
        for spec in self.scalable_bolts():
            if not spec.elasticity.elastic:
                continue
            self.probe(spec)
            metrics.init_scaling_series(job.name, spec.name)
            controller = LatencyController(spec.name, spec.elasticity)
            self.latency_controllers[spec.name] = controller
            job.add_controller(controller)

    def refresh(self, lost: set[int]) -> None:
        """Probe the units' SPUs as they are now, without `lost` (dead with their worker): their unconfirmed
        timeouts are dropped, never read as overload."""
        for name, prober in list(self.probers.items()):
            try:
                spus = {s: m for s, m in self.job.units[name].ask(GetSpus(), timeout=10).items() if s not in lost}
                prober.tell(SpusChanged(spus, {}, None))
            except Exception:  # noqa: BLE001 - the job is stopping
                log.debug("prober of %r not refreshed", name, exc_info=True)

    def record_change(self, result: ScaleResult) -> None:
        """A coordinator listener, so it runs on the control thread (which may ask): the prober probes the new
        SPUs, and every controller reads the change in its next snapshot."""
        job = self.job
        prober = self.probers.get(result.unit)
        if prober is not None:
            unit = job.units[result.unit]
            prober.tell(SpusChanged(unit.ask(GetSpus()), unit.ask(GetLayout()), result))
        job.events.record(Change(job.clock.now(), result))

    def stop(self) -> None:
        """Stop every prober (the job stops)."""
        for prober in self.probers.values():
            self.job.ctx.ticker.unsubscribe(prober)
            prober.stop(block=True)
