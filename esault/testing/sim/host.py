"""SimWorker: one simulated worker, the real worker's transport and control with stand-in SPUs.

Everything the driver talks to is the real code: the Postman (pyzmq, CurveZMQ, the authority check),
WorkerControl (DriverBeat, PeerGone, ReportNow), the HostActor (SubmitJob, StartSpu, StopSpu, PeerAddresses,
Shutdown, the store check) and the heartbeat pacing. Only `launch` differs: a SimSpu instead of an SPU actor.
Many of these share one process (esault/testing/sim/workers.py); each has its own socket, keys and counts.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from esault.checkpoint.backends import open_checkpoint_store
from esault.clock import SystemClock
from esault.checkpoint.snapshots import SnapshotWriter
from esault.cluster.credentials import WorkerKeys
from esault.cluster.postman import Postman
from esault.cluster.worker import (DRIVER, DriverLiveness, HeartbeatPacer, HostActor, WorkerControl,
                                   driver_endpoint)
from esault.datapath.context import JobContext
from esault.datapath.ticker import Ticker
from esault.dsl.topology import UnitSpec
from esault.messages.cluster import StartSpu, WorkerHello
from esault.metrics.stats import StatsRegistry
from esault.testing.sim.spu import SimSpu

_IDLE_TICKER = Ticker(SystemClock(), 1.0)  # never started: stand-ins take no ticks


class SimHost(HostActor):
    """The real host actor; its SPUs are SimSpus, writing their snapshots through one thread per job."""

    def __init__(self, postman: Postman, done: threading.Event, stats: StatsRegistry, state_rows: int,
                 sims: dict[int, SimSpu]) -> None:
        super().__init__(postman, done, stats=stats)
        self.state_rows = state_rows
        self.sims = sims  # shared with the SimWorker, whose load thread reads it
        self._writers: dict[str, SnapshotWriter] = {}

    def launch(self, message: StartSpu, spec: UnitSpec, job: JobContext) -> Any:
        writer = self._writers.get(message.topology)
        if writer is None:
            writer = self._writers[message.topology] = SnapshotWriter(
                lambda: open_checkpoint_store(job), job.checkpoints, f"sim-snapshots-{self.postman.process}",
                job.config.checkpoint_timeout)
        sim = SimSpu(message.spu, spec.is_spout, job, writer, self.state_rows)
        self.sims[sim.spu_id] = sim
        return sim

    def _stop_spu(self, message: Any, reply: bool = True) -> None:
        self.sims.pop(message.spu_id, None)
        super()._stop_spu(message, reply)

    def _ticker(self, interval: float) -> Ticker:
        return _IDLE_TICKER

    def on_stop(self) -> None:
        for writer in self._writers.values():
            writer.close(discard=True, timeout=5.0)


class SimWorker:
    """One simulated worker joined to `driver`; `beat()` sends its heartbeat when one is due."""

    def __init__(self, driver: str, name: str, keys: WorkerKeys, state_rows: int, quiet: float = 1.0) -> None:
        self.name = name
        self.stats = StatsRegistry()
        self.done = threading.Event()
        self.liveness = DriverLiveness()
        self.postman = Postman(name, bind="tcp://127.0.0.1:0", keys=keys.ring(name), toward="127.0.0.1")
        self.postman.register("control", WorkerControl(self.postman, self.liveness, self.stats))
        self._sims: dict[int, SimSpu] = {}
        self.host = self.postman.start_and_register(
            "host", lambda: SimHost.start(self.postman, self.done, self.stats, state_rows, self._sims))
        self._pacer = HeartbeatPacer(name, quiet, self.stats)
        self.postman.connect(DRIVER, driver_endpoint(driver))
        self.postman.send(DRIVER, "cluster", WorkerHello(name, self.postman.address, os.getpid()))

    def sims(self) -> list[SimSpu]:
        """Its stand-in SPUs now (a copy: the host's thread changes the table)."""
        return list(self._sims.values())

    def beat(self, now: float) -> None:
        """A heartbeat, if the pacer says one is due and the driver has admitted this worker."""
        if not self.liveness.heard or self.done.is_set():
            return
        beat = self._pacer.next(now)
        if beat is not None:
            try:
                self.postman.send(DRIVER, "cluster", beat, timeout=5.0)
            except Exception:  # noqa: BLE001 - a driver not reading: the next beat tries again
                pass

    def close(self) -> None:
        try:
            self.host.stop(block=True, timeout=10.0)
        except Exception:  # noqa: BLE001 - already stopped
            pass
        self.postman.close()
