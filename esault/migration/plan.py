"""What a reconfiguration of one unit changes: the key ranges that move, the SPUs it starts and retires.

Every operation of the control plane reduces to a `WorkloadPlan` (Trisk's
three-part abstraction, docs/CONTROL_PLANE.md): a split, a merge or an
`assign_workload` diff two routing tables; `assign_resource` starts a new SPU
on another worker and moves all of an SPU's ranges to it; `assign_logic`
does that for every SPU with the new code. The plan is a plain value,
computed here without actors, so the protocol that carries it out
(`esault.migration.reconfiguration`) has one input shape.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping

from esault.errors import ScalingError
from esault.keyhash import KEY_SPACE_MAX
from esault.routing.interval_table import IntervalTable


@dataclass(frozen=True, slots=True)
class Move:
    """The hashes [lo, hi] go from SPU `giver` to SPU `receiver`, with their PEs' state."""

    lo: int
    hi: int
    giver: int
    receiver: int


@dataclass(frozen=True)
class WorkloadPlan:
    """One atomic reconfiguration of a unit.

    `table` is the routing table after it (None for a unit that is not key
    grouped); `started` SPUs are new (their placement in `placement`, None:
    the resource manager chooses), `retired` ones stop once they handed off.
    """

    table: IntervalTable | None
    moves: tuple[Move, ...] = ()
    started: tuple[int, ...] = ()
    retired: tuple[int, ...] = ()
    placement: Mapping[int, str | None] = field(default_factory=dict)

    @property
    def givers(self) -> frozenset[int]:
        return frozenset(m.giver for m in self.moves) | frozenset(self.retired)

    @property
    def receivers(self) -> frozenset[int]:
        return frozenset(m.receiver for m in self.moves)

    def outgoing(self, spu: int) -> tuple[tuple[int, int, int], ...]:
        """(lo, hi, receiver) of every range `spu` gives, in key order."""
        return tuple((m.lo, m.hi, m.receiver) for m in self.moves if m.giver == spu)

    def incoming(self, spu: int) -> tuple[tuple[int, int, int], ...]:
        """(lo, hi, giver) of every range `spu` receives, in key order."""
        return tuple((m.lo, m.hi, m.giver) for m in self.moves if m.receiver == spu)

    @property
    def empty(self) -> bool:
        return not (self.moves or self.started or self.retired)


def diff_tables(old: IntervalTable, new: IntervalTable) -> tuple[Move, ...]:
    """The ranges whose owner differs between two tables, in key order, adjacent ones of the same
    (giver, receiver) joined. O(n + m) over both tables' intervals."""
    a, b = old.intervals(), new.intervals()
    i = j = 0
    lo = 0
    moves: list[Move] = []
    while lo <= KEY_SPACE_MAX:
        a_start, a_end, giver = a[i]
        b_start, b_end, receiver = b[j]
        hi = min(a_end, b_end)
        if giver != receiver:
            last = moves[-1] if moves else None
            if last is not None and last.hi + 1 == lo and (last.giver, last.receiver) == (giver, receiver):
                moves[-1] = Move(last.lo, hi, giver, receiver)
            else:
                moves.append(Move(lo, hi, giver, receiver))
        if a_end == hi:
            i += 1
        if b_end == hi:
            j += 1
        lo = hi + 1
    return tuple(moves)


def plan_keyed(old: IntervalTable, new: IntervalTable, placement: Mapping[int, str | None] | None = None
               ) -> WorkloadPlan:
    """The plan that turns routing table `old` into `new` (SPUs only in `new` start, only in `old` retire)."""
    before, after = set(old.spus()), set(new.spus())
    return WorkloadPlan(
        table=new, moves=diff_tables(old, new),
        started=tuple(sorted(after - before)), retired=tuple(sorted(before - after)),
        placement=dict(placement or {}),
    )


def plan_instances(current: Iterable[int], target: Iterable[int],
                   placement: Mapping[int, str | None] | None = None) -> WorkloadPlan:
    """A unit that is not key grouped: no state moves with keys, SPUs only start and retire."""
    before, after = set(current), set(target)
    if not after:
        raise ScalingError("a unit keeps at least one SPU; the plan would retire them all")
    return WorkloadPlan(table=None, started=tuple(sorted(after - before)), retired=tuple(sorted(before - after)),
                        placement=dict(placement or {}))
