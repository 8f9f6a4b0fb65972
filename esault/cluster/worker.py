"""A worker process: hosts SPU actors for a driver (`esault worker --driver HOST:PORT`).

It joins with WorkerHello, starts and stops SPUs on the driver's StartSpu /
StopSpu, connects to its peers for SPU-to-SPU traffic, and sends a
WorkerHeartbeat with its SPUs' counts every HEARTBEAT_INTERVAL.
"""

from __future__ import annotations

import faulthandler
import logging
import math
import os
import socket
import threading
import time
from functools import partial
from typing import Any, Callable

import pykka

from esault.clock import SystemClock
from esault.cluster.addresses import bind_host_toward, split_host_port
from esault.cluster.postman import Postman
from esault.cluster.role import mark_worker
from esault.cluster.unit_wire import config_from_wire, unit_from_wire
from esault.dsl.topology import Topology
from esault.metrics.forwarded import SampleSender
from esault.metrics.stats import STATS, StatsRegistry
from esault.datapath.sender import StartCheck
from esault.checkpoint.ack_batcher import AckBatcher
from esault.checkpoint.backends import refusal_of
from esault.datapath.context import JobContext, job_actor
from esault.messages.acking import OwnerAt
from esault.dsl.topology import UnitSpec
from esault.errors import ConfigError, DriverUnreachable
from esault.datapath.actors import start_spu
from esault.messages.cluster import (
    DriverBeat,
    PeerAddresses,
    PeerGone,
    ReportNow,
    Shutdown,
    SpuStarted,
    SpuStopped,
    StartSpu,
    StopSpu,
    SubmitJob,
    WorkerHeartbeat,
    WorkerHello,
)
from esault.cluster.credentials import WorkerKeys
from esault.config import SPU_STOP_TIMEOUT, JobConfig
from esault.job.gc_policy import GcFreezer, enter as gc_enter
from esault.job.outcome import ExitCode
from esault.datapath.load_feed import REMOTE_LOADS
from esault.datapath.ticker import Ticker

log = logging.getLogger("esault.worker")

HEARTBEAT_INTERVAL = 0.2
QUIET_HEARTBEAT = 1.0
"""Seconds between heartbeats that would say nothing new (no count moved): at most this, and at most a quarter of
the driver timeout (the driver declares a worker dead after its heartbeat timeout, which a local pool gives its
workers as their driver timeout)."""
DRIVER = "driver"


def heartbeat(process: str, topology: str | None = None, samples: list | None = None,
              registry: StatsRegistry = STATS) -> WorkerHeartbeat:
    """This process's SPU counts and its sources' partitions as a heartbeat carries them (all jobs', or one
    topology's), with `samples` (the forwarded metrics: only the periodic beat takes them)."""
    mine = [s for s in registry.all() if topology in (None, s.topology)]
    return WorkerHeartbeat(process, [(s.topology, s.unit, s.spu, s.as_dict()) for s in mine], samples or [],
                           [(s.topology, s.unit, s.spu, list(s.partitions)) for s in mine if s.partitions is not None])


class HeartbeatPacer:
    """Which heartbeats a worker sends: one each HEARTBEAT_INTERVAL while its counts move or metrics change, else
    one each `quiet` seconds, only so the driver knows it lives."""

    def __init__(self, process: str, quiet: float, registry: StatsRegistry = STATS,
                 samples: SampleSender | None = None) -> None:
        self.process = process
        self.quiet = quiet
        self.registry = registry
        self.samples = samples
        self._last_said: Any = None
        self._last_beat = -math.inf

    def next(self, now: float) -> WorkerHeartbeat | None:
        """The heartbeat to send now, or None: it would say nothing new and the last one is recent."""
        beat = heartbeat(self.process, samples=None if self.samples is None else self.samples.next_rows(),
                         registry=self.registry)
        said = (beat.stats, beat.partitions)
        if said == self._last_said and not beat.samples and now - self._last_beat < self.quiet:
            return None
        self._last_said, self._last_beat = said, now
        return beat


class _Unbuildable(Exception):
    """A unit of a submitted job that this worker could not build; the message is the cause."""


