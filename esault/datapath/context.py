"""What every actor of one job shares: immutable settings and thread-safe handles."""

from __future__ import annotations

import functools
import itertools
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from esault.clock import Clock
from esault.datapath.ack_router import AckRouter
from esault.config import JobConfig
from esault.dsl.topology import Topology, UnitSpec
from esault.metrics.stats import STATS, StatsRegistry
from esault.reliability.dead_letters import DeadLetterWriter
from esault.storage.location import StorageLocation

log = logging.getLogger("esault")

CHECKPOINT_FILE = "checkpoints.sqlite"
"""The job's CheckpointStore, in its data dir."""


@dataclass
class JobContext:
    """Shared by the driver, units and SPUs of one job (in one process)."""

    topology: Topology
    config: JobConfig
    clock: Clock
    data_dir: Path
    acker: Any = None
    ticker: Any = None
    spout_progress: dict[int, Any] = field(default_factory=dict)
    """spout SPU id -> its latest SpoutProgress (kept by the ack server, read by the driver)."""
    dead_letters: DeadLetterWriter | None = None
    process: str | None = None
    """This process's name when its SPUs are reached by name (a worker): Address(process, "spu-<id>")."""
    stats: StatsRegistry = STATS
    checkpoints: Any = None
    """The driver's checkpoint coordinator mailbox (CheckpointAck goes there)."""
    store_id: str = ""
    """exactly_once: the identity the driver gave the job's checkpoint store at its start (the workers check they
    see that store before any SPU of the job starts there); "" otherwise."""
    worker_host: Any = None
    """In the driver of a process cluster: process name -> that worker's host mailbox (the ack server tells it
    where a spout SPU is); None elsewhere."""
    _ids: Any = field(default_factory=lambda: itertools.count(1))
    """Where SPU and reconfiguration ids come from: a cluster gives all its jobs one source, so no two of
    its jobs' SPUs share an id (their names, "spu-<id>", are process-wide on the driver and the workers)."""
    acks: AckRouter = field(init=False, repr=False)
    """Where this process's SPUs send acks: to the spout SPU that owns each tree (esault.datapath.ack_router)."""

    def __post_init__(self) -> None:
        self.acks = AckRouter(self)

    @property
    def name(self) -> str:
        return self.topology.name

    def next_id(self) -> int:
        """Unique ids for SPUs and reconfigurations, across the cluster's jobs (itertools.count is atomic)."""
        return next(self._ids)

    @functools.cached_property
    def _storage(self) -> StorageLocation | None:
        """checkpoint_storage parsed once (an SPU's context is made for every PE it opens)."""
        storage = self.config.checkpoint_storage
        return None if storage is None else StorageLocation.parse(storage)

    @property
    def checkpoint_path(self) -> Path:
        """The job's SQLite checkpoint file: in its data_dir, or under a local `checkpoint_storage`."""
        if self._storage is not None and self._storage.is_local:
            return Path(self._storage.root) / self.name / CHECKPOINT_FILE
        return self.data_dir / CHECKPOINT_FILE

    @functools.cached_property
    def checkpoint_location(self) -> StorageLocation | None:
        """The job's folder on an object store (checkpoint_storage s3://...), or None: the SQLite file."""
        if self._storage is None or self._storage.is_local:
            return None
        return self._storage.child(self.name)

    @property
    def exactly_once(self) -> bool:
        return self.config.guarantee == "exactly_once"

    def pe_idle_timeout(self, spec: UnitSpec) -> float | None:
        return self.config.pe_idle_timeout if spec.pe_idle_timeout == "job" else spec.pe_idle_timeout


def job_actor(job: str, actor: str) -> str:
    """The name a job's actor in the driver is registered under ("acker@wordcount"): the jobs of one cluster
    share the driver's postman, so each job's names must be its own (unit names never hold "@")."""
    return f"{actor}@{job}"
