"""Runs one Controller against a job: snapshot, decide, apply, on the driver, every `interval` seconds."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Protocol

from esault.clock import Clock
from esault.control.controller import Controller
from esault.control.events import ControlEvents
from esault.control.operations import (
    AssignLogic, AssignResource, AssignWorkload, Merge, Operation, Rescale, Split,
)
from esault.control.snapshot import MetricsSnapshot, SnapshotBuilder
from esault.dsl.topology import Topology
from esault.metrics.registry import SCALING_REASONS
from esault.metrics.stats import RETIRED_SPU, SpuStats
from esault.messages.control import ScaleResult
from esault.thread_names import os_named
from esault.user_errors import UserErrorLog, user_frame

log = logging.getLogger("esault.control")


class ControlledJob(Protocol):
    """What a runner reads and calls on the job it controls (esault.job.job.Job is one): the job starts
    its runners and hands itself down, so this module never imports the job."""

    topology: Topology
    clock: Clock
    events: ControlEvents

    def spu_counters(self) -> list[SpuStats]: ...
    def layout(self, unit: str) -> dict[int, tuple[tuple[int, int], ...] | None]: ...
    def worker_of(self, spu_id: int) -> str | None: ...
    def workers(self) -> list[str]: ...
    def apply(self, operations: Iterable[Operation], timeout: float | None = ...,
              reason: str | None = ...) -> list[ScaleResult]: ...
    def assign_workload(self, unit: str, assignment: Mapping[int, Iterable[tuple[int, int]]],
                        timeout: float | None = ..., reason: str = ...) -> ScaleResult: ...
    def rescale(self, unit: str, spus: int, timeout: float | None = ..., reason: str = ...) -> ScaleResult: ...
    def assign_resource(self, unit: str, spu: int, worker: str, timeout: float | None = ...,
                        reason: str = ...) -> ScaleResult: ...
    def assign_logic(self, unit: str, bolt: type, params: Mapping[str, Any] | None = ...,
                     timeout: float | None = ..., reason: str = ...) -> ScaleResult: ...
    def split(self, unit: str, spu: int, at: int | None = ..., timeout: float | None = ...,
              reason: str = ...) -> ScaleResult: ...
    def merge(self, unit: str, spu: int, into: int | None = ..., timeout: float | None = ...,
              reason: str = ...) -> ScaleResult: ...


@dataclass(frozen=True)
class Decision:
    """One operation a controller asked for, and what became of it (the reconfiguration history)."""

    time: float
    controller: str
    operation: Operation
    result: ScaleResult | None
    error: str | None


class ControllerRunner:
    """A daemon thread per controller. Operations go through the job's control thread like every other
    reconfiguration, so they never overlap a checkpoint, a rollback or each other.

    It calls decide() every `interval` seconds, and also as soon as a probe or a change is recorded when
    the controller sets `wake_on_probes` (the latency rules react to each probe, not to a period)."""

    def __init__(self, job: ControlledJob, controller: Controller, history: int = 200) -> None:
        if not isinstance(controller, Controller):
            raise TypeError(f"a controller must subclass esault.control.Controller, got {type(controller).__name__}")
        self.job = job
        self.controller = controller
        self.name = type(controller).__name__
        self.builder = SnapshotBuilder()
        self.decisions: deque[Decision] = deque(maxlen=history)
        self.decide_errors = UserErrorLog()
        """decide() raising, logged as a user error is: the first few with their traceback, then a count."""
        self._cursor = job.events.cursor()
        self._stop = threading.Event()
        self._wake = threading.Event()
        if getattr(controller, "wake_on_probes", False):
            job.events.on_record(self._wake.set)
        self._thread = threading.Thread(target=os_named(self._run), name=f"esault-controller-{self.name}",
                                        daemon=True)

    def start(self) -> "ControllerRunner":
        self._thread.start()
        return self

    def stop(self, timeout: float = 30.0) -> None:
        self.job.events.off_record(self._wake.set)
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)
        self.decide_errors.close(f"controller {self.name}: decide()")

    def _run(self) -> None:
        interval = max(0.05, float(getattr(self.controller, "interval", 1.0)))
        while True:
            self._wake.wait(interval)  # a period (or an event), not synchronisation
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                snapshot = self.snapshot()
            except Exception:  # noqa: BLE001 - the job is stopping, or an actor is gone for a moment
                log.debug("controller %s: no snapshot this period", self.name, exc_info=True)
                continue
            try:
                operations = list(self.controller.decide(snapshot) or ())
            except Exception as exc:  # noqa: BLE001 - the controller's bug: counted, called again next period
                self.decide_errors("controller %s: decide() raised %r%s; it is called again next period",
                                   self.name, exc, user_frame(exc), exc=exc)
                continue
            if self._stop.is_set():
                return
            if len(operations) == 1:
                self._apply(operations[0])
            elif operations:
                self._apply_group(operations)

    def snapshot(self) -> MetricsSnapshot:
        events, self._cursor, dropped = self.job.events.since(self._cursor)
        if dropped:
            log.warning("controller %s fell behind: %d probes or changes were dropped unread", self.name, dropped)
        return take_snapshot(self.job, self.builder, events, dropped)

    def _apply(self, operation: Operation) -> None:
        result: ScaleResult | None = None
        error: Exception | None = None
        try:
            result = self._execute(operation)
            log.info("controller %s: %s done: %d keys moved in %.1f ms", self.name, operation,
                     result.moved_keys, result.seconds * 1000)
        except Exception as exc:  # noqa: BLE001 - a refused operation is the controller's to handle
            error = exc
            log.warning("controller %s: %s refused: %s", self.name, operation, exc)
        self._record(operation, result, error)

    def _apply_group(self, operations: list[Operation]) -> None:
        """The operations one decide() returned apply together, atomically (Job.apply): all or none."""
        results: list[ScaleResult | None] = [None] * len(operations)
        error: Exception | None = None
        try:
            for op in operations:
                self._check(op)
            results = list(self.job.apply(operations, reason=None))
            log.info("controller %s: %d operations applied atomically", self.name, len(operations))
        except Exception as exc:  # noqa: BLE001 - a refused group is the controller's to handle
            error = exc
            log.warning("controller %s: atomic group of %d operations refused: %s", self.name, len(operations), exc)
        for operation, result in zip(operations, results):
            self._record(operation, result, error)

    def _record(self, operation: Operation, result: ScaleResult | None, error: Exception | None) -> None:
        self.decisions.append(Decision(time.time(), self.name, operation, result,
                                       None if error is None else str(error)))
        try:
            self.controller.applied(operation, result, error)
        except Exception:
            log.exception("controller %s: applied() raised", self.name)

    def _check(self, op: Operation) -> None:
        if not isinstance(op, (AssignWorkload, Rescale, AssignResource, AssignLogic, Split, Merge)):
            raise TypeError(f"controller {self.name} returned {op!r}, which is not an operation; return "
                            "AssignWorkload, Rescale, AssignResource, AssignLogic, Split or Merge (esault.control)")
        if op.reason not in SCALING_REASONS:  # a metric label: the set must stay bounded
            raise ValueError(f"controller {self.name} gave {op!r} the reason {op.reason!r}; use one of "
                             f"{', '.join(SCALING_REASONS)} (the log and the history name the controller)")

    def _execute(self, op: Operation) -> ScaleResult:
        job = self.job
        self._check(op)
        reason = op.reason
        if isinstance(op, AssignWorkload):
            return job.assign_workload(op.unit, op.assignment, reason=reason)
        if isinstance(op, Rescale):
            return job.rescale(op.unit, op.spus, reason=reason)
        if isinstance(op, AssignResource):
            return job.assign_resource(op.unit, op.spu, op.worker, reason=reason)
        if isinstance(op, AssignLogic):
            return job.assign_logic(op.unit, op.bolt, dict(op.params), reason=reason)
        if isinstance(op, Split):
            return job.split(op.unit, op.spu, op.at, reason=reason)
        return job.merge(op.unit, op.spu, op.into, reason=reason)


def take_snapshot(job: ControlledJob, builder: SnapshotBuilder, events: list | tuple = (),
                  dropped: int = 0) -> MetricsSnapshot:
    """Read every SPU's counters, the layout and the placement of `job` now; rates against the builder's
    previous reading; `events`: the ControlEvents read since then."""
    topology = job.topology
    rows = [(s.unit, s.spu, s.as_dict()) for s in job.spu_counters() if s.spu != RETIRED_SPU]
    units = [(spec.name, "spout" if spec.is_spout else "bolt", spec.per_key,
              tuple(i.source for i in spec.inputs)) for spec in topology.units]
    layout = {spec.name: job.layout(spec.name) for spec in topology.units}
    hosts = {spu: job.worker_of(spu) for spus in layout.values() for spu in spus}
    workers = job.workers()
    return builder.update(job.clock.now(), rows, units, layout, hosts, workers, events, dropped)


def decisions_as_dicts(decisions: Any) -> list[dict[str, Any]]:
    """Decisions as plain dicts (for status and the REST API)."""
    return [{"time": d.time, "controller": d.controller, "operation": repr(d.operation),
             "moved_keys": d.result.moved_keys if d.result else None,
             "seconds": d.result.seconds if d.result else None, "error": d.error} for d in decisions]
