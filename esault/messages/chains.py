"""S2J join chains whose workers are SPUs (esault.datapath.chain_spu): links between neighbours, membership.

Frozen, slotted dataclasses; docstrings read "sender -> receiver: what it means".
This package imports nothing else of esault's (tests/unit/test_import_graph.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class ChainLink:
    """chain SPU -> neighbouring chain SPU: link messages of the join chain's protocol, in order
    (esault.joins.protocol.to_wire lists); on the data lane, FIFO per pair of SPUs."""

    sender: int
    items: list[Any]


@dataclass(frozen=True, slots=True)
class ChainMembers:
    """unit -> its chain SPUs: every SPU of the chain (their order is their ids' order) and its mailbox."""

    spus: dict[int, Any]
