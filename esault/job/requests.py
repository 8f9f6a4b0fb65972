"""Operations checked and turned into ScaleRequests: one place for Job's methods, controllers and atomic groups.

Everything here is refused before anything starts, with a message that says
what was wrong: a malformed assignment, a class that is not a bolt or whose
params do not fit, a parallelism that is not a whole number.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Mapping

from esault.control.operations import AssignLogic, AssignResource, AssignWorkload, Merge, Operation, Rescale, Split
from esault.config import MAX_SPUS
from esault.dsl.bolt import Bolt
from esault.dsl.topology import Topology
from esault.errors import ScalingError
from esault.keyhash import KEY_SPACE_MAX
from esault.job.coordinator import ScaleRequest


def spu_limit(topology: Topology, unit: str) -> int:
    """The most SPUs an operation may give `unit`: its max_spus, or its declared parallelism if larger (both
    at most MAX_SPUS). TopologyError for a unit the topology does not have."""
    spec = topology.unit(unit)
    return max(spec.elasticity.max_spus, spec.parallelism)


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def workload_request(unit: str, assignment: Mapping[int, Iterable[tuple[int, int]]], reason: str,
                     limit: int = MAX_SPUS) -> ScaleRequest:
    """Checked before anything is built from it: at most `limit` SPUs, each range [lo, hi] in the key space."""
    try:
        assignment = dict(assignment)
    except (TypeError, ValueError):
        raise ScalingError(f"assign_workload takes {{spu: [(lo, hi), ...]}}, got {assignment!r:.200}; "
                           "see Job.workload(unit) for the current one") from None
    if len(assignment) > limit:
        raise ScalingError(f"assign_workload of {unit!r} names {len(assignment)} SPUs; {unit!r} runs at most {limit} "
                           f"(its max_spus; raise it with set_bolt(..., max_spus=N), up to MAX_SPUS={MAX_SPUS})")
    try:
        plain = {spu: [(lo, hi) for lo, hi in ranges] for spu, ranges in assignment.items()}
    except (TypeError, ValueError):
        raise ScalingError(f"assign_workload takes {{spu: [(lo, hi), ...]}}, got {assignment!r:.200}; "
                           "see Job.workload(unit) for the current one") from None
    for spu, ranges in plain.items():
        if not _whole(spu):
            raise ScalingError(f"assign_workload of {unit!r}: SPU ids are whole numbers (a negative one starts an "
                               f"SPU), got {spu!r:.40}")
        for lo, hi in ranges:
            if not (_whole(lo) and _whole(hi) and 0 <= lo <= hi <= KEY_SPACE_MAX):
                raise ScalingError(f"assign_workload of {unit!r}: SPU {spu}'s range [{lo!r:.40}, {hi!r:.40}] is not "
                                   f"within the key space: give whole numbers 0 <= lo <= hi <= {KEY_SPACE_MAX}")
    return ScaleRequest("assign_workload", unit, -1, None, None, reason, plain)


def split_request(unit: str, spu: Any, at: Any, reason: str) -> ScaleRequest:
    if not _whole(spu) or (at is not None and not (_whole(at) and 0 <= at <= KEY_SPACE_MAX)):
        raise ScalingError(f"split of {unit!r} SPU {spu!r:.40} at {at!r:.40}: give an SPU id and a hash "
                           f"0 <= at <= {KEY_SPACE_MAX}, or at=None (where its load halves)")
    return ScaleRequest("split", unit, spu, at, None, reason)


def merge_request(unit: str, spu: Any, into: Any, reason: str) -> ScaleRequest:
    if not _whole(spu) or (into is not None and not _whole(into)):
        raise ScalingError(f"merge of {unit!r} SPU {spu!r:.40} into {into!r:.40}: give SPU ids (into=None: "
                           "its less loaded neighbour)")
    return ScaleRequest("merge", unit, spu, None, into, reason)


def logic_request(topology: Topology, unit: str, bolt: Any, params: Mapping[str, Any] | None,
                  reason: str) -> ScaleRequest:
    if not (isinstance(bolt, type) and issubclass(bolt, Bolt)):
        raise ScalingError(f"assign_logic of {unit!r} needs a Bolt subclass, got {bolt!r}")
    try:
        spec = dataclasses.replace(topology.unit(unit), cls=bolt, params=dict(params or {}))
        spec.instantiate()  # the params must fit the new class: fail here, not on a worker
    except (TypeError, ValueError) as exc:
        raise ScalingError(f"assign_logic of {unit!r}: {bolt.__name__}(**params) cannot be built: {exc}") from None
    return ScaleRequest("assign_logic", unit, -1, None, None, reason, logic=spec)


def version_of(request: ScaleRequest) -> str | None:
    """The declared version an assign_logic request runs (None: code no version names)."""
    spec = request.logic
    named = [v for v, (cls, kwargs) in spec.versions.items() if cls is spec.cls and dict(kwargs) == spec.params]
    return named[0] if named else None


def rescale_request(unit: str, spus: Any, workload: Mapping[int, list[tuple[int, int]]], reason: str,
                    limit: int = MAX_SPUS) -> ScaleRequest:
    """Key grouped (`workload` not empty): equal shares, the existing SPUs in key order taking the first
    slices; otherwise SPUs start or the newest retire. At most `limit` SPUs, refused before anything is built."""
    if not _whole(spus) or spus < 1:
        raise ScalingError(f"rescale of {unit!r} to {spus!r:.40} SPUs: give a whole number >= 1")
    if spus > limit:
        raise ScalingError(f"rescale of {unit!r} to {spus} SPUs: it runs at most {limit} (its max_spus; raise it "
                           f"with set_bolt(..., max_spus=N), up to MAX_SPUS={MAX_SPUS})")
    current = sorted(workload.items(), key=lambda item: item[1][0][0])
    if not current:
        return ScaleRequest("rescale", unit, -1, None, None, reason, spus=spus)
    names = [spu for spu, _ in current[:spus]] + [-(i + 1) for i in range(spus - len(current))]
    size = KEY_SPACE_MAX + 1
    target = {name: [(i * size // spus, (i + 1) * size // spus - 1)] for i, name in enumerate(names)}
    return workload_request(unit, target, reason)


def operation_request(topology: Topology, op: Operation, workload: Mapping[int, list[tuple[int, int]]],
                      reason: str | None = None) -> ScaleRequest:
    """The request for a controller's operation; `workload`: its unit's now (a Rescale needs it)."""
    why = reason or op.reason
    if isinstance(op, AssignWorkload):
        return workload_request(op.unit, op.assignment, why, spu_limit(topology, op.unit))
    if isinstance(op, Rescale):
        return rescale_request(op.unit, op.spus, workload, why, spu_limit(topology, op.unit))
    if isinstance(op, AssignResource):
        return ScaleRequest("assign_resource", op.unit, op.spu, None, None, why, worker=op.worker)
    if isinstance(op, AssignLogic):
        return logic_request(topology, op.unit, op.bolt, op.params, why)
    if isinstance(op, Split):
        return split_request(op.unit, op.spu, op.at, why)
    if isinstance(op, Merge):
        return merge_request(op.unit, op.spu, op.into, why)
    raise ScalingError(f"{op!r} is not an operation; use AssignWorkload, Rescale, AssignResource, AssignLogic, "
                       "Split or Merge (esault.control)")