def driver_endpoint(driver: str) -> str:
    """tcp://HOST:PORT for `--driver`, with HOST resolved now: a typo is one clear error, not a silent wait."""
    text = driver[len("tcp://"):] if driver.startswith("tcp://") else driver
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"--driver {driver!r} is not HOST:PORT: give the address `esault run` prints as "
                          "'driver listening on HOST:PORT', e.g. --driver 10.0.0.5:5555")
    try:
        socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        reason = exc.strerror if isinstance(exc, socket.gaierror) else str(exc)
        raise ConfigError(f"--driver {driver!r}: cannot resolve host {host!r} ({reason}); check the name, "
                          "or give the driver's IP address") from None
    return f"tcp://{text}"


class DriverLiveness:
    """When the driver last said it lives (DriverBeat): written by WorkerControl, read by run_worker."""

    def __init__(self) -> None:
        self.driver_seen = time.monotonic()
        self.heard = False  # any DriverBeat yet: the driver admitted this worker


class WorkerControl:
    """Registered as "control": DriverBeat, PeerGone and ReportNow, handled at once on the transport's I/O thread.

    Not an actor on purpose: the host actor may be busy for seconds (stopping an
    SPU that is stuck sending to a dead peer), and neither the driver's pulse
    nor the news that unblocks that SPU may wait behind it. Both handlers only
    take locks and never block.
    """

    actor_urn = "worker-control"

    def __init__(self, postman: Postman, liveness: DriverLiveness, stats: StatsRegistry = STATS) -> None:
        self.postman = postman
        self.liveness = liveness
        self.stats = stats

    def tell(self, message: Any) -> None:
        kind = type(message)
        if kind is DriverBeat:
            self.liveness.driver_seen = time.monotonic()
            self.liveness.heard = True
            REMOTE_LOADS.replace(message.loads)
        elif kind is PeerGone:
            self._forget_peer(message.process)
        elif kind is ReportNow:
            self._report_now()
        else:
            log.warning("worker %s: control ignored %s", self.postman.process, kind.__name__)

    def _report_now(self) -> None:
        """Two heartbeats with the SPUs' counts as they are now (the driver counts two after its question: one
        of the periodic beats may have been on its way). Their metric samples stay with the periodic beat,
        whose thread alone takes them. Never blocks: on a full queue the periodic beats answer."""
        for _ in range(2):
            try:
                self.postman.send(DRIVER, "cluster", heartbeat(self.postman.process, registry=self.stats), timeout=0.0)
            except Exception:  # noqa: BLE001 - a full or closing queue: the periodic beats answer
                return

    def _forget_peer(self, process: str) -> None:
        """A dead peer: drop what is queued for it, release senders blocked on it (ConnectionError, which
        the output router turns into a dropped batch), and refuse its key."""
        if process in (self.postman.process, DRIVER):
            return
        key = self.postman.keys.key_of(process)
        self.postman.endpoint.disconnect(process)
        if key is not None:
            self.postman.keys.revoke(key)
        # Info: the driver says why (declared dead, or given back idle); each SPU's sender logs what it lost.
        log.info("worker %s: peer %s is gone (the driver said so); disconnected", self.postman.process, process)


