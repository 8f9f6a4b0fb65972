"""The job's control thread: reconfigurations, checkpoints and rollbacks, one at a time.

A plain thread (so it may ask actors). Job.split/merge and the elastic
monitor submit here: one code path. Serialising reconfigurations with each
other and with checkpoints keeps every unit's upstream SPU set stable while a
hand-off or a barrier is in flight (docs/CHECKPOINTS.md). Between tasks it
runs the periodic work `between()` names (a due checkpoint). A rollback is
submitted with priority: it runs before queued splits and merges. An operation
that starts SPUs on workers first reserves room for them with the cluster's
capacity keeper (esault.cluster.capacity): while a worker is being asked for it
waits on a future, off this thread, and comes back to the queue once the room
is there, or fails with the keeper's reason.
"""

from __future__ import annotations

import itertools
import queue
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Callable

from esault.dsl.topology import Topology
from esault.errors import NoWorkerLeft, ScalingError
from esault.datapath.context import log
from esault.job.group import AtomicGroup
from esault.messages.control import GetRoutes, GetSpus, ScaleCommand, ScaleResult
from esault.job.unit_messages import ProposeLogic
from esault.thread_names import os_named


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


@dataclass(frozen=True, slots=True)
class _Roomed:
    """A request back from waiting for room on the workers: its future runs already."""

    request: ScaleRequest


