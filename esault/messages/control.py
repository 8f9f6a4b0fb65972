"""The job's control: the coordinator, units and SPUs (scale commands, layouts, starts), and the prober.

Frozen, slotted dataclasses; docstrings read "sender -> receiver: what it means".
This package imports nothing else of esault's (tests/unit/test_import_graph.py).
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from esault.messages.handoff import PrepareReceive, RouteSpec


@dataclass(frozen=True, slots=True)
class ScaleCommand:
    """coordinator -> unit: one reconfiguration; the future gets a ScaleResult.

    `action` "split"/"merge" of SPU `spu_id`, "replace" of a lost SPU, "assign_workload" with
    `assignment` ({spu: [(lo, hi), ...]}; an id the unit does not have names a new SPU), or
    "assign_resource": SPU `spu_id` moves, with its state, to worker process `worker`, or "rescale" of a
    unit that is not key grouped to `spus` SPUs (a key-grouped one rescales with assign_workload)."""

    action: str
    spu_id: int
    upstream: dict[int, tuple[Any, str]]  # spu id -> (mailbox, grouping of its edge to this unit)
    downstream_routes: tuple[RouteSpec, ...]
    reply: Future
    at: int | None = None
    into: int | None = None
    reason: str = "manual"
    assignment: dict[int, list[tuple[int, int]]] | None = None
    worker: str | None = None
    spus: int | None = None  # "rescale" of a unit that is not key grouped: how many SPUs
    prepared: Future | None = None  # set: part of an atomic group; hold after prepare, tell it a HeldOperation


@dataclass(frozen=True, slots=True)
class ScaleResult:
    """unit -> coordinator (via future): what a reconfiguration did.

    A split or merge moves one SPU's hashes within [lo, hi] from `giver` to `receiver`; an
    assign_workload has giver = receiver = -1 and lo = hi = None. `moves` lists every moved range
    as (lo, hi, giver, receiver); `started` and `retired` the SPUs it started and stopped."""

    action: str
    unit: str
    giver: int
    receiver: int
    lo: int | None
    hi: int | None
    moved_keys: int
    paused_seconds: float
    seconds: float
    reason: str = "manual"
    moves: tuple[tuple[int, int, int, int], ...] = ()
    started: tuple[int, ...] = ()
    retired: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class GetRoutes:
    """coordinator -> unit (ask): the RouteSpec a sender using `grouping` needs to reach this unit."""

    grouping: str


@dataclass(frozen=True, slots=True)
class GetSpus:
    """coordinator -> unit (ask): {spu_id: mailbox} of its live SPUs."""


@dataclass(frozen=True, slots=True)
class GetLayout:
    """driver -> unit (ask): intervals and SPU ids, for status()."""


@dataclass(frozen=True, slots=True)
class SpuConfig:
    """unit -> new SPU actor: everything it needs to start."""

    topology: str
    unit: str
    spu_id: int
    intervals: tuple[tuple[int, int], ...] | None  # a key-grouped bolt SPU's hash ranges
    downstream: tuple[RouteSpec, ...]
    receive: PrepareReceive | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    instance: int = 0  # which of the unit's `instances` parallel instances this is (a spout's partition)
    instances: int = 1
    restore_epoch: int | None = None  # restore state (and a spout's position) from this completed checkpoint
    position: Any = None  # a spout's position at restore_epoch
    generation: int = 0  # how many times the unit relaunched all its SPUs (a rollback): shared ranges' generation
    replaces: tuple[int, ...] = ()  # a spout SPU's replacement: the lost SPUs whose shared blocks it leases again


@dataclass(frozen=True, slots=True)
class Probe:
    """prober -> SPU: queue behind the data, then report latency and load (PAPER_NOTES §5)."""

    probe_id: int
    sent_at: float
    reply_to: Any
    want_hashes: bool = True


@dataclass(frozen=True, slots=True)
class ProbeReturned:
    """SPU -> prober: `processed` tuples since its previous probe; recent key hashes for split points."""

    spu_id: int
    probe_id: int
    sent_at: float
    processed: int
    hashes: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class SpusChanged:
    """Job -> latency prober: the unit's SPUs and intervals after a reconfiguration."""

    spus: dict[int, Any]
    layout: dict[int, tuple[tuple[int, int], ...] | None]
    result: Any = None
