"""RayProvider: esault workers as Ray actors, placed by Ray (and its autoscaler) on the nodes of a Ray cluster.

Ray decides only where a worker's process runs and tells when it ends; everything else is esault's own: the
worker joins the driver by its hello over CurveZMQ with a key pair the driver made for it alone, and the data
path never touches Ray. `request` returns at once (the actor is placed, a node added if need be, while the
driver goes on); the worker's end, however it comes, reaches `on_exit` as a WorkerProcessExited as soon as Ray
reports the actor dead (a killed node: when the GCS declares it dead), before its heartbeats would be missed.
"""

from __future__ import annotations

import logging
import math
import queue
import socket
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

from esault.cluster.credentials import WorkerKeys
from esault.cluster.exit_watch import WorkerProcessExited
from esault.cluster.postman import Postman
from esault.cluster.providers.base import WorkerOrigin, WorkerProvider, WorkerRequest
from esault.cluster.providers.ray_head import HEAD_TIMEOUT, PROBE_INTERVAL, HeadWatch, probe_gcs
from esault.cluster.providers.ray_worker import ACTOR_CONCURRENCY, RayWorker
from esault.errors import ConfigError, ResourceError
from esault.transport.keys import KeyPair
from esault.transport.trust import Role

log = logging.getLogger("esault.ray")

PROBE_TIMEOUT = 5.0
"""Seconds a Ray address gets to accept a TCP connection before the provider refuses it (ray.init itself
would retry an unreachable GCS for minutes)."""
RELEASE_GRACE = 10.0
"""Seconds a released worker gets to end on its own (the driver's Shutdown; its SPUs stop within 5 s) before
its actor is killed."""


@dataclass
class _Placed:
    """One actor this provider made, and what Ray told of it so far."""

    name: str
    actor: Any
    key: bytes
    asked_at: float
    node: str | None = None
    ip: str | None = None
    pid: int = 0
    run: Any = None
    """The ObjectRef of its run(): ready when the worker ended, an error when the actor died."""
    released: bool = False
    ended: bool = False
    timers: list[threading.Timer] = field(default_factory=list)


