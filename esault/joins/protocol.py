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


# --- a chain whose workers are SPUs (esault.joins.node): link control beyond MP-2PF ---


@dataclass(frozen=True, slots=True)
class Mark:
    """worker -> neighbour, at checkpoint `epoch`'s barrier: I send no block towards you until your Resume."""

    epoch: int


@dataclass(frozen=True, slots=True)
class Resume:
    """worker -> neighbour: my snapshot of `epoch` is taken; send me blocks again."""

    epoch: int


@dataclass(frozen=True, slots=True)
class Token:
    """Flush round of `side`: every tuple of it with seq <= `bound` went on ahead of this token."""

    side: str
    bound: int
    origin: int


@dataclass(frozen=True, slots=True)
class Done:
    """The far end got the Token: every pair of the `side` tuples with seq <= `bound` is out (back to origin)."""

    side: str
    bound: int
    origin: int


@dataclass(frozen=True, slots=True)
class Quiet:
    """worker -> the tail it takes over: no more blocks from me (a merge of the tail into me)."""


@dataclass(frozen=True, slots=True)
class Link:
    """old tail -> new tail, first on their new link: where the S sequence stands (an added worker)."""

    s_seq: int
    s_last_ts: float | None


@dataclass(frozen=True, slots=True)
class Handoff:
    """retiring tail -> its left neighbour, last on their link: its whole state, to merge (a removed worker)."""

    state: dict


@dataclass(frozen=True, slots=True)
class Flushed:
    """Effect: the flush round of `side` up to `bound` is done; inputs of seq <= bound owe no pair."""

    side: str
    bound: int


_WIRE = {SizeChange: "Z", TupleBlock: "B", Ack: "A", Mark: "M", Resume: "U", Token: "T", Done: "D", Quiet: "Q",
         Link: "L", Handoff: "H"}
_BY_CODE = {code: cls for cls, code in _WIRE.items()}


def to_wire(message: Any) -> list:
    """A link message as a plain list (codec values only) for ChainLink.items."""
    code = _WIRE[type(message)]
    if code == "B":
        return [code, message.side, message.block, [list(t) for t in message.tuples]]
    return [code, *(getattr(message, f) for f in message.__slots__)]


def from_wire(item: Any) -> Any:
    """The inverse of to_wire; ValueError saying what is malformed (a frame is never trusted)."""
    if not isinstance(item, (list, tuple)) or not item or item[0] not in _BY_CODE:
        raise ValueError(f"not a chain link message: {item!r:.80}")
    cls = _BY_CODE[item[0]]
    fields = cls.__slots__
    if len(item) != 1 + len(fields):
        raise ValueError(f"chain link message {cls.__name__} needs {len(fields)} fields, got {len(item) - 1}")
    args = list(item[1:])
    if cls is TupleBlock:
        if not isinstance(args[2], (list, tuple)) or not all(isinstance(t, (list, tuple)) and len(t) == 4
                                                              for t in args[2]):
            raise ValueError("chain link TupleBlock: tuples must be [seq, ts, value, key] lists")
        args[2] = tuple(tuple(t) for t in args[2])
    if cls in (TupleBlock, Ack, Token, Done) and args[0] not in ("R", "S"):
        raise ValueError(f"chain link {cls.__name__}: side must be 'R' or 'S', got {args[0]!r:.20}")
    for name, value in zip(fields, args):
        if name in ("block", "epoch", "bound", "origin", "r_size", "s_size", "s_seq") and (
                not isinstance(value, int) or isinstance(value, bool)):
            raise ValueError(f"chain link {cls.__name__}.{name} must be an int, got {value!r:.20}")
    if cls is Handoff and not isinstance(args[0], dict):
        raise ValueError("chain link Handoff: state must be a map")
    return cls(*args)
