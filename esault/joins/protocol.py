"""MP-2PF messages between neighbouring chain workers (S2J), and the effects a worker returns.

Tuples are (seq, ts, value) triples; a side is "R" (left stream, travels
left -> right) or "S" (right stream, travels right -> left).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

LEFT, RIGHT = -1, 1


@dataclass(frozen=True, slots=True)
class SizeChange:
    """worker -> neighbour: how many R and S tuples I store now (so it balances its forwarding)."""

    r_size: int
    s_size: int


@dataclass(frozen=True, slots=True)
class TupleBlock:
    """worker -> neighbour: up to zeta tuples of one side moving on along the chain (oldest first)."""

    side: str
    block: int
    tuples: tuple


@dataclass(frozen=True, slots=True)
class Ack:
    """neighbour -> worker: block `block` of `side` was processed and stored; forget your copy."""

    side: str
    block: int


@dataclass(frozen=True, slots=True)
class Send:
    """Effect: send `message` to the neighbour in `direction` (LEFT or RIGHT)."""

    direction: int
    message: Any


class Joined(NamedTuple):
    """Effect: pair (r, s) matched query `query` (r and s are (seq, ts, value)). A NamedTuple: one per result
    pair, so it must be cheap to make."""

    query: str
    r: tuple
    s: tuple