class RayProvider(WorkerProvider):
    """Starts one Ray actor per esault worker on the Ray cluster at `address`.

    address: "auto" (the cluster of this node, or RAY_ADDRESS), a GCS "HOST:PORT", or "ray://HOST:PORT" (a Ray
    client server). Each actor asks Ray for `num_cpus` CPUs, `memory` bytes and `resources` (custom resources,
    e.g. {"esault": 1}), on a node matching `label_selector` if given ({"zone": "a"}: Ray 2.60's node labels);
    Ray's autoscaler adds nodes for actors that fit nowhere. `max_workers` caps the workers this provider asks
    for (None: as many as Ray places). `on_exit` is told each worker's end, on a provider thread.
    `on_head_lost` is told, once, why the Ray head is gone when it has not answered for `head_timeout`
    seconds (ray_head.py): from then on no worker is asked of Ray and nothing more is sent to it.
    """

    kind = "ray"

    def __init__(self, postman: Postman, address: str, *, num_cpus: float = 1.0, memory: int | None = None,
                 resources: dict[str, float] | None = None, label_selector: dict[str, str] | None = None,
                 max_workers: int | None = None, on_exit: Callable[[WorkerProcessExited], None] | None = None,
                 driver_timeout: float = 10.0, connect_timeout: float = 60.0, head_timeout: float = HEAD_TIMEOUT,
                 on_head_lost: Callable[[str], None] | None = None) -> None:
        self.postman = postman
        self.address = address
        self.options = _actor_options(num_cpus, memory, resources, label_selector)
        if max_workers is not None and (type(max_workers) is not int or max_workers < 1):
            raise ConfigError(f"RayProvider(max_workers=...) must be a whole number of workers (1 or more) or "
                              f"None for as many as Ray places, got {max_workers!r}")
        self.max_workers = max_workers
        self.on_exit = on_exit
        self.driver_timeout = driver_timeout
        self.connect_timeout = connect_timeout
        self._lock = threading.Lock()
        self._placed: dict[str, _Placed] = {}
        self._pids: dict[str, int] = {}  # each worker's pid once its actor told it, until its end is reported
        self._events: queue.SimpleQueue[tuple[str, Any, Any] | None] = queue.SimpleQueue()
        self._prefix = f"esault-{uuid.uuid4().hex[:8]}"  # actor names: unique among drivers on one cluster
        self._closed = False
        if isinstance(head_timeout, bool) or not isinstance(head_timeout, (int, float)) or not head_timeout > 0:
            raise ConfigError(f"RayProvider(head_timeout=...) must be seconds > 0 (how long the Ray head may stay "
                              f"silent before the jobs on it fail), got {head_timeout!r}")
        self.on_head_lost = on_head_lost
        self.head_lost: str | None = None
        """Why the Ray head is considered gone (None while it answers): no Ray call is made any more."""
        self._ray, self._owns_ray = _connect(address)
        self.head_address = _head_address(self._ray, address)
        self._actor_class = self._ray.remote(max_restarts=0, max_task_retries=0,
                                             max_concurrency=ACTOR_CONCURRENCY)(RayWorker)
        self._watcher = threading.Thread(target=self._watch, name="esault-ray-watch", daemon=True)
        self._watcher.start()
        self._head_watch = HeadWatch(float(head_timeout), time.monotonic())
        self._stopping = threading.Event()
        self._head_thread = threading.Thread(target=self._watch_head, name="esault-ray-head", daemon=True)
        self._head_thread.start()

    def cannot_grow(self, live: int) -> str | None:
        if self._closed:
            return "the Ray provider is shut down"
        if self.head_lost is not None:
            return self.head_lost
        if self.max_workers is not None and live >= self.max_workers:
            return (f"the Ray provider's max_workers={self.max_workers} is reached ({live} worker(s) joined or "
                    "pending)")
        return None

    def request(self, request: WorkerRequest) -> None:
        """Create the worker's actor and return: Ray places it (an autoscaler may first add a node); the worker
        joins the driver on its own. Raises ResourceError if the actor cannot even be submitted."""
        name = request.name
        with self._lock:
            if self._closed:
                raise ResourceError(f"worker {name}: the Ray provider is shut down; no worker can be started")
            if self.head_lost is not None:
                raise ResourceError(f"worker {name} cannot be asked of Ray: {self.head_lost}")
            if name in self._placed and not self._placed[name].ended:
                raise ResourceError(f"worker {name} is already running as a Ray actor of this driver; give the "
                                    "new worker another name, or release() this one first")
        pair = KeyPair.generate()  # fresh per worker: only this driver and that actor know it
        self.postman.keys.admit(pair.public, Role.WORKER)
        keys = WorkerKeys(pair, self.postman.keys.own.public).to_json()
        driver = self.postman.address.replace("tcp://", "")
        try:
            actor = self._actor_class.options(name=f"{self._prefix}-{name}", **self.options).remote(
                driver, name, keys, self.driver_timeout, self.connect_timeout, [p for p in sys.path if p],
                logging.getLevelName(logging.getLogger().getEffectiveLevel()))
            ended = actor.run.remote()
            info = actor.info.remote()
        except Exception as exc:  # noqa: BLE001 - Ray's errors name the cause; ours names the worker
            self.postman.keys.revoke(pair.public)
            raise ResourceError(f"worker {name}: Ray refused its actor ({exc}); check the RayProvider options "
                                f"{self.options} against the cluster's resources (`ray status`)") from None
        with self._lock:
            self._placed[name] = _Placed(name, actor, pair.public, request.asked_at, run=ended)
        ended.future().add_done_callback(lambda done: self._events.put(("ended", name, done)))
        info.future().add_done_callback(lambda done: self._events.put(("info", name, done)))
        log.info("worker %s asked of Ray at %s (%s): %s", name, self.address, request.reason, self.options)

    def release(self, worker: str) -> None:
        """The driver told `worker` to exit: its actor ends once the worker did, or RELEASE_GRACE s later."""
        with self._lock:
            placed = self._placed.get(worker)
            if placed is None:
                return
            placed.released = True
            if not placed.ended:
                timer = threading.Timer(RELEASE_GRACE, self._events.put, args=(("kill", worker, None),))
                timer.daemon = True
                placed.timers.append(timer)
                timer.start()
                return
        self._end(placed)

    def origin(self, worker: str) -> WorkerOrigin | None:
        with self._lock:
            placed = self._placed.get(worker)
        if placed is None:
            return None
        node = "placing" if placed.node is None else f"ray node {placed.node} at {placed.ip}"
        return WorkerOrigin(self.kind, node, placed.asked_at)

    def lost(self, worker: str) -> None:
        """`worker` was declared dead: its actor is killed (if its process still runs) and forgotten."""
        with self._lock:
            placed = self._placed.get(worker)
        if placed is not None:
            self._end(placed)

    def shutdown(self, timeout: float = RELEASE_GRACE) -> None:
        """Kill every actor of this provider once its worker ended (they were told to exit; their last counts
        are on their way), or `timeout` s later; stop watching; disconnect from Ray if this provider connected.
        Its actors are not detached: were the driver's process to die instead, Ray would end them itself."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            placed = list(self._placed.values())
        self._stopping.set()
        if self.head_lost is not None:  # Ray calls would wait for a GCS that is gone; its processes end alone
            for one in placed:
                self.postman.keys.revoke(one.key)
            self._events.put(None)
            return
        running = [one.run for one in placed if not one.ended and one.run is not None]
        if running:
            try:
                self._ray.wait(running, num_returns=len(running), timeout=timeout)
            except Exception as exc:  # noqa: BLE001 - Ray is gone: the kills below find nothing either
                log.debug("waiting for the Ray workers to end: %r", exc)
        for one in placed:
            self._end(one)
        self._events.put(None)
        self._watcher.join(5.0)
        if self._owns_ray:
            self._ray.shutdown()

    def workers(self) -> list[str]:
        """The workers whose actors this provider holds now (asked for and not ended)."""
        with self._lock:
            return [name for name, placed in self._placed.items() if not placed.ended]

    def _end(self, placed: _Placed) -> None:
        """Kill the actor (no restart), stop admitting its key, forget it."""
        for timer in placed.timers:
            timer.cancel()
        with self._lock:
            if self._placed.get(placed.name) is placed:
                del self._placed[placed.name]
        self.postman.keys.revoke(placed.key)
        if self.head_lost is not None:  # Ray ends the actor itself without its head; a kill would wait for it
            return
        try:
            self._ray.kill(placed.actor, no_restart=True)
        except Exception as exc:  # noqa: BLE001 - dead already, or Ray is gone: nothing left to end
            log.debug("worker %s: its actor could not be killed (%r)", placed.name, exc)

    def _watch(self) -> None:
        """The provider's thread: what Ray's callbacks queued (an actor's info, a worker's end, a release's
        deadline), handled one at a time; never on Ray's own callback thread."""
        while True:
            event = self._events.get()
            if event is None:
                return
            what, name, value = event
            try:
                if what == "info":
                    self._took_info(name, value)
                elif what == "ended":
                    self._ended(name, value)
                else:
                    with self._lock:
                        placed = self._placed.get(name)
                    if placed is not None:
                        log.warning("worker %s did not end within %g s of its release: its Ray actor is killed",
                                    name, RELEASE_GRACE)
                        self._end(placed)
            except Exception:  # noqa: BLE001 - one bad event must not end the watch
                log.exception("worker %s: Ray's %s report could not be handled", name, what)

    def _watch_head(self) -> None:
        """The head thread: probe the GCS every PROBE_INTERVAL s until the provider shuts down; tell once when
        it has been silent for head_timeout s."""
        while not self._stopping.wait(PROBE_INTERVAL):
            if not self._head_watch.probed(time.monotonic(), probe_gcs(self.head_address)):
                continue
            self.head_lost = (
                f"the Ray head at {self.head_address} has not answered for {self._head_watch.silent_for:.0f} s "
                f"(head_timeout={self._head_watch.head_timeout:g}s; its GCS is gone: killed, its node lost, or "
                "cut off from this driver). Without it Ray starts no worker, and ends every node's processes, the "
                "esault workers with them, and this driver's own process (Ray's core worker in it) once the GCS "
                "has been gone for gcs_rpc_server_reconnect_timeout_s (60 s by default). Start the Ray cluster again (a head with GCS "
                "fault tolerance rides out its own restart) and run the job again: it resumes from its last "
                "completed checkpoint")
            log.error("%s", self.head_lost)
            if self.on_head_lost is not None:
                try:
                    self.on_head_lost(self.head_lost)
                except Exception:  # noqa: BLE001 - the watch itself must not end on a listener's error
                    log.exception("telling of the Ray head's loss failed")
            return

    def _took_info(self, name: str, done: Any) -> None:
        try:
            info = done.result()
        except Exception:  # noqa: BLE001 - the actor died first: its end is reported by run()
            return
        node, ip, pid = _checked_info(info)
        with self._lock:
            placed = self._placed.get(name)
            if placed is not None:
                placed.node, placed.ip, placed.pid = node, ip, pid
                self._pids[name] = pid
        log.info("worker %s runs on ray node %s at %s, pid %d", name, node, ip, pid)

    def _ended(self, name: str, done: Any) -> None:
        """`name`'s run() returned (its code) or failed (the actor died: killed, its node lost)."""
        try:
            code: int | None = done.result()
            if type(code) is not int:
                code = None
            why = f"exit code {code}"
        except Exception as exc:  # noqa: BLE001 - RayActorError and kin: the cause is in the text
            code, why = None, " ".join(str(exc).split())[:300]
        with self._lock:
            placed = self._placed.get(name)
            pid = self._pids.pop(name, 0)  # kept apart: a release or shutdown may have forgotten `placed`
            if placed is not None:
                placed.ended = True
            released = placed is None or placed.released
        if not released:
            log.warning("worker %s (pid %s) ended on Ray: %s", name, pid or "unknown", why)
        if placed is not None:  # its worker is over: free its CPUs now, and its key admits nobody any more
            self._end(placed)
        if self.on_exit is not None:
            self.on_exit(WorkerProcessExited(name, pid, code))


