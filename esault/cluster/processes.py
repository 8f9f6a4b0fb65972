"""The driver's side of worker processes: who is there, what they report, where SPUs go.

Spouts run in the driver by default (their replay state then outlives any
worker); a bolt runs in a worker. A unit's `placement` (or its class's
`esault_placement`) says otherwise: the Spark sink stays in the driver (one
JVM, next to the driver's Spark SQL), a spout with placement="worker" reads
its partition next to the bolts it feeds. Workers are chosen by fewest SPUs.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Iterable, NamedTuple, Sequence

import pykka

from esault.clock import SystemClock
from esault.cluster.enrollment import DEFAULT_MAX_ENROLLMENTS, Enrollments
from esault.cluster.inprocess import InProcessLauncher
from esault.cluster.placement import Placement
from esault.cluster.postman import Postman
from esault.cluster.two_phase import in_two_phases
from esault.cluster.unit_wire import check_sendable, config_to_wire, unit_to_wire
from esault.dsl.topology import Grouping, Topology, UnitSpec
from esault.errors import NoWorkerLeft, ResourceError, UnitStartError, WorkerLost
from esault.metrics import registry as metrics
from esault.metrics.forwarded import FORWARDED, ForwardedSamples
from esault.metrics.partition_status import checked_rows
from esault.metrics.stats import COUNTERS, GAUGES, SpuStats
from esault.datapath.context import JobContext
from esault.messages.cluster import (
    DriverBeat,
    EnrollRequest,
    PeerAddresses,
    PeerGone,
    SavepointReply,
    SavepointRequest,
    Shutdown,
    SpuStarted,
    SpuStopped,
    StartSpu,
    StatusReply,
    StatusRequest,
    StopSpu,
    SubmitJob,
    WorkerHeartbeat,
    WorkerHello,
)
from esault.messages.control import SpuConfig
from esault.messages.data import Tick
from esault.cluster.credentials import WorkerKeys
from esault.cluster.exit_watch import WorkerProcessExited, watch_exit
from esault.cluster.forker import ForkedProcess, ForkerUnavailable, child_env, shared_forker
from esault.transport.keys import KeyPair
from esault.transport.trust import Role
from esault.cluster.worker import HEARTBEAT_INTERVAL
from esault.datapath.ticker import Ticker
from esault.transport.endpoint import RemoteMailbox
from esault.transport.heartbeat import HeartbeatMonitor
from esault.datapath.load_feed import REMOTE_LOADS, tag_load_rows

log = logging.getLogger("esault.cluster")


REPORTED_COUNTS = frozenset(COUNTERS + GAUGES)
"""The SpuStats fields a worker's heartbeat may set: never the SPU's identity, never another attribute."""


class WorkerRegistry:
    """Thread-safe record of the workers, their SPUs and their last reported counts."""

    def __init__(self, forwarded: ForwardedSamples = FORWARDED) -> None:
        self._lock = threading.Condition()
        self.forwarded = forwarded
        """Each worker's own low-rate metric samples from its heartbeats, served by the driver's /metrics."""
        self.workers: dict[str, str] = {}
        self.spus_on: dict[str, set[int]] = {}
        self.last_beat: dict[str, float] = {}
        self.beats: dict[str, int] = {}  # heartbeats received per worker
        self.stats: dict[tuple[str, str, int], SpuStats] = {}
        self._stopped: dict[int, tuple[threading.Event, str]] = {}  # stop request -> (its answer, its worker)
        self._started: dict[int, SpuStarted | None] = {}  # spu id -> the worker's answer, None until it came
        self.pids: dict[str, int] = {}
        self.joined_at: dict[str, float] = {}  # time.time() of each worker's (latest) hello
        self.lost: list[str] = []  # workers declared dead, in order
        self.deaths: list[str] = []
        """Why each worker was declared dead ("ray-2 missed its heartbeats"), newest last, the last 100: a
        status view and a failed test say what the driver saw, not only that a worker went."""
        self.leaving: set[str] = set()
        """Workers told to exit (the cluster shuts down): the driver stops beating them, so no beat waits in
        its queue for a process that is gone (closing the transport would wait out its linger for it), and
        their silence is no death."""
        self.ask_report: Callable[[str], None] | None = None
        """Asks one worker for its counts now (a ReportNow): set by the cluster that holds the transport."""
        self.bad_counts = 0  # heartbeat counts dropped: not a counter or gauge name, or not a count
        self._partitions_warned: dict[str, float] = {}  # worker -> when a malformed partition row was last logged

    def joined(self, process: str, address: str) -> None:
        """`process` joined (again, if it was lost: a new incarnation under the same name, with no SPUs)."""
        with self._lock:
            self.leaving.discard(process)
            if process in self.lost:
                self.lost.remove(process)
            self.workers[process] = address
            self.joined_at[process] = time.time()
            self.spus_on.setdefault(process, set())
            self.last_beat[process] = time.monotonic()
            self._lock.notify_all()

    def wait_for(self, count: int, timeout: float) -> bool:
        with self._lock:
            return self._lock.wait_for(lambda: len(self.workers) >= count, timeout)

    def heartbeat(self, beat: WorkerHeartbeat) -> None:
        with self._lock:
            self.last_beat[beat.process] = time.monotonic()
            self.beats[beat.process] = self.beats.get(beat.process, 0) + 1
            self.forwarded.update(beat.process, beat.samples)
            partitions = {(topology, unit, spu): rows for topology, unit, spu, rows in beat.partitions}
            for topology, unit, spu, counts in beat.stats:
                stats = self.stats.get((topology, unit, spu))
                if stats is None:
                    stats = self.stats[(topology, unit, spu)] = SpuStats(topology, unit, spu)
                for name, value in counts.items():
                    if name in REPORTED_COUNTS and type(value) is int and value >= 0:
                        setattr(stats, name, value)
                    else:  # a frame names no attribute of ours: a count it cannot be is dropped, the rest kept
                        self.bad_counts += 1
                self._take_partitions(beat.process, stats, partitions.get((topology, unit, spu)))
            self._lock.notify_all()

    def _take_partitions(self, process: str, stats: SpuStats, report: Any) -> None:
        """A source SPU's partition rows, checked (caller holds the lock): malformed ones are dropped, counted in
        bad_counts and warned of, at most once a minute per worker; none reported means none to show."""
        if report is None:
            stats.partitions = None
            return
        rows, dropped = checked_rows(report)
        stats.partitions = rows
        if not dropped:
            return
        self.bad_counts += dropped
        now = time.monotonic()
        if now >= self._partitions_warned.get(process, -math.inf) + 60.0:
            self._partitions_warned[process] = now
            log.warning("worker %r: %d malformed partition row(s) of SPU %d (%r) dropped from its heartbeat "
                        "(a row is [topic, partition, offset, end offset or null, lag or null, idle]); %d kept",
                        process, dropped, stats.spu, stats.unit, len(rows))

    def await_fresh_reports(self, timeout: float) -> bool:
        """Block until every worker sent two heartbeats after this call (the first may have been on its way
        already): counts then include everything its SPUs did before the call. Each is asked for them now
        (ask_report), so this takes a round trip, not two heartbeat intervals. False on timeout."""
        with self._lock:
            since = {w: self.beats.get(w, 0) for w in self.workers if w not in self.leaving}
        ask = self.ask_report
        if ask is not None:
            for worker in since:
                try:
                    ask(worker)
                except Exception:  # noqa: BLE001 - a full or gone peer: its periodic beats, or its death, answer
                    pass
        with self._lock:
            return self._lock.wait_for(
                lambda: all(self.beats.get(w, 0) >= n + 2 for w, n in since.items() if w in self.workers), timeout)

    def live_stats(self) -> list[SpuStats]:
        """The last reported counts of the SPUs live workers host now (what the driver's /metrics shows for
        them); retired and dead SPUs keep their rows for totals (stats_of) but have no series."""
        with self._lock:
            live = set().union(*self.spus_on.values()) if self.spus_on else set()
            return [s for (_, _, spu), s in self.stats.items() if spu in live]

    def stats_of(self, topology: str) -> list[SpuStats]:
        with self._lock:
            return [s for (t, _, _), s in self.stats.items() if t == topology]

    def forget(self, topology: str) -> None:
        with self._lock:
            for key in [k for k in self.stats if k[0] == topology]:
                del self.stats[key]

    def remove(self, process: str, why: str = "") -> set[int]:
        """Forget a dead worker (`why` it was declared dead goes into `deaths`); returns the SPU ids it hosted."""
        with self._lock:
            if self.workers.pop(process, None) is not None:
                self.lost.append(process)
            self.deaths = (self.deaths + [f"{process} {why}".rstrip()])[-100:]
            self.last_beat.pop(process, None)
            self.forwarded.forget(process)
            for request in [r for r, (_, worker) in self._stopped.items() if worker == process]:
                self._stopped.pop(request)[0].set()  # its SPUs died with it: stopped
            self._lock.notify_all()  # a launcher waiting for this worker's answer gives up now
            return self.spus_on.pop(process, set())

    def pick(self, placement: Placement | None = None) -> str:
        """The worker a new SPU goes to: the placement's choice among the live workers (fewest SPUs first); the
        fewest-loaded one when none has room (a replacement never waits for capacity: it packs)."""
        live = self.counts()
        if not live:
            raise ResourceError("no worker process has joined the driver; start one with "
                                "`esault worker --driver HOST:PORT`")
        chosen = (placement or Placement()).choose(live)
        return chosen if chosen is not None else min(live, key=lambda w: (live[w], w))

    def counts(self) -> dict[str, int]:
        """Live workers (joined, not told to exit) -> the SPUs each hosts now."""
        with self._lock:
            return {w: len(self.spus_on[w]) for w in self.workers if w not in self.leaving}

    def rows(self) -> list[tuple[str, str, int, int | None, float]]:
        """Each joined worker as (name, address, SPUs it hosts, pid, time.time() of its hello), by name."""
        with self._lock:
            return [(w, a, len(self.spus_on.get(w, ())), self.pids.get(w), self.joined_at.get(w, time.time()))
                    for w, a in sorted(self.workers.items())]

    def released(self, process: str) -> None:
        """`process` was told to exit, given back idle: forgotten without being lost (its silence is no death,
        its late beats are ignored)."""
        with self._lock:
            self.leaving.add(process)
            self.workers.pop(process, None)
            self.last_beat.pop(process, None)
            self.spus_on.pop(process, None)
            self.forwarded.forget(process)
            self._lock.notify_all()

    def placed(self, process: str, spu: int) -> None:
        with self._lock:
            self.spus_on[process].add(spu)

    def host_of(self, spu: int, likely: str | None = None) -> str | None:
        """The live worker SPU `spu` was placed on (`likely` is looked at first), or None."""
        with self._lock:
            if likely is not None and spu in self.spus_on.get(likely, ()):
                return likely
            return next((w for w, spus in self.spus_on.items() if spu in spus), None)

    def removed(self, process: str, spu: int) -> None:
        with self._lock:
            self.spus_on.get(process, set()).discard(spu)

    def expect_start(self, spu_id: int) -> None:
        with self._lock:
            self._started[spu_id] = None

    def started(self, answer: SpuStarted) -> None:
        with self._lock:
            if answer.spu_id in self._started:
                self._started[answer.spu_id] = answer
                self._lock.notify_all()

    def wait_started(self, spu_id: int, timeout: float, worker: str) -> SpuStarted | None:
        """`worker`'s answer for `spu_id`; None if it did not come within `timeout` seconds.

        Raises WorkerLost as soon as `worker` is declared dead: nothing waits out the timeout for it."""
        with self._lock:
            self._lock.wait_for(lambda: self._started.get(spu_id) is not None or worker not in self.workers, timeout)
            answer = self._started.pop(spu_id, None)
            if answer is None and worker not in self.workers:
                raise WorkerLost(f"worker {worker} died before SPU {spu_id} started on it")
            return answer

    def expect_stop(self, request_id: int, worker: str) -> threading.Event:
        """An event set when `worker` confirms stop request `request_id`, or is declared dead (its SPUs died
        with it): nothing waits out the stop timeout for a dead worker."""
        with self._lock:
            event = threading.Event()
            self._stopped[request_id] = (event, worker)
            if worker not in self.workers:
                event.set()
            return event

    def stopped(self, request_id: int) -> None:
        with self._lock:
            event, _ = self._stopped.pop(request_id, (None, ""))
        if event is not None:
            event.set()


class ClusterActor(pykka.ThreadingActor):
    """Registered as "cluster" in the driver: hellos, heartbeats, stop confirmations."""

    def __init__(self, postman: Postman, registry: WorkerRegistry,
                 jobs: Callable[[], dict[str, Any]] = dict, heartbeat_timeout: float = 10.0,
                 capacity: Callable[[], Any] = lambda: None,
                 max_enrollments: int = DEFAULT_MAX_ENROLLMENTS) -> None:
        super().__init__()
        self._capacity = capacity
        """The capacity keeper (esault.cluster.capacity), once the cluster made one: ticked here, told of each
        join and death."""
        self.postman = postman
        self.registry = registry
        self.jobs = jobs
        misses = max(1, round(heartbeat_timeout / HEARTBEAT_INTERVAL))
        self.hearts = HeartbeatMonitor(SystemClock(), HEARTBEAT_INTERVAL, misses)
        self.ticker = Ticker(SystemClock(), HEARTBEAT_INTERVAL / 2)
        self._quiet_beats = max(1, round(min(1.0, heartbeat_timeout / 4) / (HEARTBEAT_INTERVAL / 2)))
        """Ticks between DriverBeats while they carry no loads: a worker needs only to hear, well within its
        driver timeout, that the driver lives (every tick, they were most of an idle worker's CPU)."""
        self._ticks = 0
        self.lost: list[str] = []
        self._fenced: set[str] = set()
        self._ended_unjoined: set[tuple[str, int]] = set()  # local workers seen to end before their hello
        self._status_clients: list[str] = []  # status clients and enrolling replicas connected to, newest last
        self.enrollments = Enrollments(postman.keys, max_enrollments)

    def on_start(self) -> None:
        self.ticker.subscribe(self.actor_ref)
        self.ticker.start()

    def on_stop(self) -> None:
        self.ticker.stop()

    def _beat_workers(self) -> None:
        """Tell every worker the driver lives, every tick (each exits after its driver timeout without one),
        with the TAG-grouped units' SPU loads the workers reported (their senders weigh SPUs by speed)."""
        loads = self._tag_loads()
        REMOTE_LOADS.replace(loads)  # for the senders in the driver (spouts), like a worker does on the beat
        self._ticks += 1
        if not loads and self._ticks % self._quiet_beats:
            return
        leaving = self.registry.leaving
        # Encoded once for every worker (the loads grow with the TAG units' SPUs); a full or gone peer is
        # skipped: its own heartbeats tell.
        try:
            self.postman.send_many([w for w in list(self.registry.workers) if w not in leaving], "control",
                                   DriverBeat(loads), timeout=0.0)
        except RuntimeError:  # the transport is closing: the cluster shuts down
            pass

    def _tag_loads(self) -> list:
        units = {(name, spec.name) for name, job in self.jobs().items() if not job.stopped
                 for spec in job.topology.units if any(i.grouping is Grouping.TAG for i in spec.inputs)}
        return tag_load_rows(self.registry.live_stats(), units) if units else []

    def _check_hearts(self) -> None:
        for worker in self.hearts.dead():
            if worker in self.registry.leaving:  # told to exit: its silence is expected
                self.hearts.forget(worker)
                continue
            self._declare_dead(worker, "missed its heartbeats")

    def _process_exited(self, ended: WorkerProcessExited) -> None:
        """A local worker process ended: declared dead at once, unless it was told to exit or is an older
        incarnation of a name that joined again."""
        if ended.process not in self.registry.workers:
            if ended.process in self.registry.leaving:  # given back idle: its exit ends its connection
                self.postman.endpoint.disconnect(ended.process)
                return
            if (capacity := self._capacity()) is not None:  # asked for and dead before its hello
                capacity.lost(ended.process)
            if len(self._ended_unjoined) < 1000:  # its hello may still be on its way: see _admit
                self._ended_unjoined.add((ended.process, ended.pid))
            return
        if ended.process in self.registry.leaving or self.registry.pids.get(ended.process) != ended.pid:
            return
        code = "an unknown code" if ended.code is None else (
            f"signal {-ended.code}" if ended.code < 0 else f"code {ended.code}")
        self._declare_dead(ended.process, f"(pid {ended.pid}) exited with {code}")

    def _declare_dead(self, worker: str, why: str) -> None:
        """Forget `worker`, tell the survivors, and have every job replace the SPUs it hosted."""
        self.hearts.forget(worker)
        lost = self.registry.remove(worker, why)
        self.lost.append(worker)
        metrics.set_workers(len(self.registry.workers))
        log.error("worker %s %s: declared dead; replacing its %d SPU(s) %s", worker, why, len(lost), sorted(lost))
        try:
            self.postman.endpoint.disconnect(worker)
        except Exception:
            pass
        for survivor in list(self.registry.workers):  # no survivor may stay blocked sending to it
            try:
                self.postman.send(survivor, "control", PeerGone(worker), timeout=1.0)
            except Exception:  # noqa: BLE001 - that one's own heartbeats tell
                pass
        if (capacity := self._capacity()) is not None:
            capacity.lost(worker)
        for job in self.jobs().values():
            if not job.stopped:
                job.replace_lost(lost)

    def _admit(self, hello: WorkerHello) -> None:
        """A worker joins. A worker process sends one hello in its life, and the postman delivered this one
        only because its sender's Curve key is the one bound to that name: a hello under a name that is
        connected comes from a new incarnation (restarted after a crash), so the old one is gone. It is
        retired at once, as if it had missed its heartbeats (its SPUs are replaced), and the new one joins;
        a name declared dead before may join again the same way."""
        if hello.process in self.registry.workers:
            old = self.registry.pids.get(hello.process)
            self._declare_dead(hello.process, f"(pid {old}) came back as a new process (pid {hello.pid}, "
                                              f"{hello.address})")
        if hello.process in self.lost:  # its beats count again: they come from the new incarnation
            self.lost = [w for w in self.lost if w != hello.process]
            self._fenced.discard(hello.process)
        self.postman.connect(hello.process, hello.address)
        # Every process's address and key: a worker admits exactly these keys besides the driver's. The new
        # worker is told first, before it can be picked for an SPU: its host handles the driver's messages in
        # order, so it admits its peers' keys before any SPU of its own starts and a peer sends to it (a
        # connection its Curve handshake refused once would not come back).
        keys = self.postman.keys
        addresses = {"driver": self.postman.address, **self.registry.workers, hello.process: hello.address}
        peers = {name: (address, (keys.key_of(name) or b"").decode()) for name, address in addresses.items()}
        self.postman.send(hello.process, "host", PeerAddresses(peers))
        self.registry.joined(hello.process, hello.address)
        self.registry.pids[hello.process] = hello.pid
        self.hearts.beat(hello.process)
        metrics.set_workers(len(self.registry.workers))
        # The others learn only the newcomer (they know each other already): one small frame, encoded once,
        # not every peer's address to every worker at each join (quadratic in workers per join).
        others = [w for w in self.registry.workers if w != hello.process]
        for worker, exc in self.postman.send_many(others, "host", PeerAddresses({hello.process: peers[hello.process]})):
            log.warning("worker %s not told of %s: %r", worker, hello.process, exc)
        log.info("worker %s (pid %d) joined from %s", hello.process, hello.pid, hello.address)
        if (capacity := self._capacity()) is not None:
            capacity.joined(hello.process)
        if (hello.process, hello.pid) in self._ended_unjoined:  # it ended while its hello was on its way
            self._ended_unjoined.discard((hello.process, hello.pid))
            self._declare_dead(hello.process, f"(pid {hello.pid}) exited as it joined")

    def on_receive(self, message: Any) -> Any:
        kind = type(message)
        try:
            if kind is Tick:
                self._beat_workers()  # first: handling a death below may take a while
                self._check_hearts()
                if (capacity := self._capacity()) is not None:
                    capacity.tick()
            elif kind is WorkerHeartbeat:
                if message.process in self.registry.leaving and message.process not in self.registry.workers:
                    return None  # given back idle, on its way out: its last beats count for nothing
                if message.process in self.lost:
                    # Declared dead but alive (it was only slow): its SPUs were replaced, so fence it. It is
                    # disconnected and hears no DriverBeat any more, so it exits after its driver timeout.
                    if message.process not in self._fenced:
                        self._fenced.add(message.process)
                        log.error("worker %s beat after being declared dead: fenced (it exits after its driver "
                                  "timeout)", message.process)
                    return None
                self.hearts.beat(message.process)
                self.registry.heartbeat(message)
            elif kind is WorkerHello:
                self._admit(message)
            elif kind is WorkerProcessExited:
                self._process_exited(message)
            elif kind is SpuStarted:
                self.registry.started(message)
            elif kind is SpuStopped:
                self.registry.stopped(message.request_id)
            elif kind is SavepointRequest:
                self._savepoint(message)
            elif kind is StatusRequest:
                self._status(message)
            elif kind is EnrollRequest:
                self._enroll(message)
        except Exception:
            log.exception("cluster actor failed handling %s", kind.__name__)


    def _enroll(self, message: EnrollRequest) -> None:
        """A replica worker asks for a name and key pair of its own (esault.cluster.enrollment); the answer goes
        back inside the Curve session to the address it gave, which the driver then forgets."""
        process = message.reply_to.address.process
        self.postman.connect(process, message.address)
        self._status_clients.append(process)
        while len(self._status_clients) > 8:
            self.postman.endpoint.disconnect(self._status_clients.pop(0))
        try:
            message.reply_to.tell(self.enrollments.grant(message))
        except Exception as exc:  # noqa: BLE001 - the replica times out, says so, and is restarted
            log.warning("enrollment answer to %s not delivered: %r", message.address, exc)

    def _status(self, message: StatusRequest) -> None:
        """Answer on a thread of its own: a job's status asks its unit actors, which a rollback keeps busy
        while it waits for SPU answers that only this actor handles (asked here, they deadlocked until a
        timeout, and the heartbeats queued behind got every worker declared dead)."""
        process = message.reply_to.address.process
        self.postman.connect(process, message.address)
        self._status_clients.append(process)
        while len(self._status_clients) > 8:  # healthchecks call often: keep few connections
            self.postman.endpoint.disconnect(self._status_clients.pop(0))
        workers = dict(self.registry.workers)

        def answer() -> None:
            try:
                jobs = {name: job.status() for name, job in self.jobs().items() if not job.stopped}
                message.reply_to.tell(StatusReply(message.request_id, jobs, workers))
            except Exception:  # noqa: BLE001 - the client times out and says so
                log.exception("status request from %s not answered", process)

        threading.Thread(target=answer, name="esault-status", daemon=True).start()

    def _savepoint(self, message: SavepointRequest) -> None:
        """Take it on a thread of its own (it waits for every SPU), then answer the client."""
        process = message.reply_to.address.process
        self.postman.connect(process, message.address)
        job = self.jobs().get(message.topology)

        def take() -> None:
            epoch, error = None, ""
            try:
                if job is None or job.stopped:
                    raise LookupError(f"no running job {message.topology!r} here; running: "
                                      f"{sorted(n for n, j in self.jobs().items() if not j.stopped)}")
                epoch = job.savepoint(stop=message.stop, timeout=job.config.checkpoint_timeout + 10)
                if epoch is None:
                    error = "the savepoint failed (see the driver's log); the job goes on"
            except Exception as exc:  # noqa: BLE001 - told to the client
                error = f"{type(exc).__name__}: {exc}"
            try:
                message.reply_to.tell(SavepointReply(message.request_id, epoch, error))
            except Exception as exc:  # noqa: BLE001 - the client left
                log.warning("savepoint reply not delivered: %r", exc)

        threading.Thread(target=take, name="esault-savepoint", daemon=True).start()


class _Starting(NamedTuple):
    """A StartSpu sent to `worker`, its answer not awaited yet."""

    worker: str
    spu_id: int
    unit: str


class ProcessLauncher:
    """SpuLauncher that places each unit's SPUs where UnitSpec.where says: the driver or a worker."""

    def __init__(self, postman: Postman, registry: WorkerRegistry, stop_timeout: float = 60.0,
                 start_timeout: float = 30.0, capacity: Any = None) -> None:
        self.capacity = capacity
        """The cluster's capacity keeper (esault.cluster.capacity): its placement picks workers, jobs reserve
        room with it before they start SPUs; None picks the fewest-loaded worker."""
        self.start_timeout = start_timeout
        self.postman = postman
        self.registry = registry
        self.local = InProcessLauncher()
        self.stop_timeout = stop_timeout
        self._requests = itertools.count(1)
        self._where: dict[int, str] = {}
        self._latest: dict[tuple[str, str], UnitSpec] = {}  # (job, unit) -> the spec its SPUs start with now
        # What each worker incarnation, (name, address), was sent: a restarted worker (new address) has nothing.
        self._sent: dict[tuple[tuple[str, str | None], str, str], UnitSpec] = {}

    def check_topology(self, topology: Topology) -> None:
        """Before anything starts: every unit can be sent to the workers (SubmitJob carries them all)."""
        for spec in topology.units:
            if not topology.chained(spec.name):
                check_sendable(spec)

    def start_spu(self, spec: UnitSpec, cfg: SpuConfig, job: JobContext, worker: str | None = None) -> Any:
        """Start an SPU where its unit runs: the driver, the worker named, or the least loaded worker."""
        return self._await_start(self._send_start(spec, cfg, job, worker))

    def start_spus(self, starts: Sequence[tuple[UnitSpec, SpuConfig, JobContext, str | None]]) -> list[Any]:
        """Start several SPUs at once, each as start_spu would: every StartSpu goes out before any answer is
        awaited, so N SPUs cost one round trip to their workers, not N (a rollback's relaunch of a whole job,
        a job's start). Each item of the result: the SPU's mailbox, or the exception its start raised."""
        return in_two_phases(starts, lambda start: self._send_start(*start), self._await_start)

    def _send_start(self, spec: UnitSpec, cfg: SpuConfig, job: JobContext, worker: str | None) -> Any:
        """start_spu's first half: an SPU in the driver, started; or its StartSpu sent to a worker, and the
        (worker, SPU id) whose answer _await_start waits for."""
        if spec.where == "driver":
            if worker is not None:
                raise ResourceError(f"unit {spec.name!r} runs in the driver (placement='driver'); its SPUs "
                                    "cannot move to a worker")
            # Registered as soon as it starts, but its open() is awaited outside the postman's lock: the
            # transport's I/O thread takes that lock for every message, the workers' heartbeats and the
            # driver's beats among them, so user code must never run while it is held (issue 26).
            name = f"spu-{cfg.spu_id}"
            ref = self.postman.start_and_register(name, lambda: self.local.launch(spec, cfg, job))
            try:
                self.local.await_start(ref)
            except BaseException:
                self.postman.unregister(name)
                raise
            return ref
        if worker is None:
            if not self.registry.workers and self.registry.lost:
                driver = self.postman.address.replace("tcp://", "")
                raise NoWorkerLeft(
                    f"unit {spec.name!r} has no worker to run on: every worker process was lost "
                    f"({', '.join(self.registry.lost)}) and none is left to take SPU {cfg.spu_id}, so its tuples "
                    f"cannot be processed; start workers (`esault worker --driver {driver}`) or run the job again")
            worker = self.registry.pick(None if self.capacity is None else self.capacity.placement)
        elif worker not in self.registry.workers:
            raise ResourceError(f"no worker {worker!r} has joined the driver; workers: "
                                f"{', '.join(sorted(self.registry.workers)) or 'none'}")
        self.registry.placed(worker, cfg.spu_id)
        self._where[cfg.spu_id] = worker
        self.registry.expect_start(cfg.spu_id)
        # The job's units, once per worker process, before its first StartSpu. Keyed by address too: a
        # worker restarted under the same name (a new process, a new port) has none of them.
        incarnation = (worker, self.registry.workers.get(worker))
        self._latest[(job.name, spec.name)] = spec
        if self._sent.get((incarnation, job.name, spec.name)) is not spec:
            # The job's first SPU there, or this unit's code changed since (assign_logic): its units are replaced.
            self.postman.send(worker, "host", self._submission(spec, job))
            for name, sent in self._units_of(spec, job).items():
                self._sent[(incarnation, job.name, name)] = sent
        self.postman.send(worker, "host", StartSpu(job.name, spec.name, cfg))
        return _Starting(worker, cfg.spu_id, spec.name)

    def _await_start(self, pending: Any) -> Any:
        """start_spu's second half: the worker's answer to the StartSpu _send_start sent."""
        if not isinstance(pending, _Starting):
            return pending  # started in the driver
        worker, spu_id, unit = pending
        try:
            answer = self.registry.wait_started(spu_id, self.start_timeout, worker)
        except WorkerLost:
            self._where.pop(spu_id, None)
            raise
        if answer is None or answer.error:
            self.registry.removed(worker, spu_id)
            self._where.pop(spu_id, None)
            why = answer.error if answer else f"no answer within {self.start_timeout}s (is the worker alive?)"
            raise UnitStartError(f"unit {unit!r} cannot start on worker {worker}: {why}")
        return self.postman.remote(worker, f"spu-{spu_id}")

    def _units_of(self, spec: UnitSpec, job: JobContext) -> dict[str, UnitSpec]:
        """Every unit of the job that has SPUs of its own (chained ones travel inside their head), each in
        its latest code."""
        topology = job.topology
        units = {u.name: self._latest.get((job.name, u.name), u) for u in topology.units
                 if not topology.chained(u.name)}
        units[spec.name] = spec
        return units

    def _submission(self, spec: UnitSpec, job: JobContext) -> SubmitJob:
        units = self._units_of(spec, job)
        return SubmitJob(job.name, [unit_to_wire(u) for u in units.values()], config_to_wire(job.config),
                         job.store_id)

    def stop_spus(self, mailboxes: Iterable[Any]) -> None:
        """Stop several SPUs, each as stop_spu(block=True) would, every StopSpu sent before any confirmation is
        awaited (a rollback discards every SPU of the job: one round trip, not one an SPU)."""
        waits = []
        for mailbox in mailboxes:
            try:
                waits.append(self._send_stop(mailbox))
            except Exception as exc:  # noqa: BLE001 - this one's worker is going; the others are stopped
                log.warning("SPU %s not stopped cleanly: %r", getattr(mailbox, "address", mailbox), exc)
        for wait in waits:
            if wait is not None:
                wait()

    def stop_spu(self, mailbox: Any, block: bool) -> None:
        wait = self._send_stop(mailbox, block)
        if block and wait is not None:
            wait()

    def _send_stop(self, mailbox: Any, block: bool = True) -> Callable[[], None] | None:
        """stop_spu's first half: a local SPU stopped; or the StopSpu sent, and what waits for its worker's
        confirmation (None: nothing to wait for)."""
        if not isinstance(mailbox, RemoteMailbox):
            name = self.postman._names.get(mailbox.actor_urn)
            self.local.stop_spu(mailbox, block)
            if name:
                self.postman.unregister(name)
            return None
        spu_id = int(mailbox.address.actor.split("-", 1)[1])
        worker = mailbox.address.process
        if worker not in self.registry.workers:  # declared dead: the SPU died with it, nobody to tell
            self.registry.removed(worker, spu_id)
            return None
        request = next(self._requests)
        done = self.registry.expect_stop(request, worker)
        self.registry.removed(worker, spu_id)
        try:
            self.postman.send(worker, "host", StopSpu(spu_id, request))
        except Exception:
            if worker in self.registry.workers:
                raise
            return None  # declared dead meanwhile: the SPU is gone with its process

        def confirmed() -> None:
            if not done.wait(self.stop_timeout):
                if worker in self.registry.workers:
                    log.warning("worker %s did not confirm stopping SPU %d within %ss", worker, spu_id,
                                self.stop_timeout)
                else:
                    log.warning("worker %s died before it confirmed stopping SPU %d: the SPU went with it",
                                worker, spu_id)
        return confirmed

    def worker_of(self, spu_id: int) -> str | None:
        return self._where.get(spu_id)

    def cluster_view(self) -> dict[str, Any]:
        """The workers (provider, node, age, SPUs), the requests for workers pending and the latest declined
        one: what `esault status`, the REST API and the web page show of capacity."""
        capacity = self.capacity
        view = capacity.view() if capacity is not None else {"provider": "static", "spus_per_worker": None,
                                                             "pending": [], "declined": None}
        now = time.time()
        rows = []
        for worker, address, spus, pid, joined in self.registry.rows():
            origin = capacity.origin(worker) if capacity is not None else None
            host = address.replace("tcp://", "").rsplit(":", 1)[0]
            rows.append({"worker": worker, "address": address, "pid": pid, "spus": spus,
                         "provider": origin.provider if origin else view["provider"],
                         "node": origin.node if origin else host,
                         "age_s": round(now - (origin.started_at if origin else joined), 1)})
        return {**view, "workers": rows}

    def last_beat_of(self, spu_id: int) -> float:
        """time.monotonic() of the last heartbeat from the worker hosting SPU `spu_id`: inf for an SPU in
        the driver (always alive), -inf when its worker is gone (declared dead)."""
        worker = self._where.get(spu_id)
        if worker is None:
            return math.inf
        return self.registry.last_beat.get(worker, -math.inf)

    def host_of(self, spu_id: int) -> dict[str, Any]:
        """Where SPU `spu_id` runs: {"worker": process name, "pid", "address"} (the driver for local SPUs)."""
        worker = self._where.get(spu_id)
        if worker is None:
            return {"worker": "driver", "pid": os.getpid(), "address": self.postman.address}
        return {"worker": worker, "pid": self.registry.pids.get(worker), "address": self.registry.workers.get(worker)}


def tell_workers_to_exit(postman: Postman, registry: WorkerRegistry) -> set[str]:
    """Send every joined worker a Shutdown, marked leaving first (no more beats for it, its silence no death);
    returns their names."""
    joined = set(registry.workers)
    registry.leaving.update(joined)
    for worker in joined:
        try:
            postman.send(worker, "host", Shutdown(), timeout=2.0)
        except Exception:  # noqa: BLE001 - a full or gone peer exits after its driver timeout anyway
            pass
    return joined


class LocalProcessPool:
    """Starts `esault worker` processes on this machine and waits until they joined.

    `fork` (default): each is forked by this driver's warm zygote (cluster/forker.py), ready in milliseconds;
    a fresh interpreter when the zygote is unavailable, or always with fork=False."""

    def __init__(self, postman: Postman, registry: WorkerRegistry, count: int, join_timeout: float = 60.0,
                 driver_timeout: float = 10.0, fork: bool = True,
                 on_exit: Callable[[WorkerProcessExited], None] | None = None) -> None:
        self.postman = postman
        self.registry = registry
        self.driver_timeout = driver_timeout
        self.on_exit = on_exit  # each process's end, as it happens (the cluster actor declares it dead)
        self.forker = shared_forker() if fork else None
        self.processes: list[subprocess.Popen | ForkedProcess] = []
        self.names: list[str] = []  # the worker name of each process, in the same order
        try:
            for i in range(count):
                self.spawn(f"w{i + 1}")
            joined = registry.wait_for(count, join_timeout)
        except BaseException:  # a Ctrl-C while they start: none may outlive the driver by its timeout
            self.shutdown(timeout=5.0)
            raise
        if not joined:
            self.shutdown()
            raise ResourceError(
                f"only {len(registry.workers)} of {count} worker processes joined within {join_timeout}s; "
                "see their output above"
            )

    def spawn(self, name: str) -> subprocess.Popen | ForkedProcess:
        """Start one more worker process named `name` (it joins on its own; wait with the registry)."""
        driver = self.postman.address.replace("tcp://", "")
        # A fresh key pair per worker, handed over on its stdin: only this driver knows it.
        pair = KeyPair.generate()
        self.postman.keys.admit(pair.public, Role.WORKER)
        keys = WorkerKeys(pair, self.postman.keys.own.public).to_json() + "\n"
        argv = ["worker", "--driver", driver, "--name", name, "--keys-stdin",
                "--driver-timeout", str(self.driver_timeout),
                # the driver listens already: silence from the start is a dead driver too
                "--connect-timeout", str(self.driver_timeout)]
        process: subprocess.Popen | ForkedProcess | None = None
        if self.forker is not None:
            try:
                process = self.forker.start(argv, keys)  # in its own session, as below
            except ForkerUnavailable as exc:
                log.debug("worker %s starts as a fresh interpreter: %s", name, exc)
        if process is None:
            process = self._fresh_interpreter(argv, keys)
        self.processes.append(process)
        self.names.append(name)
        if self.on_exit is not None:
            report, pid = self.on_exit, process.pid
            watch_exit(process, lambda code: report(WorkerProcessExited(name, pid, code)))
        return process

    @staticmethod
    def _fresh_interpreter(argv: list[str], keys: str) -> subprocess.Popen:
        process = subprocess.Popen([sys.executable, "-m", "esault.cli", *argv], env=child_env(), stdin=subprocess.PIPE,
                                   text=True,
                                   # its own session: a Ctrl-C at the terminal reaches the driver only, which
                                   # then stops the job in order and shuts its workers down itself
                                   start_new_session=True)
        try:
            process.stdin.write(keys)  # type: ignore[union-attr]
            process.stdin.close()  # type: ignore[union-attr]
        except OSError:  # it died at once; the join wait reports it
            pass
        return process

    def shutdown(self, timeout: float = 20.0) -> None:
        joined = tell_workers_to_exit(self.postman, self.registry)
        for name, process in zip(self.names, self.processes):
            if name not in joined and process.poll() is None:  # still starting: nobody could tell it to stop
                process.terminate()
        deadline = time.monotonic() + timeout
        for process in self.processes:
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("worker process %d did not exit within %.0f s of its Shutdown: killed", process.pid,
                            timeout)
                process.kill()
                try:
                    process.wait(5)
                except subprocess.TimeoutExpired:  # a forked one's end is reported by its zygote: not this time
                    log.warning("worker process %d: no exit seen 5 s after SIGKILL", process.pid)
