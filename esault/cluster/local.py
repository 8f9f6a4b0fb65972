"""LocalCluster: the embedded default, every actor in this process."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

import pykka

from esault.clock import Clock
from esault.cluster.credentials import ClusterKeys, remove_status_keys, write_status_keys
from esault.cluster.capacity import Capacity
from esault.cluster.inprocess import InProcessLauncher
from esault.cluster.placement import Placement
from esault.cluster.providers.local import LocalPoolProvider, StaticProvider
from esault.cluster.unit_wire import importing_for_worker
from esault.config import JobConfig
from esault.dsl.topology import Topology
from esault.errors import ConfigError, ResourceError, TopologyError
from esault.job.job import Job

if TYPE_CHECKING:
    from esault.cluster.exit_watch import WorkerProcessExited
    from esault.cluster.providers.base import WorkerProvider

GROWABLE_SPUS_PER_WORKER = 2
"""SPUs a worker takes before a pool that can grow asks for another: a worker is one interpreter, one core of
work under the GIL, so a split gains most on a process of its own; two share one while the load is light."""


class LocalCluster:
    """Runs topologies on this machine; a context manager that stops its jobs (and workers) on exit.

    workers=0 (default): every actor is a thread of this process. workers=N:
    N `esault worker` processes are spawned; bolt SPUs run in them, linked by pyzmq.
    A worker silent for heartbeat_timeout seconds is declared dead and its SPUs
    are replaced (then, if it was only slow, it is told to shut down).

    Every socket is CurveZMQ: `keys` (default: fresh per cluster) is the
    driver's key pair and the worker and status-client keys it admits; spawned
    workers get fresh pairs. `esault status` finds this cluster's client key in
    a file only this user can read (esault.cluster.credentials).
    `listen` (HOST:PORT, port 0 = any) is where the driver binds, `advertise`
    (HOST[:PORT]) what it tells workers and prints, if not the bound address.

    Capacity (esault.cluster.capacity): the local pool grows from `workers` up to `max_workers` processes when
    a split or rescale finds no worker with room (fewer than `spus_per_worker` SPUs: default no budget for a
    fixed pool, GROWABLE_SPUS_PER_WORKER for one that can grow), waiting up to `worker_wait` seconds for the
    new one; a worker above `workers` that hosted no SPU for `release_after` seconds is given back. `provider`
    replaces the local pool as the source of workers. `ray` (an address: "auto", "HOST:PORT" of a GCS, or
    "ray://HOST:PORT" of a Ray client server) makes every worker a Ray actor (RayProvider; `ray_options`: its
    num_cpus, memory, resources, label_selector), asked for as SPUs need them, up to max_workers.
    """

    def __init__(self, clock: Clock | None = None, workers: int = 0, listen: str | None = None,
                 min_workers: int = 0, join_timeout: float = 120.0, heartbeat_timeout: float = 10.0,
                 keys: ClusterKeys | None = None, max_frame_bytes: int | None = None,
                 advertise: str | None = None, max_workers: int | None = None,
                 spus_per_worker: int | None = None, release_after: float = 30.0, worker_wait: float = 30.0,
                 provider: "WorkerProvider | None" = None, ray: str | None = None,
                 ray_options: dict[str, Any] | None = None) -> None:
        importing = importing_for_worker()
        if importing is not None:
            raise TopologyError(
                f"{importing} started a LocalCluster while a worker process imported it for the topology's "
                "classes: put the code that runs the job under `if __name__ == \"__main__\":` (worker processes "
                "import the script, as multiprocessing does), or the classes in a module of their own")
        if max_workers is not None and ray is None and (
                type(max_workers) is not int or not workers or max_workers < workers):
            raise ConfigError(f"max_workers={max_workers!r} needs workers=N (the pool's floor, >= 1) and a whole "
                              f"number >= it (workers={workers!r}); leave it out for a fixed pool")
        Placement(spus_per_worker)  # a bad budget fails here, before any process starts
        self.clock = clock
        self.jobs: dict[str, Job] = {}
        self._ids = itertools.count(1)
        """SPU ids for every job here: unique among them, as the names "spu-<id>" on the workers must be."""
        self.postman = self.registry = self.pool = None
        self.capacity: Capacity | None = None
        self.keys: ClusterKeys | None = None
        if ray is not None and (workers or provider is not None):
            raise ConfigError("a Ray cluster is this cluster's source of workers: leave out workers= and provider=")
        if workers or listen or ray is not None:
            from esault.cluster.postman import Postman
            from esault.cluster.processes import ClusterActor, LocalProcessPool, WorkerRegistry

            bind = listen if (listen or "").startswith("tcp://") else f"tcp://{listen or '127.0.0.1:0'}"
            self.keys = keys or ClusterKeys.fresh()
            extra = {} if max_frame_bytes is None else {"max_frame_bytes": max_frame_bytes}
            self.postman = Postman("driver", bind=bind, keys=self.keys.ring(), advertise=advertise, **extra)
            if self.keys.local_client is not None:
                write_status_keys(self.address, self.keys.local_client, self.keys.driver.public)
            self.registry = WorkerRegistry()
            self.postman.ack_host = self.registry.host_of  # a worker acks only its own SPUs' checkpoints
            from esault.messages.cluster import ReportNow

            postman = self.postman
            self.registry.ask_report = lambda worker: postman.send(worker, "control", ReportNow(), timeout=0.0)
            from esault.metrics.collector import register_stats_collector

            # The driver's /metrics carries its workers' SPUs too, from their heartbeats (one scrape target).
            self._metrics = register_stats_collector()
            self._metrics.add_source(self.registry.live_stats)
            self._cluster_actor = self.postman.start_and_register(
                "cluster", lambda: ClusterActor.start(self.postman, self.registry, lambda: dict(self.jobs),
                                                      heartbeat_timeout, capacity=lambda: self.capacity))
            try:
                if workers:
                    self.pool = LocalProcessPool(self.postman, self.registry, workers, join_timeout,
                                                 driver_timeout=heartbeat_timeout, on_exit=self._worker_exited)
                if ray is not None:
                    provider = self._ray_provider(ray, ray_options or {}, max_workers, heartbeat_timeout)
                    max_workers = None
                self.capacity = self._capacity(provider, workers, max_workers, spus_per_worker, release_after,
                                               worker_wait, join_timeout)
                if min_workers:
                    self.wait_for_workers(min_workers, join_timeout)
            except BaseException:  # a Ctrl-C while workers join too: their actors would keep the process alive
                self.shutdown()
                raise

    def _capacity(self, provider: "WorkerProvider | None", workers: int, max_workers: int | None,
                  spus_per_worker: int | None, release_after: float, worker_wait: float,
                  join_timeout: float) -> Capacity:
        """The capacity keeper over this cluster's source of workers: the provider given, the local pool, or
        the static cluster (workers started elsewhere)."""
        if provider is None and self.pool is not None:
            provider = LocalPoolProvider(self.pool, workers if max_workers is None else max_workers)
        elif provider is None:
            provider = StaticProvider(self.address or "")
        growable = provider.cannot_grow(workers) is None
        if spus_per_worker is None and growable:
            spus_per_worker = GROWABLE_SPUS_PER_WORKER
        return Capacity(provider, self.registry.counts, self._give_back, Placement(spus_per_worker),
                        worker_wait=worker_wait, release_after=release_after, join_timeout=join_timeout)

    def _ray_provider(self, address: str, options: dict[str, Any], max_workers: int | None,
                      heartbeat_timeout: float) -> "WorkerProvider":
        try:
            from esault.cluster.providers.ray import RayProvider
        except ImportError as exc:
            raise ConfigError(f"a Ray cluster needs Ray: pip install 'esault[ray]' ({exc})") from None
        return RayProvider(self.postman, address, max_workers=max_workers, on_exit=self._worker_exited,
                           driver_timeout=heartbeat_timeout, on_head_lost=self._ray_head_lost, **options)

    def _ray_head_lost(self, why: str) -> None:
        """The Ray head is gone (RayProvider's watch): every running job fails now, saying why, while its driver
        can still stop it in order (Ray would end this process within a minute)."""
        for job in list(self.jobs.values()):
            if not job.stopped:
                job.fail(why)

    def _give_back(self, worker: str) -> None:
        """Tell an idle worker to exit and forget it; the others stop holding a connection to it."""
        from esault.messages.cluster import PeerGone, Shutdown

        self.registry.released(worker)
        for to, message in [(worker, Shutdown())] + [(w, PeerGone(worker)) for w in list(self.registry.workers)]:
            try:
                self.postman.send(to, "host" if to == worker else "control", message, timeout=1.0)
            except Exception:  # noqa: BLE001 - a gone peer: it exits after its driver timeout anyway
                pass

    def _worker_exited(self, ended: "WorkerProcessExited") -> None:
        """A worker process of this cluster's pool ended: its death need not wait for missed heartbeats."""
        try:
            self._cluster_actor.tell(ended)
        except pykka.ActorDeadError:  # the cluster is shutting down
            pass

    def wait_for_workers(self, count: int, timeout: float = 120.0) -> None:
        """Block until `count` workers joined; ResourceError says how to start them if they do not."""
        if self.registry is None:
            raise ResourceError("this LocalCluster runs every actor in-process: create it with listen=... "
                                "for workers started elsewhere")
        if not self.registry.wait_for(count, timeout):
            raise ResourceError(
                f"only {len(self.registry.workers)} of {count} workers joined {self.address} within "
                f"{timeout}s; start them with `esault worker --driver {self.address}`"
            )

    @property
    def address(self) -> str | None:
        """HOST:PORT workers and `esault status` connect to (None when every actor is a thread here)."""
        return None if self.postman is None else self.postman.address.replace("tcp://", "")

    def submit(self, topology: Topology, config: JobConfig | None = None) -> Job:
        if not isinstance(topology, Topology):
            raise TopologyError(
                f"submit() takes a built Topology, got {type(topology).__name__}; "
                "call TopologyBuilder(...).build() first"
            )
        running = self.jobs.get(topology.name)
        if running is not None and not running.stopped:
            raise TopologyError(f"a job named {topology.name!r} is already running here; stop it first")
        if running is not None and self.registry is not None:
            self.registry.forget(topology.name)  # the stopped job's worker counts are not this job's
        if self.postman is None:
            job = Job(topology, config or JobConfig.load(), InProcessLauncher(), self.clock, ids=self._ids)
        else:
            from esault.cluster.processes import ProcessLauncher

            job = Job(topology, config or JobConfig.load(), ProcessLauncher(self.postman, self.registry,
                                                                            capacity=self.capacity),
                      self.clock, postman=self.postman, remote_stats=self.registry.stats_of,
                      fresh_reports=self.registry.await_fresh_reports, ids=self._ids)
        self.jobs[topology.name] = job
        return job

    def shutdown(self) -> None:
        for job in list(self.jobs.values()):
            job.stop()
            if self.registry is not None:
                self.registry.forget(job.name)
        if self.pool is not None:
            self.pool.shutdown()  # tells its workers to exit and waits for the processes
            self.pool = None
        elif self.registry is not None:  # workers started elsewhere: tell them to exit
            from esault.cluster.processes import tell_workers_to_exit

            tell_workers_to_exit(self.postman, self.registry)
        if self.capacity is not None:  # after the workers were told: a provider's end of them follows theirs
            self.capacity.shutdown()
            self.capacity = None
        self._close_transport()

    def _close_transport(self) -> None:
        if self.registry is not None:
            self._metrics.remove_source(self.registry.live_stats)
            for worker in list(self.registry.workers):  # their forwarded samples end with the cluster
                self.registry.forwarded.forget(worker)
        if self.postman is not None:
            if self.keys.local_client is not None:
                remove_status_keys(self.address)
            self._cluster_actor.stop()
            self.postman.close()
            self.postman = None

    def __enter__(self) -> "LocalCluster":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()
