"""LocalCluster: the embedded default, every actor in this process."""

from __future__ import annotations

from typing import Any

from esault.clock import Clock
from esault.cluster.inprocess import InProcessLauncher
from esault.config import JobConfig
from esault.dsl.topology import Topology
from esault.errors import TopologyError
from esault.runtime.job import Job


class LocalCluster:
    """Runs topologies on this machine; a context manager that stops its jobs (and workers) on exit.

    workers=0 (default): every actor is a thread of this process. workers=N:
    N `esault worker` processes are spawned; bolt SPUs run in them, linked by pyzmq.
    """

    def __init__(self, clock: Clock | None = None, workers: int = 0) -> None:
        self.clock = clock
        self.jobs: dict[str, Job] = {}
        self.postman = self.registry = self.pool = None
        if workers:
            from esault.cluster.postman import Postman
            from esault.cluster.processes import ClusterActor, LocalProcessPool, WorkerRegistry

            self.postman = Postman("driver")
            self.registry = WorkerRegistry()
            self._cluster_actor = self.postman.start_and_register(
                "cluster", lambda: ClusterActor.start(self.postman, self.registry))
            try:
                self.pool = LocalProcessPool(self.postman, self.registry, workers)
            except Exception:
                self._close_transport()
                raise

    def submit(self, topology: Topology, config: JobConfig | None = None) -> Job:
        if not isinstance(topology, Topology):
            raise TopologyError(
                f"submit() takes a built Topology, got {type(topology).__name__}; "
                "call TopologyBuilder(...).build() first"
            )
        running = self.jobs.get(topology.name)
        if running is not None and not running._stopped:
            raise TopologyError(f"a job named {topology.name!r} is already running here; stop it first")
        if self.postman is None:
            job = Job(topology, config or JobConfig.load(), InProcessLauncher(), self.clock)
        else:
            from esault.cluster.processes import ProcessLauncher

            job = Job(topology, config or JobConfig.load(), ProcessLauncher(self.postman, self.registry),
                      self.clock, postman=self.postman, remote_stats=self.registry.stats_of)
        self.jobs[topology.name] = job
        return job

    def shutdown(self) -> None:
        for job in list(self.jobs.values()):
            job.stop()
            if self.registry is not None:
                self.registry.forget(job.name)
        if self.pool is not None:
            self.pool.shutdown()
            self.pool = None
        self._close_transport()

    def _close_transport(self) -> None:
        if self.postman is not None:
            self._cluster_actor.stop()
            self.postman.close()
            self.postman = None

    def __enter__(self) -> "LocalCluster":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()
