"""The in-process messages between a job's driver, its control thread and its UnitActors.

Its own module because these never cross the wire (a ProposeLogic holds a class, a held operation its
mailboxes), so they are not in esault.messages, and because the driver's parts (the coordinator, atomic groups,
spout rescales, lost SPUs) speak them without needing the actor itself. Each docstring: "sender -> receiver
(tell or ask): what it means".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from esault.dsl.topology import UnitSpec

__all__ = ["AbortReconfiguration", "CancelHeld", "CommitHeld", "GetOperation", "HeldOperation", "LaunchSpus",
           "ProposeLogic", "ResizeSpout", "SpusLost"]


class LaunchSpus:
    """driver -> unit (ask), in this process only: start the initial SPUs (restored from `epoch` if given;
    `instances`: a non-keyed bolt's instances whose states that checkpoint holds)."""

    def __init__(self, epoch: int | None = None, positions: dict[int, Any] | None = None,
                 instances: list[int] | None = None) -> None:
        self.epoch = epoch
        self.positions = positions or {}
        self.instances = instances


class ResizeSpout:
    """control thread -> unit (ask), in this process only: a spout with a merge hook runs `spus` instances from
    its next relaunch on (Job.rescale of a spout: a rollback follows at once). Later rollbacks keep it."""

    def __init__(self, spus: int) -> None:
        self.spus = spus


class AbortReconfiguration:
    """job -> unit (tell), in this process only: fail the split or merge in flight now (a worker died); the
    rollback that follows discards its SPUs. Frees the control thread, which waits for that result."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


class SpusLost:
    """job -> unit (tell), in this process only, without exactly_once (no rollback): these SPUs died with their
    worker. An operation still preparing waits for the dead in vain: it is called off (nothing moved). One past
    its switch must finish: it goes on without them (PeersLost to its live participants). Either way their
    replacements follow it, queued behind it by the job's coordinator."""

    def __init__(self, spus: frozenset[int]) -> None:
        self.spus = spus


class GetOperation:
    """driver -> unit (ask), in this process only: the reconfiguration the unit is running, as a line of text
    (its action, SPU and phase), or None when it runs none."""


class ProposeLogic:
    """coordinator -> unit (ask), in this process only: the bolt spec the next "assign_logic" command runs.
    A spec holds a class, so it never goes into a wire message."""

    def __init__(self, spec: UnitSpec) -> None:
        self.spec = spec


@dataclass(frozen=True)
class HeldOperation:
    """unit -> coordinator (a ScaleCommand's `prepared` future): this unit's part of an atomic group is
    prepared and waits. `launched`: the SPUs it started, which a downstream member counts as upstream."""

    unit: str
    reconfig_id: int
    launched: dict[int, Any]


class CommitHeld:
    """coordinator -> unit (tell), in this process only: every member of the group prepared; switch now."""

    def __init__(self, reconfig_id: int) -> None:
        self.reconfig_id = reconfig_id


class CancelHeld:
    """coordinator -> unit (tell), in this process only: another member failed; call this part off
    (`reconfig_id` None: whichever held operation the unit has, before it said which)."""

    def __init__(self, reconfig_id: int | None, reason: str) -> None:
        self.reconfig_id = reconfig_id
        self.reason = reason
