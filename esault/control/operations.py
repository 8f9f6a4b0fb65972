"""The operations a controller returns: Trisk's three, plus the paper's split and merge as shorthands.

`reason` labels the scaling-event metric and the history: one of
esault.metrics.SCALING_REASONS, so the label set stays bounded.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping


@dataclass(frozen=True)
class AssignWorkload:
    """Give each SPU of `unit` these hash ranges ({spu: [(lo, hi), ...]}; a new id starts an SPU)."""

    unit: str
    assignment: dict[int, list[tuple[int, int]]]
    reason: str = "controller"


@dataclass(frozen=True)
class Rescale:
    """Run `unit` on `spus` SPUs with equal key ranges."""

    unit: str
    spus: int
    reason: str = "controller"


@dataclass(frozen=True)
class AssignResource:
    """Move SPU `spu` of `unit`, with its state, to worker process `worker`."""

    unit: str
    spu: int
    worker: str
    reason: str = "controller"


@dataclass(frozen=True)
class AssignLogic:
    """Run `unit` with bolt class `bolt` and `params` from now on; each key's state moves into the new code."""

    unit: str
    bolt: type
    params: Mapping[str, Any] = field(default_factory=dict)
    reason: str = "controller"


@dataclass(frozen=True)
class Split:
    """Cut SPU `spu`'s keys at hash `at` (None: where its sampled load halves); the upper part moves to a new SPU."""

    unit: str
    spu: int
    at: int | None = None
    reason: str = "controller"


@dataclass(frozen=True)
class Merge:
    """Move all of SPU `spu`'s keys into SPU `into` (None: its less loaded neighbour) and retire it."""

    unit: str
    spu: int
    into: int | None = None
    reason: str = "controller"


Operation = AssignWorkload | Rescale | AssignResource | AssignLogic | Split | Merge