class ReconfigurationCoordinator:
    """Owns a queue of ScaleRequests and a thread that executes them serially."""

    def __init__(self, topology: Topology, units: dict[str, Any], op_timeout: float = 60.0,
                 capacity: Any = None) -> None:
        self.topology = topology
        self.capacity = capacity
        self._stopping = False
        """The cluster's capacity keeper (reserve(spus, reason) -> Future), or None: SPUs go where there is room."""
        self.units = units
        self.op_timeout = op_timeout
        self.history: list[ScaleResult] = []
        self.listeners: list[Callable[[ScaleResult], None]] = []
        self._queue: "queue.PriorityQueue[tuple[int, int, Any, Future | None]]" = queue.PriorityQueue()
        self._seq = itertools.count()
        self.between: Callable[[], float | None] = lambda: None
        """Runs when no task is queued; returns seconds until it wants to run again (None: not at all)."""
        self._thread = threading.Thread(target=os_named(self._run), name="esault-control", daemon=True)
        self._thread.start()

    URGENT, NORMAL, LAST = 0, 1, 2

    def run_task(self, task: Callable[[], Any], priority: int = NORMAL) -> Future:
        """Run `task()` on the control thread; the future gets its result or exception."""
        future: Future = Future()
        self._queue.put((priority, next(self._seq), task, future))
        return future

    def queued(self) -> int:
        """Tasks and requests waiting for the control thread (not the one it runs now)."""
        return self._queue.qsize()

    def submit(self, request: ScaleRequest) -> "Future[ScaleResult]":
        future: Future = Future()
        problem = self._refusal(request)
        if problem is not None:
            future.set_exception(ScalingError(problem))
            return future
        self._queue.put((self.NORMAL, next(self._seq), request, future))
        return future

    def submit_group(self, requests: list[ScaleRequest]) -> "Future[list[ScaleResult]]":
        """Several operations, on different units, applied atomically: all or none (see AtomicGroup)."""
        future: Future = Future()
        units = [r.unit for r in requests]
        problem = next((p for p in map(self._refusal, requests) if p is not None), None)
        if not requests:
            problem = "an atomic group needs at least one operation"
        elif len(set(units)) != len(units):
            twice = sorted({u for u in units if units.count(u) > 1})
            problem = (f"an atomic group may hold one operation per unit, but {', '.join(map(repr, twice))} "
                       "appear more than once; express several changes of one unit as one assign_workload")
        if problem is not None:
            future.set_exception(ScalingError(problem))
            return future
        self._queue.put((self.NORMAL, next(self._seq), lambda: self._run_group(requests), future))
        return future

    def _refusal(self, request: ScaleRequest) -> str | None:
        if request.unit not in self.units:
            return f"no unit {request.unit!r} in topology {self.topology.name!r}; units: {', '.join(self.units)}"
        if self.topology.chained(request.unit):
            host = self.topology.host_of(request.unit)
            return (f"bolt {request.unit!r} runs chained into the SPUs of {host!r} and scales with them; "
                    f"{request.action} {host!r} instead, or declare it with set_bolt({request.unit!r}, ..., "
                    "chain=False)")
        return None

    def stop(self) -> None:
        self._stopping = True  # an operation still waiting for room fails when its room comes
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
            roomed = type(item) is _Roomed
            if not roomed and not future.set_running_or_notify_cancel():  # withdrawn while it waited (Job's timeout)
                continue
            if roomed:
                item = item.request
            elif isinstance(item, ScaleRequest):
                try:
                    if self._waits_for_room(item, future):
                        continue
                except Exception as exc:  # noqa: BLE001 - the unit did not answer: the submitter gets it
                    future.set_exception(exc)
                    continue
            if not isinstance(item, ScaleRequest):
                try:
                    future.set_result(item())
                except BaseException as exc:  # noqa: BLE001 - the submitter gets it
                    future.set_exception(exc)
                continue
            request = item
            try:
                result = self.wait_result(request, self.send_command(request))
            except Exception as exc:
                if isinstance(exc, NoWorkerLeft) and request.action == "replace" and self._a_worker_came(request, exc):
                    # Every worker went while it started (its own death and the next one's): it runs again on
                    # the worker a cluster that can grow started in their place.
                    self._queue.put((self.URGENT, next(self._seq), _Roomed(request), future))
                    continue
                log.warning("topology %r: %s of %r%s refused: %s", self.topology.name, request.action,
                            request.unit, f" SPU {request.spu_id}" if request.spu_id >= 0 else "", exc)
                future.set_exception(exc)
                continue
            self.record_result(result)
            future.set_result(result)

    def _waits_for_room(self, request: ScaleRequest, future: Future) -> bool:
        """True when `request` must wait for workers to join: it is queued again once they did (or fails with
        why they never will); meanwhile this thread runs checkpoints and other operations."""
        spus = self._new_worker_spus(request) if self.capacity is not None else 0
        if not spus:
            return False
        where = f"{request.action} of {self.topology.name}/{request.unit}" + (
            f" SPU {request.spu_id}" if request.spu_id >= 0 else "")
        room = self.capacity.reserve(spus, where)
        if room.done() and room.exception() is None:
            return False

        def back(done: Future) -> None:
            error = done.exception()
            if error is not None:  # the keeper logged why
                future.set_exception(error)
            elif self._stopping:
                future.set_exception(ScalingError(f"{where}: the job stopped while it waited for a worker"))
            else:
                self._queue.put((self.NORMAL, next(self._seq), _Roomed(request), future))

        room.add_done_callback(back)
        return True

    def _a_worker_came(self, request: ScaleRequest, why: NoWorkerLeft) -> bool:
        """Every worker is gone: wait (this thread: nothing else can run) for one the cluster starts in their
        place. False on a cluster that cannot start one, or when none joined in time."""
        if self.capacity is None:
            return False
        log.warning("topology %r: %s; the %s waits for a worker", self.topology.name, why, request.action)
        return self.capacity.await_a_worker(f"{request.action} of {self.topology.name}/{request.unit}")

    def _new_worker_spus(self, request: ScaleRequest) -> int:
        """SPUs `request` starts on worker processes (a replacement of lost ones never waits for room: 0; with
        no worker left it waits for one, _a_worker_came)."""
        if self.topology.unit(request.unit).where == "driver":
            return 0
        if request.action == "split":
            return 1
        if request.action not in ("rescale", "assign_workload"):
            return 0
        current = self.units[request.unit].ask(GetSpus(), timeout=self.op_timeout)
        if request.action == "rescale":
            return max(0, (request.spus or 0) - len(current))
        return len(set(request.assignment or ()) - set(current))

    def record_result(self, result: ScaleResult) -> None:
        self.history.append(result)
        for listener in list(self.listeners):
            try:
                listener(result)
            except Exception:
                log.exception("scaling listener failed")

    def _run_group(self, requests: list[ScaleRequest]) -> list[ScaleResult]:
        return AtomicGroup(self, requests).run()

    def send_command(self, request: ScaleRequest, prepared: Future | None = None,
              extra_upstream: dict[int, tuple[Any, str]] | None = None) -> Future:
        """Send one ScaleCommand; its reply future. `extra_upstream`: SPUs a group member upstream started."""
        upstream: dict[int, tuple[Any, str]] = {}
        for spec_input in self.topology.unit(request.unit).inputs:
            # The SPUs that emit this input: those of its source, or of the head that source is chained into.
            sender = self.topology.host_of(spec_input.source)
            spus = self.units[sender].ask(GetSpus(), timeout=self.op_timeout)
            for spu_id, mailbox in spus.items():
                upstream[spu_id] = (mailbox, spec_input.grouping.value)
        upstream.update(extra_upstream or {})
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
            prepared=prepared,
        ))
        return reply

    def wait_result(self, request: ScaleRequest, reply: Future) -> ScaleResult:
        try:
            return reply.result(timeout=self.op_timeout)
        except TimeoutError:
            raise ScalingError(
                f"{request.action} of {request.unit!r}{f' SPU {request.spu_id}' if request.spu_id >= 0 else ''} did not finish within "
                f"{self.op_timeout}s; see the log for the SPU that did not answer"
            ) from None
