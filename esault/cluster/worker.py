"""A worker process: hosts SPU actors for a driver (`esault worker --driver HOST:PORT`).

It joins with WorkerHello, starts and stops SPUs on the driver's StartSpu /
StopSpu, connects to its peers for SPU-to-SPU traffic, and sends a
WorkerHeartbeat with its SPUs' counts every HEARTBEAT_INTERVAL.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

import pykka

from esault.clock import SystemClock
from esault.cluster.postman import Postman
from esault.cluster.unit_wire import config_from_wire, unit_from_wire
from esault.dsl.topology import Topology
from esault.metrics.stats import STATS
from esault.runtime.bolt_spu import BoltSpuActor
from esault.runtime.spout_spu import SpoutSpuActor
from esault.runtime.context import JobContext
from esault.runtime.messages import (
    PeerAddresses, Shutdown, SpuStarted, SpuStopped, StartSpu, StopSpu, WorkerHeartbeat, WorkerHello,
)
from esault.runtime.ticker import Ticker

log = logging.getLogger("esault.worker")

HEARTBEAT_INTERVAL = 0.2
DRIVER = "driver"


class HostActor(pykka.ThreadingActor):
    """Starts and stops this worker's SPUs; one JobContext per topology."""

    def __init__(self, postman: Postman, done: threading.Event) -> None:
        super().__init__()
        self.postman = postman
        self.done = done
        self.jobs: dict[str, JobContext] = {}
        self.spus: dict[int, Any] = {}
        self.topology_of: dict[int, str] = {}
        self.ticker = Ticker(SystemClock(), 0.01)
        self.ticker.start()

    def on_receive(self, message: Any) -> Any:
        try:
            kind = type(message)
            if kind is StartSpu:
                self._start(message)
            elif kind is StopSpu:
                self._stop_spu(message)
            elif kind is PeerAddresses:
                for process, address in message.peers.items():
                    self.postman.connect(process, address)
            elif kind is Shutdown:
                for spu_id in list(self.spus):
                    self._stop_spu(StopSpu(spu_id, 0), reply=False)
                self.done.set()
            else:
                log.warning("worker %s ignored %s", self.postman.process, kind.__name__)
        except Exception:
            log.exception("worker %s failed handling %s", self.postman.process, type(message).__name__)

    def on_stop(self) -> None:
        self.ticker.stop()

    def _job(self, message: StartSpu) -> JobContext:
        job = self.jobs.get(message.topology)
        if job is None:
            config = config_from_wire(message.config)
            data_dir = config.data_dir / message.topology
            data_dir.mkdir(parents=True, exist_ok=True)
            job = JobContext(Topology(message.topology, ()), config, SystemClock(), data_dir,
                             acker=self.postman.remote(DRIVER, "acker"), ticker=self.ticker,
                             process=self.postman.process)
            self.jobs[message.topology] = job
        return job

    def _start(self, message: StartSpu) -> None:
        """Start the SPU and tell the driver whether it runs: a unit that cannot start fails the job at once."""
        spu_id = message.spu.spu_id
        try:
            spec = unit_from_wire(message.unit)
            job = self._job(message)
            self.topology_of[spu_id] = message.topology
            self.spus[spu_id] = self.postman.start_and_register(
                f"spu-{spu_id}",
                lambda: (SpoutSpuActor if spec.is_spout else BoltSpuActor).start(message.spu, spec, job))
        except Exception as exc:
            log.error("worker %s cannot start SPU %d of %r: %s", self.postman.process, spu_id,
                      message.unit.get("name"), exc)
            self.postman.send(DRIVER, "cluster", SpuStarted(spu_id, os.getpid(), f"{type(exc).__name__}: {exc}"))
            return
        self.postman.send(DRIVER, "cluster", SpuStarted(spu_id, os.getpid(), ""))

    def _stop_spu(self, message: StopSpu, reply: bool = True) -> None:
        ref = self.spus.pop(message.spu_id, None)
        if ref is not None:
            try:
                ref.stop(block=True)
            except pykka.ActorDeadError:
                pass
            self.postman.unregister(f"spu-{message.spu_id}")
        topology = self.topology_of.pop(message.spu_id, None)
        if topology is not None and topology not in self.topology_of.values():
            # The job's last SPU here stopped: its counts and settings go, before the driver hears
            # SpuStopped, so no later heartbeat carries them into a next job of the same name.
            STATS.forget_topology(topology)
            self.jobs.pop(topology, None)
        if reply:
            self.postman.send(DRIVER, "cluster", SpuStopped(message.spu_id, message.request_id))


def run_worker(driver: str, name: str | None = None, bind_host: str | None = None) -> int:
    """Join the driver at HOST:PORT and host SPUs until it says Shutdown (or the process is killed).

    A worker of a driver on this machine listens on loopback; otherwise on every
    interface, advertised under this host's name.
    """
    name = name or f"w{os.getpid()}"
    if bind_host is None:
        host = driver.replace("tcp://", "").rsplit(":", 1)[0]
        bind_host = "127.0.0.1" if host in ("127.0.0.1", "localhost") else "0.0.0.0"
    postman = Postman(name, bind=f"tcp://{bind_host}:0")
    done = threading.Event()
    host = postman.start_and_register("host", lambda: HostActor.start(postman, done))
    postman.connect(DRIVER, driver if driver.startswith("tcp://") else f"tcp://{driver}")
    postman.send(DRIVER, "cluster", WorkerHello(name, postman.address, os.getpid()))
    log.info("worker %s joined driver %s from %s", name, driver, postman.address)
    try:
        while not done.wait(HEARTBEAT_INTERVAL):
            stats = [(s.topology, s.unit, s.spu, s.as_dict()) for s in STATS.all()]
            try:
                postman.send(DRIVER, "cluster", WorkerHeartbeat(name, stats), timeout=5.0)
            except TimeoutError:
                log.warning("worker %s: driver not reading heartbeats", name)
    finally:
        host.stop(block=True)
        pykka.ActorRegistry.stop_all()
        postman.close()
    return 0
