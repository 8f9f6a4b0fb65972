"""The operations a controller returns: Trisk's three, plus the paper's split and merge as shorthands."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AssignWorkload:
    """Give each SPU of `unit` these hash ranges ({spu: [(lo, hi), ...]}; a new id starts an SPU)."""

    unit: str
    assignment: dict[int, list[tuple[int, int]]]


@dataclass(frozen=True)
class Rescale:
    """Run `unit` on `spus` SPUs with equal key ranges."""

    unit: str
    spus: int


@dataclass(frozen=True)
class AssignResource:
    """Move SPU `spu` of `unit`, with its state, to worker process `worker`."""

    unit: str
    spu: int
    worker: str


@dataclass(frozen=True)
class Split:
    unit: str
    spu: int
    at: int | None = None


@dataclass(frozen=True)
class Merge:
    unit: str
    spu: int
    into: int | None = None


Operation = AssignWorkload | Rescale | AssignResource | Split | Merge