class HostActor(pykka.ThreadingActor):
    """Starts and stops this worker's SPUs; one JobContext per topology."""

    def __init__(self, postman: Postman, done: threading.Event, stop_timeout: float = SPU_STOP_TIMEOUT,
                 spus_stopped: Callable[[], None] = lambda: None, stats: StatsRegistry = STATS) -> None:
        super().__init__()
        self.postman = postman
        self.done = done
        self.stop_timeout = stop_timeout
        self._spus_stopped = spus_stopped  # their state is garbage now: the GC freezer releases it (gc_policy)
        self.jobs: dict[str, JobContext] = {}
        self.spus: dict[int, Any] = {}
        self.topology_of: dict[int, str] = {}
        self.submitted: dict[str, tuple[dict[str, UnitSpec | str], dict[str, Any]]] = {}
        """topology -> (unit name -> its spec, or why it cannot be built here; the job's config)."""
        self.tickers: dict[float, Ticker] = {}
        """tick_interval -> the Ticker of the jobs here that chose it (a job's SPUs tick as its config says)."""
        self.stats = stats
        """Where this worker's SPUs count (the process's STATS; each simulated worker has its own)."""

    def on_receive(self, message: Any) -> Any:
        try:
            kind = type(message)
            if kind is SubmitJob:
                self._submit(message)
            elif kind is StartSpu:
                self._start(message)
            elif kind is StopSpu:
                self._stop_spu(message)
            elif kind is PeerAddresses:
                for process, (address, public_key) in message.peers.items():
                    if process not in (self.postman.process, DRIVER):  # the driver's key came with our own
                        self.postman.admit_peer(process, address, public_key)
            elif kind is OwnerAt:  # the ack server: where a spout SPU of one of our jobs is
                job = self.jobs.get(message.topology)
                if job is not None:
                    job.acks.learn(message.owner, message.mailbox)
            elif kind is Shutdown:
                for spu_id in list(self.spus):
                    self._stop_spu(StopSpu(spu_id, 0), reply=False)
                self.done.set()
            else:
                log.warning("worker %s ignored %s", self.postman.process, kind.__name__)
        except Exception:
            log.exception("worker %s failed handling %s", self.postman.process, type(message).__name__)

    def on_stop(self) -> None:
        for ticker in self.tickers.values():
            ticker.stop()

    def _ticker(self, interval: float) -> Ticker:
        ticker = self.tickers.get(interval)
        if ticker is None:
            ticker = self.tickers[interval] = Ticker(SystemClock(), interval)
            ticker.start()
        return ticker

    def _submit(self, message: SubmitJob) -> None:
        """Resolve the job's unit classes once; a unit that cannot be built keeps its reason for StartSpu."""
        units: dict[str, UnitSpec | str] = {}
        for data in message.units:
            name = str(data.get("name"))
            try:
                units[name] = unit_from_wire(data)
            except Exception as exc:  # noqa: BLE001 - reported when an SPU of it is to start
                units[name] = f"{type(exc).__name__}: {exc}"
        self.submitted[message.topology] = (units, message.config, message.store_id)

    def _job(self, message: StartSpu, config_data: dict[str, Any], store_id: str) -> JobContext:
        """The job's context in this process, made at its first SPU. Under exactly_once an SPU starts here only
        once this process sees the driver's checkpoint store (store_refusal): checked again for each new
        identity (a restarted driver marks the store anew)."""
        job = self.jobs.get(message.topology)
        if job is None:
            config = config_from_wire(config_data)
            data_dir = config.data_dir / message.topology
            data_dir.mkdir(parents=True, exist_ok=True)
            job = JobContext(Topology(message.topology, ()), config, SystemClock(), data_dir,
                             acker=self.postman.remote(DRIVER, job_actor(message.topology, "acker")),
                             ticker=self._ticker(config.tick_interval),
                             checkpoints=AckBatcher(
                                 self.postman.remote(DRIVER, job_actor(message.topology, "checkpoints")),
                                 partial(self.spus_of, message.topology)),
                             process=self.postman.process, stats=self.stats)
            self.jobs[message.topology] = job
        if store_id and job.store_id != store_id:
            refusal = refusal_of(job, store_id, self.postman.process)
            if refusal is not None:
                raise _Unbuildable(refusal)
            job.store_id = store_id
        return job

    def spus_of(self, topology: str) -> int:
        """SPUs of `topology` this process runs (its AckBatcher's count: each acks every checkpoint)."""
        return sum(1 for name in list(self.topology_of.values()) if name == topology)

    def _start(self, message: StartSpu) -> None:
        """Start the SPU and tell the driver whether it runs: a unit that cannot start fails the job at once."""
        spu_id = message.spu.spu_id
        try:
            units, config, store_id = self.submitted.get(message.topology, ({}, {}, ""))
            spec = units.get(message.unit)
            if spec is None:
                raise LookupError(f"no unit {message.unit!r} of a submitted job {message.topology!r} here")
            if isinstance(spec, str):
                raise _Unbuildable(spec)
            job = self._job(message, config, store_id)
            self.topology_of[spu_id] = message.topology
            self.spus[spu_id] = self.postman.start_and_register(f"spu-{spu_id}", lambda: self.launch(message, spec, job))
            error = self.spus[spu_id].ask(StartCheck())
            if error is not None:
                self._stop_spu(StopSpu(spu_id, 0), reply=False)
                raise _Unbuildable(error)
        except Exception as exc:
            log.error("worker %s cannot start SPU %d of %r: %s", self.postman.process, spu_id, message.unit, exc)
            why = str(exc) if isinstance(exc, _Unbuildable) else f"{type(exc).__name__}: {exc}"
            self.postman.send(DRIVER, "cluster", SpuStarted(spu_id, os.getpid(), why))
            return
        self.postman.send(DRIVER, "cluster", SpuStarted(spu_id, os.getpid(), ""))

    def launch(self, message: StartSpu, spec: UnitSpec, job: JobContext) -> Any:
        """The SPU's actor, started (the driver-scale simulation starts a stand-in here instead)."""
        return start_spu(message.spu, spec, job)

    def stuck(self, spu_id: int) -> None:
        """SPU `spu_id` did not stop within stop_timeout: log why, dump every thread, exit the process."""
        log.critical("worker %s: SPU %d did not stop within %g s: its thread is stuck (every thread's stack "
                     "follows). The worker exits (code %d) so that the driver replaces its SPUs; a restart policy "
                     "brings it back.", self.postman.process, spu_id, self.stop_timeout, int(ExitCode.STUCK_SPU))
        for handler in logging.getLogger().handlers:
            handler.flush()
        faulthandler.dump_traceback(all_threads=True)  # to stderr, after the line above
        os._exit(int(ExitCode.STUCK_SPU))

    def _stop_spu(self, message: StopSpu, reply: bool = True) -> None:
        ref = self.spus.pop(message.spu_id, None)
        if ref is not None:
            try:
                ref.stop(block=True, timeout=self.stop_timeout)
            except pykka.ActorDeadError:
                pass
            except pykka.Timeout:
                self.stuck(message.spu_id)
            self.postman.unregister(f"spu-{message.spu_id}")
            self._spus_stopped()
        topology = self.topology_of.pop(message.spu_id, None)
        if topology is not None and topology not in self.topology_of.values():
            # The job's last SPU here stopped: its counts and settings go, before the driver hears
            # SpuStopped, so no later heartbeat carries them into a next job of the same name. Their
            # final values go to the driver first: a heartbeat may not have carried them yet.
            try:
                self.postman.send(DRIVER, "cluster", heartbeat(self.postman.process, topology, registry=self.stats),
                                  timeout=5.0)
            except Exception as exc:  # noqa: BLE001 - the driver may be gone at shutdown
                log.debug("worker %s: final counts of %r not sent: %r", self.postman.process, topology, exc)
            self.stats.forget_topology(topology)
            self.jobs.pop(topology, None)
        if reply:
            self.postman.send(DRIVER, "cluster", SpuStopped(message.spu_id, message.request_id))


