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
    """Runs topologies in this process; a context manager that stops its jobs on exit."""

    def __init__(self, clock: Clock | None = None) -> None:
        self.clock = clock
        self.jobs: dict[str, Job] = {}

    def submit(self, topology: Topology, config: JobConfig | None = None) -> Job:
        if not isinstance(topology, Topology):
            raise TopologyError(
                f"submit() takes a built Topology, got {type(topology).__name__}; "
                "call TopologyBuilder(...).build() first"
            )
        running = self.jobs.get(topology.name)
        if running is not None and not running._stopped:
            raise TopologyError(f"a job named {topology.name!r} is already running here; stop it first")
        job = Job(topology, config or JobConfig.load(), InProcessLauncher(), self.clock)
        self.jobs[topology.name] = job
        return job

    def shutdown(self) -> None:
        for job in list(self.jobs.values()):
            job.stop()

    def __enter__(self) -> "LocalCluster":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()
