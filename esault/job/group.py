"""AtomicGroup: several units' reconfigurations applied as one, on the job's control thread.

Trisk applies a batch of operations atomically. Here each member (one
operation on one unit) runs the usual protocol with a hold after prepare:

1. prepare, upstream units first: each member starts its new SPUs and its
   givers and receivers prepare, then it holds. A downstream member counts the
   SPUs an upstream member started as upstream too (they will send to it), and
   its switch installs its routes in them.
2. decide: if every member held, the group is committed; if any was refused,
   failed or timed out, every held member is cancelled (nothing has moved:
   participants forget their ranges, started SPUs stop) and the group fails
   with the first member's error. All or nothing.
3. commit, downstream units first, each to completion before the next: a
   member's switch and hand-off then never see the SPU set of an upstream
   member change under them (the same rule the control thread keeps between
   single operations).

All or nothing holds up to the decision. A worker that dies after it fails
the member being committed and calls off the members not yet committed;
under exactly_once the job rolls back to its last checkpoint, keeping each
unit's routing layout as it is then: members completed, and a failed member
whose routes had switched, keep their new layout (with the checkpoint's
state); the others keep their old one. The error says which, so a caller can
apply the rest again. Rolling forward by itself is not built
(docs/CONTROL_PLANE.md, "Atomic groups").
"""

from __future__ import annotations

from concurrent.futures import FIRST_COMPLETED, Future, wait
from typing import Any, Protocol

from esault.dsl.topology import Topology
from esault.errors import ScalingError
from esault.messages.control import GetLayout, ScaleResult
from esault.job.unit_messages import CancelHeld, CommitHeld, HeldOperation


class Member(Protocol):
    """A member as the group sees it: one operation on one unit (the coordinator's ScaleRequest)."""

    @property
    def action(self) -> str: ...
    @property
    def unit(self) -> str: ...
    @property
    def spu_id(self) -> int: ...


class GroupCoordinator(Protocol):
    """What a group needs of the control thread that runs it (the ReconfigurationCoordinator, which hands
    itself down when it starts a group, so this module never imports it)."""

    topology: Topology
    units: dict[str, Any]
    op_timeout: float

    def send_command(self, request: Any, prepared: Future | None = None,
                     extra_upstream: dict[int, tuple[Any, str]] | None = None) -> Future: ...
    def wait_result(self, request: Any, reply: Future) -> ScaleResult: ...
    def record_result(self, result: ScaleResult) -> None: ...


class AtomicGroup:
    def __init__(self, coordinator: GroupCoordinator, requests: list[Member]) -> None:
        self.coordinator = coordinator
        self.topology = coordinator.topology
        order = {spec.name: i for i, spec in enumerate(self.topology.units)}  # topological
        self.requests = list(requests)
        self.members = sorted(requests, key=lambda r: order[r.unit])

    def run(self) -> list[ScaleResult]:
        held = self._prepare_all()
        results = self._commit_all(held)
        return [results[request.unit] for request in self.requests]

    def _prepare_all(self) -> list[tuple[Member, HeldOperation, Future]]:
        held: list[tuple[Member, HeldOperation, Future]] = []
        started: dict[str, dict[int, Any]] = {}  # member unit -> the SPUs its prepare started
        for request in self.members:
            prepared: Future = Future()
            try:
                reply = self.coordinator.send_command(request, prepared, self._started_upstream(request.unit, started))
                done, _ = wait([prepared, reply], timeout=self.coordinator.op_timeout, return_when=FIRST_COMPLETED)
                if reply.done():
                    reply.result()  # refused or aborted before it could hold: raises why
                if not prepared.done():
                    self.coordinator.units[request.unit].tell(CancelHeld(None, "its group timed out"))
                    raise ScalingError(f"it did not prepare within {self.coordinator.op_timeout}s")
            except Exception as exc:
                self._cancel(held, f"{_name(request)} in the same group failed")
                raise ScalingError(
                    f"atomic group of {len(self.members)} operations refused: {_name(request)}: {exc}; "
                    "nothing changed") from exc
            operation = prepared.result()
            held.append((request, operation, reply))
            started[request.unit] = operation.launched
        return held

    def _commit_all(self, held: list[tuple[Member, HeldOperation, Future]]) -> dict[str, ScaleResult]:
        results: dict[str, ScaleResult] = {}
        waiting = list(held)
        while waiting:
            request, operation, reply = waiting.pop()  # the most downstream member first
            unit = self.coordinator.units[request.unit]
            layout = unit.ask(GetLayout(), timeout=self.coordinator.op_timeout)
            unit.tell(CommitHeld(operation.reconfig_id))
            try:
                result = self.coordinator.wait_result(request, reply)
            except Exception as exc:
                self._cancel(waiting, f"{_name(request)} in the same group failed after the group was decided")
                switched = unit.ask(GetLayout(), timeout=self.coordinator.op_timeout) != layout
                done = ", ".join(_name(r) for r in self.members if r.unit in results) or "none"
                off = ", ".join(_name(r) for r, _, _ in waiting) or "none"
                raise ScalingError(
                    f"atomic group: {_name(request)} failed after every operation had prepared: {exc}. Completed "
                    f"before it: {done}. {_name(request)} had {'' if switched else 'not '}switched its routes: its "
                    f"unit keeps its {'new' if switched else 'old'} layout. Called off: {off}. Under exactly_once "
                    "the job rolls back to its last checkpoint; apply what is missing again") from exc
            self.coordinator.record_result(result)
            results[request.unit] = result
        return results

    def _started_upstream(self, unit: str, started: dict[str, dict[int, Any]]) -> dict[int, tuple[Any, str]]:
        """SPUs that group members upstream of `unit` started: they will send to it once they switch."""
        extra: dict[int, tuple[Any, str]] = {}
        for spec_input in self.topology.unit(unit).inputs:
            for spu, mailbox in started.get(self.topology.host_of(spec_input.source), {}).items():
                extra[spu] = (mailbox, spec_input.grouping.value)
        return extra

    def _cancel(self, held: list[tuple[Member, HeldOperation, Future]], reason: str) -> None:
        for request, operation, reply in held:
            self.coordinator.units[request.unit].tell(CancelHeld(operation.reconfig_id, reason))
        for request, _, reply in held:  # each ends with "aborted": wait, so the units are free again
            try:
                reply.result(timeout=self.coordinator.op_timeout)
            except Exception:  # noqa: BLE001 - the expected outcome of a cancel
                pass


def _name(request: Member) -> str:
    spu = f" SPU {request.spu_id}" if request.spu_id >= 0 else ""
    return f"{request.action} of {request.unit!r}{spu}"