def _actor_options(num_cpus: float, memory: int | None, resources: dict[str, float] | None,
                   label_selector: dict[str, str] | None) -> dict[str, Any]:
    """The .options() of every worker actor, checked here: a typo fails at construction, not at placement."""
    if isinstance(num_cpus, bool) or not isinstance(num_cpus, (int, float)) or not 0 < num_cpus < math.inf:
        raise ConfigError(f"RayProvider(num_cpus=...) must be a positive number of CPUs per worker, got "
                          f"{num_cpus!r}")
    options: dict[str, Any] = {"num_cpus": num_cpus}
    if memory is not None:
        if type(memory) is not int or memory <= 0:
            raise ConfigError(f"RayProvider(memory=...) is bytes per worker (a positive int, e.g. 2 * 2**30), "
                              f"got {memory!r}")
        options["memory"] = memory
    if resources is not None:
        if not isinstance(resources, dict) or not all(
                isinstance(k, str) and k and isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0
                for k, v in resources.items()):
            raise ConfigError(f"RayProvider(resources=...) maps custom resource names to positive amounts, e.g. "
                              f"{{'esault': 1}}; got {resources!r}")
        if {"CPU", "GPU", "memory"} & set(resources):
            raise ConfigError(f"RayProvider(resources={resources!r}): give CPUs and memory as num_cpus= and "
                              "memory=, not among the custom resources")
        options["resources"] = dict(resources)
    if label_selector is not None:
        if not isinstance(label_selector, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in label_selector.items()):
            raise ConfigError(f"RayProvider(label_selector=...) maps node label names to values (strings), e.g. "
                              f"{{'zone': 'a'}}; got {label_selector!r}")
        options["label_selector"] = dict(label_selector)
    return options


