"""Key hand-off on a reconfiguration (docs/PROTOCOLS.md): routes, epoch markers, prepare, state moves.

Frozen, slotted dataclasses; docstrings read "sender -> receiver: what it means".
This package imports nothing else of esault's (tests/unit/test_import_graph.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class RouteSpec:
    """How a sender reaches one downstream unit: grouping, interval table, SPU mailboxes."""

    unit: str
    grouping: str
    table: list[Any] | None
    spus: dict[int, Any]
    version: int


@dataclass(frozen=True, slots=True)
class InstallRoutes:
    """unit -> upstream SPU: switch to this route, flush, then send EpochMarker to `notify`."""

    reconfig_id: int
    route: RouteSpec
    notify: dict[int, Any]


@dataclass(frozen=True, slots=True)
class EpochMarker:
    """upstream SPU -> giver SPU: nothing routed by the old table follows this marker."""

    reconfig_id: int
    sender: int


@dataclass(frozen=True, slots=True)
class PrepareGive:
    """unit -> giver SPU: after markers from all `upstream` SPUs, hand the keys of each (lo, hi, receiver)
    range to that receiver (`receivers` holds their mailboxes). `retire`: the giver stops after it."""

    reconfig_id: int
    ranges: tuple[tuple[int, int, int], ...]
    receivers: dict[int, Any]
    upstream: frozenset[int]
    retire: bool


@dataclass(frozen=True, slots=True)
class PrepareReceive:
    """unit -> receiver SPU: hold tuples of each (lo, hi, giver) range until that giver's state arrives."""

    reconfig_id: int
    ranges: tuple[tuple[int, int, int], ...]


@dataclass(frozen=True, slots=True)
class Prepared:
    """SPU -> unit: ready for reconfiguration `reconfig_id` in `role` ("giver" or "receiver")."""

    reconfig_id: int
    spu_id: int
    role: str


@dataclass(frozen=True, slots=True)
class StateHandoff:
    """giver SPU -> receiver SPU: encoded PE states of the moved keys; the giver is done with them.

    Large hand-offs travel in chunks (each well under the frame cap); `last` marks the final one. `states`
    is the chunk's (key, encoded state) pairs packed as one array (esault.transport.state_chunks).
    """

    reconfig_id: int
    giver_id: int
    states: bytes
    last: bool = True


@dataclass(frozen=True, slots=True)
class HandoffFinished:
    """SPU -> unit: its side of `reconfig_id` is complete (`role` giver or receiver)."""

    reconfig_id: int
    spu_id: int
    role: str
    moved_keys: int
    paused_seconds: float


@dataclass(frozen=True, slots=True)
class ForwardMarker:
    """giver SPU -> every downstream SPU, in band after its last output of the keys it hands off.

    The downstream SPU answers each receiver with MarkerSeen: everything the giver emitted for the
    moved keys is then ahead of anything the receivers will emit for them."""

    reconfig_id: int
    giver: int
    receivers: dict[int, Any]


@dataclass(frozen=True, slots=True)
class MarkerSeen:
    """downstream SPU -> receiver SPU: the giver's ForwardMarker reached `sender`."""

    reconfig_id: int
    giver: int
    sender: int


@dataclass(frozen=True, slots=True)
class PeersLost:
    """unit -> each live participant of its reconfiguration, past the switch, without exactly_once (which rolls
    back instead): these SPUs died with their worker. None of them sends a marker, a state or an answer any
    more, and what was sent to them is lost with them (acking replays it): no step waits for them."""

    reconfig_id: int
    spus: frozenset[int]


@dataclass(frozen=True, slots=True)
class CancelReconfiguration:
    """unit -> SPU: a reconfiguration held after prepare was called off (another operation of its
    atomic group failed) before any switch: forget its ranges; nothing moved."""

    reconfig_id: int
