"""The data path's messages: tuples between SPUs, and the timers that drive an actor.

Frozen, slotted dataclasses; docstrings read "sender -> receiver: what it means".
This package imports nothing else of esault's (tests/unit/test_import_graph.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class DataBatch:
    """upstream SPU -> SPU: tuples routed to it, as columns in emission order, and the trees they are part of.

    `roots[i]` is a tuple tree (one spout batch) this batch belongs to and
    `edges[i]` this batch's edge id in it (both empty when acking is off):
    delivery is tracked per batch, not per tuple (docs/PROTOCOLS.md).
    """

    sender: int
    source: str
    keys: list[Any]
    values: list[Any]
    roots: list[int]
    edges: list[int]

    def __post_init__(self) -> None:
        if len(self.keys) != len(self.values) or len(self.roots) != len(self.edges):
            raise ValueError(f"DataBatch columns differ in length: {len(self.keys)} keys, {len(self.values)} values, "
                             f"{len(self.roots)} roots, {len(self.edges)} edges")


@dataclass(frozen=True, slots=True)
class Tick:
    """ticker -> actor: time passed; run timers (expiry, backoff, timeouts)."""

    now: float


@dataclass(frozen=True, slots=True)
class Pump:
    """spout SPU -> itself: call next_tuple() again (lets acks interleave)."""


@dataclass(frozen=True, slots=True)
class Drain:
    """driver -> SPU (ask): a barrier; replies once earlier messages are processed and flushed."""


@dataclass(frozen=True, slots=True)
class Watermark:
    """upstream SPU -> SPU, in band after the tuples it follows: `sender` sends no tuple older than `watermark`
    from now on (event-time progress; a window subtracts its own bound). `idle`: it has nothing to send for now,
    leave it out of the minimum until it sends again. `final`: it sends nothing more (it retired)."""

    sender: int
    watermark: float
    idle: bool = False
    final: bool = False


@dataclass(frozen=True, slots=True)
class WatermarkInputs:
    """unit (driver) -> SPU: upstream SPUs whose watermarks it combines start (`added`: each holds its watermark
    until it sends one) or are gone for good (`removed`: lost, or started for an operation called off)."""

    added: frozenset[int]
    removed: frozenset[int] = frozenset()