def _checked_info(info: Any) -> tuple[str, str, int]:
    """The actor's answer to info(), as far as it is plausible (it came over Ray's sockets: not trusted)."""
    if not isinstance(info, dict):
        return "unknown", "unknown", 0
    node, ip, pid = info.get("node"), info.get("ip"), info.get("pid")
    node = node if isinstance(node, str) and 0 < len(node) <= 64 and node.isalnum() else "unknown"
    ip = ip if isinstance(ip, str) and 0 < len(ip) <= 64 and all(c.isalnum() or c in ".:-" for c in ip) else "unknown"
    pid = pid if type(pid) is int and 0 < pid < 2**31 else 0
    return node, ip, pid


def _connect(address: str) -> tuple[Any, bool]:
    """Ray, connected to the cluster at `address`; and whether this call connected it (an earlier ray.init in
    this process is used as it is). A cluster that is not there fails within PROBE_TIMEOUT s, naming it."""
    try:
        import ray
    except ImportError:
        raise ResourceError("RayProvider needs Ray: pip install 'esault[ray]' (ray[default]==2.60.0)") from None
    hint = ("start one with `ray start --head --port=6379`, then give its GCS address HOST:PORT (`ray status` "
            "names it), ray://HOST:10001 for a Ray client server, or 'auto' on a node of that cluster")
    if not isinstance(address, str) or not address.strip():
        raise ResourceError(f"RayProvider(address={address!r}) names no Ray cluster: {hint}")
    if ray.is_initialized():  # one Ray cluster per process: this one's, if it is the one asked for
        current = ray.get_runtime_context().gcs_address
        if address not in ("auto", current) and not address.startswith("ray://") and _resolved(address) != current:
            raise ResourceError(f"this process is connected to the Ray cluster at {current} already, not "
                                f"{address!r}: one process can use one Ray cluster (give address='auto' or "
                                f"{current!r})")
        return ray, False
    if address != "auto":
        host, port = _host_port(address, hint)
        try:
            socket.create_connection((host, port), timeout=PROBE_TIMEOUT).close()
        except OSError as exc:
            reason = exc.strerror or type(exc).__name__
            raise ResourceError(f"no Ray cluster answers at {address!r} ({reason}); {hint}") from None
    started = time.monotonic()
    try:
        ray.init(address=address, namespace="esault", ignore_reinit_error=True)
    except Exception as exc:  # noqa: BLE001 - ConnectionError, ValueError, RuntimeError: all mean "not there"
        raise ResourceError(f"could not connect to the Ray cluster at {address!r} "
                            f"({' '.join(str(exc).split())[:300]}); {hint}") from None
    log.info("connected to Ray at %s in %.1f s", address, time.monotonic() - started)
    return ray, True


def _head_address(ray: Any, address: str) -> str:
    """The HOST:PORT whose answer says the Ray head lives: the Ray client server for ray://, else the GCS."""
    if address.startswith("ray://"):
        return address[len("ray://"):]
    try:
        return str(ray.get_runtime_context().gcs_address)
    except Exception:  # noqa: BLE001 - an older Ray: the address given (HOST:PORT, not 'auto')
        return address


def _host_port(address: str, hint: str) -> tuple[str, int]:
    text = address[len("ray://"):] if address.startswith("ray://") else address
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ResourceError(f"RayProvider(address={address!r}) is not HOST:PORT, ray://HOST:PORT or 'auto'; {hint}")
    return host, int(port)


def _resolved(address: str) -> str:
    """HOST:PORT with HOST as the IP address it names (how Ray reports its GCS address)."""
    host, _, port = address.rpartition(":")
    try:
        return f"{socket.gethostbyname(host.strip('[]'))}:{port}"
    except OSError:
        return address
