"""A user-written controller: relieve the busiest SPU, fold away idle ones (esault.control).

Every `interval` seconds it looks at one key-grouped unit. If its busiest SPU
was busy more than `busy_above` of the time, that SPU's hash ranges are cut in
half by hash count and a new SPU takes the upper half; if two or more SPUs
were busy less than `busy_below`, the idlest one's ranges go to the next
idlest. Both are one `AssignWorkload`: only the moved keys pause, their state
moves with them. Run it with `job.add_controller(HotSpuController("count"))`.
"""

from __future__ import annotations

from esault.control import AssignWorkload, Controller, MetricsSnapshot, Operation


class HotSpuController(Controller):
    def __init__(self, unit: str, busy_above: float = 0.8, busy_below: float = 0.1,
                 min_spus: int = 1, max_spus: int = 8, interval: float = 2.0) -> None:
        self.unit = unit
        self.busy_above, self.busy_below = busy_above, busy_below
        self.min_spus, self.max_spus = min_spus, max_spus
        self.interval = interval
        self.settling = False  # skip one period after a change: new SPUs have no rates yet

    def decide(self, snapshot: MetricsSnapshot) -> list[Operation]:
        if self.settling:
            self.settling = False
            return []
        unit = snapshot.unit(self.unit)
        busy = {spu: m.busy for spu, m in unit.spus.items() if m.busy is not None}
        if len(busy) < len(unit.spus) or not busy:
            return []  # an SPU without a reading yet
        workload = unit.workload()
        hottest = max(busy, key=busy.get)
        if busy[hottest] > self.busy_above and len(workload) < self.max_spus:
            keep, give = halve(workload[hottest])
            if give:
                self.settling = True
                return [AssignWorkload(self.unit, {**workload, hottest: keep, -1: give})]
        idle = sorted((b, spu) for spu, b in busy.items() if b < self.busy_below)
        if len(idle) >= 2 and len(workload) > self.min_spus:
            (_, coldest), (_, next_coldest) = idle[:2]
            target = {spu: ranges for spu, ranges in workload.items() if spu != coldest}
            target[next_coldest] = sorted(target[next_coldest] + workload[coldest])
            self.settling = True
            return [AssignWorkload(self.unit, target)]
        return []


def halve(ranges: list[tuple[int, int]]) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Cut ranges (in key order) where half of their hashes lie below: (lower half, upper half)."""
    total = sum(hi - lo + 1 for lo, hi in ranges)
    if total < 2:
        return ranges, []
    below = total // 2
    lower: list[tuple[int, int]] = []
    upper: list[tuple[int, int]] = []
    for lo, hi in ranges:
        size = hi - lo + 1
        if below >= size:
            lower.append((lo, hi))
            below -= size
        elif below > 0:
            lower.append((lo, lo + below - 1))
            upper.append((lo + below, hi))
            below = 0
        else:
            upper.append((lo, hi))
    return lower, upper
