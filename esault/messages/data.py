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
