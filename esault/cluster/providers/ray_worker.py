"""One esault worker inside a Ray actor's process: what RayProvider places on a Ray node.

The actor runs the ordinary worker (esault.cluster.worker.run_worker, what `esault worker` runs) on a thread of
its own process, so the worker joins its driver by its hello over CurveZMQ like any other, with the fresh key
pair the driver made for it (given as the constructor's argument: never on disk, shared with no other worker).
Ray only places the process and reports its end: run() returns when the worker ends and fails when the actor
dies (a killed node), which is how the driver learns of it without waiting for missed heartbeats.

Ray itself is imported by the provider, which wraps this class with ray.remote: this module needs no Ray.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from typing import Any

from esault.cluster.credentials import WorkerKeys
from esault.errors import DriverUnreachable, EsaultError
from esault.job.outcome import ExitCode

log = logging.getLogger("esault.ray")

ACTOR_CONCURRENCY = 4
"""Threads of the actor that serve its methods: run() blocks for the worker's whole life, info() must answer."""


class RayWorker:
    """An esault worker named `name`, joining the driver at `driver` (HOST:PORT) with `keys` (WorkerKeys JSON);
    `code_paths` are the driver's sys.path (those that exist on this node are added: elsewhere the topology's
    modules must be installed, as for `esault worker`).

    Its methods run on the actor's threads; the worker itself on a thread started here."""

    def __init__(self, driver: str, name: str, keys: str, driver_timeout: float, connect_timeout: float,
                 code_paths: list[str], log_level: str = "WARNING") -> None:
        for path in code_paths:  # the driver's: a topology's modules import as there, on a node sharing its files
            if isinstance(path, str) and path not in sys.path and os.path.isdir(path):
                sys.path.append(path)
        logging.basicConfig(level=getattr(logging, log_level.upper(), logging.WARNING),
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        self.name = name
        self._code: int | None = None
        self._ended = threading.Event()
        worker_keys = WorkerKeys.from_json(keys, source=f"the Ray actor of worker {name}")
        self._thread = threading.Thread(target=self._run, args=(driver, worker_keys, driver_timeout, connect_timeout),
                                        name=f"esault-worker-{name}", daemon=True)
        self._thread.start()

    def _run(self, driver: str, keys: WorkerKeys, driver_timeout: float, connect_timeout: float) -> None:
        from esault.cluster.worker import run_worker

        try:
            self._code = run_worker(driver, keys, self.name, driver_timeout=driver_timeout,
                                    connect_timeout=connect_timeout)
        except DriverUnreachable as exc:  # as `esault worker` exits: the driver never answered
            log.error("worker %s: %s", self.name, exc)
            self._code = int(ExitCode.NO_DRIVER)
        except EsaultError as exc:
            log.error("worker %s did not start: %s", self.name, exc)
            self._code = int(ExitCode.NOT_STARTED)
        except BaseException:
            log.exception("worker %s failed", self.name)
            self._code = int(ExitCode.NOT_STARTED)
        finally:
            self._ended.set()

    def run(self) -> int:
        """Block until the worker ends; its exit code (0 after the driver's Shutdown)."""
        self._ended.wait()
        return int(self._code if self._code is not None else ExitCode.NOT_STARTED)

    def info(self) -> dict[str, Any]:
        """Where this worker runs: Ray's node id, the node's IP address, and this process's pid."""
        import ray

        return {"node": ray.get_runtime_context().get_node_id(), "ip": ray.util.get_node_ip_address(),
                "pid": os.getpid()}
