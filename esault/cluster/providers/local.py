"""Workers forked on this host by the driver's pool, from `--workers` up to `--max-workers`."""

from __future__ import annotations

import socket
import time
from typing import TYPE_CHECKING

from esault.cluster.providers.base import WorkerOrigin, WorkerProvider, WorkerRequest
from esault.errors import ConfigError, ResourceError

if TYPE_CHECKING:
    from esault.cluster.processes import LocalProcessPool


class LocalPoolProvider(WorkerProvider):
    """Grows the local pool by one process per request; the pool's first `--workers` are its floor. A worker
    given back exits on the driver's Shutdown; the pool reaps its process at the cluster's end."""

    kind = "local"

    def __init__(self, pool: "LocalProcessPool", max_workers: int) -> None:
        floor = len(pool.names)
        if type(max_workers) is not int or max_workers < max(1, floor):
            raise ConfigError(f"max_workers must be a whole number >= workers ({floor}), got {max_workers!r}")
        self.pool = pool
        self.floor = floor
        self.max_workers = max_workers
        self._host = socket.gethostname()
        self._started = {name: time.time() for name in pool.names}

    def cannot_grow(self, live: int) -> str | None:
        if live < self.max_workers:
            return None
        return (f"the local pool is at its ceiling of {self.max_workers} worker process(es); raise max_workers "
                "(`esault run --max-workers N`) to let it grow")

    def request(self, request: WorkerRequest) -> None:
        try:
            self.pool.spawn(request.name)
        except OSError as exc:
            raise ResourceError(f"worker process {request.name} could not be started: {exc}") from exc
        self._started[request.name] = time.time()

    def release(self, worker: str) -> None:
        self._started.pop(worker, None)

    def origin(self, worker: str) -> WorkerOrigin | None:
        started = self._started.get(worker)
        return None if started is None else WorkerOrigin(self.kind, self._host, started)


class StaticProvider(WorkerProvider):
    """A static cluster: its workers are the processes an operator (or a replica set) started against the
    driver. It cannot start one, and keeps every worker however idle it is."""

    kind = "static"
    floor = 1 << 30

    def __init__(self, driver: str) -> None:
        self.driver = driver
        self._joined: dict[str, float] = {}

    def cannot_grow(self, live: int) -> str | None:
        return ("a static cluster runs the workers started against it; start another with "
                f"`esault worker --driver {self.driver}` (or scale its replicas) and split again")

    def request(self, request: WorkerRequest) -> None:
        raise ResourceError(self.cannot_grow(0) or "")

    def release(self, worker: str) -> None:
        self._joined.pop(worker, None)
