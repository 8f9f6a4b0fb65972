"""The job's control thread: reconfigurations, checkpoints and rollbacks, one at a time.

A plain thread (so it may ask actors). Job.split/merge and the elastic
monitor submit here: one code path. Serialising reconfigurations with each
other and with checkpoints keeps every unit's upstream SPU set stable while a
hand-off or a barrier is in flight (docs/CHECKPOINTS.md). Between tasks it
runs the periodic work `between()` names (a due checkpoint). A rollback is
submitted with priority: it runs before queued splits and merges.
"""

from __future__ import annotations

import itertools
import queue
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Callable

from esault.dsl.topology import Topology
from esault.errors import ScalingError
from esault.runtime.context import log
from esault.runtime.messages import GetRoutes, GetSpus, ScaleCommand, ScaleResult
from esault.runtime.unit import ProposeLogic


@dataclass(frozen=True, slots=True)
class ScaleRequest:
    action: str
    unit: str
    spu_id: int
    at: int | None
    into: int | None
    reason: str
    assignment: dict[int, list[tuple[int, int]]] | None = None
    worker: str | None = None
    spus: int | None = None
    logic: Any = None  # assign_logic: the UnitSpec with the new bolt (a class: it stays in this process)


class ReconfigurationCoordinator:
    """Owns a queue of ScaleRequests and a thread that executes them serially."""

    def __init__(self, topology: Topology, units: dict[str, Any], op_timeout: float = 60.0) -> None:
        self.topology = topology
        self.units = units
        self.op_timeout = op_timeout
        self.history: list[ScaleResult] = []
        self.listeners: list[Callable[[ScaleResult], None]] = []
        self._queue: "queue.PriorityQueue[tuple[int, int, Any, Future | None]]" = queue.PriorityQueue()
        self._seq = itertools.count()
        self.between: Callable[[], float | None] = lambda: None
        """Runs when no task is queued; returns seconds until it wants to run again (None: not at all)."""
        self._thread = threading.Thread(target=self._run, name="esault-control", daemon=True)
        self._thread.start()

    URGENT, NORMAL, LAST = 0, 1, 2

    def run_task(self, task: Callable[[], Any], priority: int = NORMAL) -> Future:
        """Run `task()` on the control thread; the future gets its result or exception."""
        future: Future = Future()
        self._queue.put((priority, next(self._seq), task, future))
        return future

    def submit(self, request: ScaleRequest) -> "Future[ScaleResult]":
        future: Future = Future()
        if request.unit not in self.units:
            future.set_exception(ScalingError(
                f"no unit {request.unit!r} in topology {self.topology.name!r}; units: {', '.join(self.units)}"
            ))
            return future
        if self.topology.chained(request.unit):
            host = self.topology.host_of(request.unit)
            future.set_exception(ScalingError(
                f"bolt {request.unit!r} runs chained into the SPUs of {host!r} and scales with them; "
                f"{request.action} {host!r} instead, or declare it with set_bolt({request.unit!r}, ..., chain=False)"
            ))
            return future
        self._queue.put((self.NORMAL, next(self._seq), request, future))
        return future

    def stop(self) -> None:
        self._queue.put((self.LAST, next(self._seq), None, None))
        self._thread.join(timeout=self.op_timeout)

    def _run(self) -> None:
        while True:
            try:
                wait = 0.0 if not self._queue.empty() else self.between()  # queued tasks (a rollback) first
            except Exception:
                log.exception("topology %r: periodic control work failed", self.topology.name)
                wait = 1.0
            try:
                _, _, item, future = self._queue.get(timeout=wait)
            except queue.Empty:
                continue
            if item is None:
                return
            if not isinstance(item, ScaleRequest):
                try:
                    future.set_result(item())
                except BaseException as exc:  # noqa: BLE001 - the submitter gets it
                    future.set_exception(exc)
                continue
            request = item
            try:
                result = self._execute(request)
            except Exception as exc:
                log.warning("topology %r: %s of %r%s refused: %s", self.topology.name, request.action,
                            request.unit, f" SPU {request.spu_id}" if request.spu_id >= 0 else "", exc)
                future.set_exception(exc)
                continue
            self.history.append(result)
            for listener in list(self.listeners):
                try:
                    listener(result)
                except Exception:
                    log.exception("scaling listener failed")
            future.set_result(result)

    def _execute(self, request: ScaleRequest) -> ScaleResult:
        upstream: dict[int, tuple[Any, str]] = {}
        for spec_input in self.topology.unit(request.unit).inputs:
            # The SPUs that emit this input: those of its source, or of the head that source is chained into.
            sender = self.topology.host_of(spec_input.source)
            spus = self.units[sender].ask(GetSpus(), timeout=self.op_timeout)
            for spu_id, mailbox in spus.items():
                upstream[spu_id] = (mailbox, spec_input.grouping.value)
        downstream = tuple(
            self.units[d.name].ask(GetRoutes(g.value), timeout=self.op_timeout)
            for d, g in self.topology.downstream(self.topology.output_unit(request.unit))
        )
        reply: Future = Future()
        if request.logic is not None:
            self.units[request.unit].ask(ProposeLogic(request.logic), timeout=self.op_timeout)
        self.units[request.unit].tell(ScaleCommand(
            action=request.action, spu_id=request.spu_id, upstream=upstream,
            downstream_routes=downstream, reply=reply, at=request.at, into=request.into,
            reason=request.reason, assignment=request.assignment, worker=request.worker, spus=request.spus,
        ))
        try:
            return reply.result(timeout=self.op_timeout)
        except TimeoutError:
            raise ScalingError(
                f"{request.action} of {request.unit!r}{f' SPU {request.spu_id}' if request.spu_id >= 0 else ''} did not finish within "
                f"{self.op_timeout}s; see the log for the SPU that did not answer"
            ) from None
