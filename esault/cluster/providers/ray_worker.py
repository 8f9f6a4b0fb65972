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
from esault.cluster.forker import call_when_ended
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
        _end_with_raylet(name)
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


RAYLET_GONE = 5
"""The exit code of a worker whose node's raylet ended (the node was lost): what its actor's death reports."""


def _end_with_raylet(name: str) -> None:
    """End this process the moment its node's raylet (its parent) ends. Ray would end it only ~27 s later and
    declare the actor dead ~15 s after, when the GCS gives up on the node; ended now, the driver's Ray client
    sees the actor's connection drop and reports its death within a second or two (the worker's SPUs are then
    replaced at once, not after missed heartbeats). A parent that is no raylet is not watched."""
    parent = os.getppid()
    try:
        with open(f"/proc/{parent}/cmdline", "rb") as cmdline:
            if not cmdline.read().split(b"\0", 1)[0].endswith(b"raylet"):
                return
        pidfd = os.pidfd_open(parent)
    except OSError:  # not Linux, or the raylet is gone already (then Ray ends this process itself)
        return

    def gone() -> None:
        log.error("worker %s: its node's raylet (pid %d) ended: the worker ends with it", name, parent)
        for handler in logging.getLogger().handlers:
            handler.flush()
        os._exit(RAYLET_GONE)

    call_when_ended(pidfd, gone, f"esault-raylet-{parent}")