def run_worker(driver: str, keys: WorkerKeys, name: str | None = None, bind_host: str | None = None,
               max_frame_bytes: int | None = None, driver_timeout: float = 30.0,
               connect_timeout: float = 60.0, port: int = 0, advertise: str | None = None,
               stop_timeout: float = SPU_STOP_TIMEOUT) -> int:
    """Join the driver at HOST:PORT and host SPUs until it says Shutdown (or the process is killed).

    Listens on `bind_host`:`port` (default: the interface that routes to the
    driver, loopback for a local driver; port 0 = any free one) and tells the
    driver and peers `advertise` (HOST[:PORT]; default: the bound address, a
    wildcard replaced by the route toward the driver). Accepts connections only from the
    driver's key and the peers' keys the driver announces, and commands only
    from the driver. Raises ConfigError for a HOST that does not resolve and
    DriverUnreachable when the driver has not answered within `connect_timeout`
    seconds (nothing listens there, a firewall, or keys it does not admit).
    Exits (3) when no DriverBeat came for `driver_timeout` seconds after that
    (the driver was killed or cut off): no orphans. Exits (4) when an SPU has not
    stopped `stop_timeout` seconds after the driver said StopSpu (SPU_STOP_TIMEOUT).
    """
    mark_worker()
    endpoint = driver_endpoint(driver)
    name = name or f"w{os.getpid()}"
    extra = {} if max_frame_bytes is None else {"max_frame_bytes": max_frame_bytes}
    driver_host = split_host_port(endpoint, "--driver")[0]
    if bind_host is None:
        bind_host = bind_host_toward(driver_host)
    postman = Postman(name, bind=f"tcp://{bind_host}:{port}", keys=keys.ring(name), advertise=advertise,
                      toward=driver_host, **extra)
    done = threading.Event()
    hosting = DriverLiveness()
    postman.register("control", WorkerControl(postman, hosting))
    collector = GcFreezer(time.monotonic())
    host = postman.start_and_register("host", lambda: HostActor.start(postman, done, stop_timeout,
                                                                      collector.release_soon))
    postman.connect(DRIVER, endpoint)
    postman.send(DRIVER, "cluster", WorkerHello(name, postman.address, os.getpid()))
    log.info("worker %s joining driver %s from %s", name, driver, postman.address)
    started = time.monotonic()
    beats = HeartbeatPacer(name, min(QUIET_HEARTBEAT, driver_timeout / 4), samples=SampleSender())
    gc_enter(JobConfig().gc_gen0_threshold)  # the policy a driver applies while its jobs run (job/gc_policy.py)
    code = int(ExitCode.NO_DRIVER)  # what an exception out of the loop (DriverUnreachable) exits with
    try:
        while not done.wait(HEARTBEAT_INTERVAL):
            collector.step(time.monotonic())
            if not hosting.heard:
                if time.monotonic() - started > connect_timeout:
                    raise DriverUnreachable(
                        f"worker {name}: no esault driver answered at {driver} within {connect_timeout:g} s "
                        "(--connect-timeout). Is `esault run --cluster static --listen` running there and is the "
                        "port reachable from here? Is --driver-key that driver's driver.key, and this worker's "
                        "public key among its --worker-keys? (The driver's log names a key it refused.)")
                continue  # no heartbeats before the driver admitted this worker: the hello is queued
            silent = time.monotonic() - hosting.driver_seen
            if silent > driver_timeout:
                log.error("worker %s: no word from the driver for %.1f s (driver timeout %.1f s): exiting",
                          name, silent, driver_timeout)
                return code
            beat = beats.next(time.monotonic())
            if beat is None:
                continue  # nothing new: a beat only as often as the driver needs to know this worker lives
            try:
                postman.send(DRIVER, "cluster", beat, timeout=5.0)
            except TimeoutError:
                log.warning("worker %s: driver not reading heartbeats", name)
        code = 0
    finally:
        _shut_down(name, code, host, postman)
    return 0


SHUTDOWN_GRACE = 5.0
"""Seconds a worker's actors get to stop once it leaves (the driver said Shutdown, or went silent); past it the
process exits anyway: a thread blocked sending to a driver that is gone must not keep it running."""


def _shut_down(name: str, code: int, host: Any, postman: Postman) -> None:
    """Stop this worker's actors and transport within SHUTDOWN_GRACE, else log every thread's stack and exit."""

    def stop() -> None:
        host.stop(block=True)
        pykka.ActorRegistry.stop_all()
        postman.close()

    stopper = threading.Thread(target=stop, name="esault-worker-stop", daemon=True)
    stopper.start()
    stopper.join(SHUTDOWN_GRACE)
    if not stopper.is_alive():
        return
    log.error("worker %s: its SPUs did not stop within %g s of leaving (threads blocked on a peer that is gone; "
              "every thread's stack follows): exiting (code %d) anyway", name, SHUTDOWN_GRACE, code)
    for handler in logging.getLogger().handlers:
        handler.flush()
    faulthandler.dump_traceback(all_threads=True)
    os._exit(code)
