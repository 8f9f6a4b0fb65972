"""A live spout rescale under at_least_once (esault.job.spout_rescale): shares of a source's input move
between its instances at their acked watermarks, without a checkpoint (docs/PROTOCOLS.md, "Spout rescale").

Frozen, slotted dataclasses; docstrings read "sender -> receiver: what it means".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class ReleaseShare:
    """unit -> spout SPU: the spout is to run `instances` instances; stop reading what this instance does not
    own at that count, and answer ShareReleased once its tuples of it in flight settled (message_timeout at
    most)."""

    rescale_id: int
    instances: int


@dataclass(frozen=True, slots=True)
class ShareReleased:
    """spout SPU -> unit: what it gave up, as a position at its acked watermarks (None: it could not say,
    `error` why); the SPU reads none of it any more."""

    rescale_id: int
    spu: int
    position: Any
    error: str


@dataclass(frozen=True, slots=True)
class TakeShare:
    """unit -> spout SPU: run as one of `instances` instances; read what this instance owns at that count and
    did not keep, from `position` (the givers' merged positions)."""

    rescale_id: int
    instances: int
    position: Any


@dataclass(frozen=True, slots=True)
class ShareTaken:
    """spout SPU -> unit: it seeked to what it took and reads it (`error`: why take_share() failed)."""

    rescale_id: int
    spu: int
    error: str
