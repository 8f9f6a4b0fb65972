"""Whether a unit can run a scaling command: the refusals a UnitActor answers before anything starts.

Its own module because the rules are many (per action, per grouping, per guarantee) and pure: they read the
unit's declaration and a few facts about it now, start nothing and ask no one, so they are tested without
actors. Each refusal says what was asked, why it cannot be done, and what to do instead.
"""

from __future__ import annotations

from typing import Collection

from esault.dsl.bolt import Bolt
from esault.dsl.topology import Grouping, UnitSpec
from esault.errors import ScalingError
from esault.messages.control import ScaleCommand

__all__ = ["check_scalable"]


def check_scalable(spec: UnitSpec, cmd: ScaleCommand, spus: Collection[int], *, busy: bool,
                   retired_by_rescale: Collection[int] = (), proposed: bool = False,
                   exactly_once: bool = False) -> None:
    """Raise ScalingError when the unit declared by `spec`, running `spus` now, cannot run `cmd`. `busy`: it
    runs a reconfiguration already; `retired_by_rescale`: spout SPUs a live rescale stopped (replacing one is
    moot, not an error); `proposed`: a new bolt waits for an assign_logic; `exactly_once`: the job's guarantee."""
    name = spec.name
    if busy:
        raise ScalingError(f"unit {name!r} is already reconfiguring; retry when it finishes")
    if cmd.action == "replace":
        if cmd.spu_id not in spus and cmd.spu_id not in retired_by_rescale:
            raise ScalingError(f"unit {name!r} has no SPU {cmd.spu_id} to replace")
        return
    if spec.is_spout:
        raise ScalingError(f"spout {name!r} cannot split or merge (only bolts scale), nor rescale in an atomic "
                           "group: rescale it on its own with Job.rescale (its class needs an "
                           "esault_merge_positions hook)")
    if any(i.grouping is Grouping.GLOBAL for i in spec.inputs):
        raise ScalingError(f"bolt {name!r} reads with global_grouping: all its data goes to one SPU, "
                           "so splitting it cannot help")
    if cmd.action == "assign_logic":
        if not spec.per_key:
            raise ScalingError(f"unit {name!r} is not key grouped: its SPUs' state has no hand-off, so its "
                               "code cannot be swapped with its state yet")
        if not proposed:
            raise ScalingError(f"assign_logic of {name!r}: no new bolt was proposed (use Job.assign_logic)")
        return
    if cmd.action == "assign_resource":
        if cmd.spu_id not in spus:
            raise ScalingError(f"unit {name!r} has no SPU {cmd.spu_id}; its SPUs are {sorted(spus)}")
        if not spec.per_key:
            raise ScalingError(f"unit {name!r} is not key grouped: its SPUs' state has no hand-off, so they "
                               "cannot move to another worker yet")
        return
    if cmd.action == "assign_workload":
        if not spec.per_key:
            raise ScalingError(f"bolt {name!r} is not key grouped: its SPUs own no key ranges to assign; "
                               "change its parallelism with rescale")
    elif cmd.action != "rescale" and cmd.spu_id not in spus:
        raise ScalingError(f"bolt {name!r} has no SPU {cmd.spu_id}; its SPUs are {sorted(spus)}")
    if exactly_once and not spec.per_key:
        for part in (spec, *spec.stages):
            if getattr(part.cls, "on_checkpoint", None) is getattr(Bolt, "on_checkpoint"):
                continue
            if part is spec:
                raise ScalingError(f"bolt {name!r} takes part in checkpoints per instance (a sink staging "
                                   "epochs) and cannot split or merge under exactly_once: declare it with "
                                   "elastic=False")
            raise ScalingError(f"bolt {part.name!r}, fused into {name!r}'s SPUs, takes part in checkpoints per "
                               f"instance (a sink staging epochs), so {name!r} cannot split or merge under "
                               f"exactly_once: declare {name!r} with elastic=False, or {part.name!r} with "
                               "chain=False (SPUs of its own)")
    if cmd.action == "merge" and len(spus) < 2:
        raise ScalingError(f"bolt {name!r} has a single SPU: there is nothing to merge it into")
    if cmd.action == "rescale":
        if spec.per_key:
            raise ScalingError(f"bolt {name!r} is key grouped: rescale it with assign_workload (Job.rescale does)")
        if not isinstance(cmd.spus, int) or cmd.spus < 1:
            raise ScalingError(f"rescale of {name!r} to {cmd.spus!r} SPUs: give a whole number >= 1")
        if cmd.spus == len(spus):
            raise ScalingError(f"bolt {name!r} runs {cmd.spus} SPUs already; nothing to do")
        return
    if cmd.action not in ("split", "merge", "assign_workload"):
        raise ScalingError(f"unknown scaling action {cmd.action!r}; use 'split', 'merge', 'assign_workload', "
                           "'assign_resource', 'rescale' or 'replace'")
