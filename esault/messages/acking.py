"""Tuple-tree tracking (docs/PROTOCOLS.md): spout SPUs, SPUs and the ack server.

Frozen, slotted dataclasses; docstrings read "sender -> receiver: what it means".
This package imports nothing else of esault's (tests/unit/test_import_graph.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class AckUpdate:
    """SPU -> the spout SPU that owns these roots (or the ack server, which relays it there): XOR deltas per
    root (input edge ^ child edges) of processed tuples."""

    deltas: dict[int, int]


@dataclass(frozen=True, slots=True)
class AckFail:
    """SPU -> the spout SPU that owns `root` (or the ack server, which relays it): processing a tuple of
    `root` failed for `reason`."""

    root: int
    reason: str


@dataclass(frozen=True, slots=True)
class RegisterOwner:
    """spout SPU -> ack server: acks for trees owned by `owner` (an owner key, esault.reliability.roots) go
    to `mailbox`; the ack server relays those it gets and says where it is to a worker that asks."""

    owner: int
    mailbox: Any


@dataclass(frozen=True, slots=True)
class OwnerGone:
    """spout SPU -> ack server: it stopped; the ack server forgets it (its later acks are dropped, FailPending
    no longer goes to it). Only if `mailbox` is the one registered for `owner`, which must be in the sender's
    own process (esault.cluster.authority checks it)."""

    owner: int
    mailbox: Any


@dataclass(frozen=True, slots=True)
class FindOwner:
    """SPU in a worker -> ack server: where is the spout SPU with owner key `owner`? The answer (OwnerAt) goes
    to `process`'s host, which must be the sender's own process (esault.cluster.authority checks it)."""

    owner: int
    process: str


@dataclass(frozen=True, slots=True)
class OwnerAt:
    """ack server -> a worker's host: acks of job `topology` for owner key `owner` go to `mailbox` directly."""

    topology: str
    owner: int
    mailbox: Any


@dataclass(frozen=True, slots=True)
class DeadLettered:
    """SPU -> ack server (driver): a tuple was given up after `attempts` tries (a spout's msg_id, or a bolt's input)."""

    unit: str
    spu_id: int
    key: Any
    value: Any
    error: str
    attempts: int
    msg_id: Any = None


@dataclass(frozen=True, slots=True)
class SpoutProgress:
    """spout SPU -> ack server (driver): it is `finished` (no more next_tuple), `drained` (nothing in flight).

    Sent when either changes; `untracked` counts tuples it emitted outside any tree so far; `error` says why
    it finished early (open() raised, next_tuple() raised max_spout_errors times in a row), "" if it did not.
    """

    spu_id: int
    finished: bool
    drained: bool
    untracked: int
    error: str = ""


@dataclass(frozen=True, slots=True)
class FailPending:
    """job -> ack server -> every spout SPU: fail every tree in flight now (a worker died and its SPUs were
    replaced, or the job rolled back), so spouts replay at once instead of after message_timeout."""

    reason: str


@dataclass(frozen=True, slots=True)
class RangeRequest:
    """spout SPU -> ack server (driver): lease the next free block of its unit's shared space [0, size) (a
    file's bytes; esault.reliability.shared_ranges). `done` is what every instance of this `generation`
    restored as read (the merged position), `block` the most bytes one lease covers, `replaces` the lost SPUs
    this one replaced (their blocks are leased again first; at_least_once)."""

    owner: int
    unit: str
    generation: int
    size: int
    done: list[tuple[int, int]]
    block: int
    replaces: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class RangeGrant:
    """ack server -> spout SPU: [start, end) of the space is this SPU's to read; start None: nothing is left,
    or `error` says why the request was refused."""

    generation: int
    start: int | None
    end: int | None
    error: str = ""
