"""DS2-style controller: the parallelism each unit needs, in one step, from true processing rates.

Kalavri et al., "Three steps is all you need" (OSDI 2018). An SPU's *true*
rate is what it processes per second of busy time (`busy_us`), so it does
not drop when the SPU idles for lack of input. Going through the topology in
order, a unit's target input rate is what its inputs emit at their targets;
a bolt's
target output is its target input times its selectivity (emitted /
processed). The unit needs ceil(target input / mean true rate per SPU),
kept within [min_spus, max_spus]. Unlike the latency rules, which split or
merge one SPU per decision, this reaches the needed parallelism in one
rescale.

A spout's target is what it must emit to keep up, not what it emitted: under
back-pressure (max_spout_pending) its emit rate is capped by the slowest bolt,
and a controller that reads only that never sees the demand (it would settle
on the parallelism it has). So the target is the emit rate plus the spout's
backlog (tuples held back, and what Spout.backlog() reports) worked off over
`catch_up` seconds; or a fixed rate from `source_rates`.
"""

from __future__ import annotations

import math
from typing import Iterable, Mapping

from esault.control.controller import Controller
from esault.control.operations import Operation, Rescale
from esault.control.snapshot import MetricsSnapshot, UnitMetrics
from esault.errors import ConfigError


class DS2Controller(Controller):
    """Rescales the key-grouped bolts in `units` (all key-grouped bolts when None)."""

    def __init__(self, units: Iterable[str] | None = None, interval: float = 2.0, min_spus: int = 1,
                 max_spus: int = 8, headroom: float = 1.2, cooldown: float = 6.0, min_busy: float = 0.02,
                 source_rates: Mapping[str, float] | None = None, catch_up: float = 30.0) -> None:
        if not 1 <= min_spus <= max_spus:
            raise ConfigError(f"DS2Controller needs 1 <= min_spus <= max_spus, got {min_spus} and {max_spus}")
        if headroom < 1:
            raise ConfigError(f"DS2Controller headroom is a factor >= 1 (1.2: 20% spare), got {headroom!r}")
        self.units = None if units is None else set(units)
        self.interval = interval
        self.min_spus, self.max_spus = min_spus, max_spus
        self.headroom = headroom
        self.cooldown = cooldown
        self.min_busy = min_busy
        if not catch_up > 0:
            raise ConfigError(f"DS2Controller catch_up is the seconds to work off a spout's backlog (> 0), "
                              f"got {catch_up!r}")
        self.source_rates = dict(source_rates or {})
        self.catch_up = catch_up
        self._quiet_until = 0.0
        self.plans: list[dict[str, int]] = []  # each decision's needed parallelism per unit

    def needed(self, snapshot: MetricsSnapshot) -> dict[str, int]:
        """Unit -> SPUs it needs, for the bolts whose rates are known this period."""
        target_out: dict[str, float] = {}
        needed: dict[str, int] = {}
        for unit in _in_order(snapshot.units):
            name = unit.name
            if unit.kind == "spout":
                backlog = sum(spu.queue_depth for spu in unit.spus.values())
                target_out[name] = self.source_rates.get(name, unit.emitted_rate + backlog / self.catch_up)
                continue
            target_in = sum(target_out.get(source, 0.0) for source in unit.inputs)
            processed = unit.processed_rate
            target_out[name] = target_in * (unit.emitted_rate / processed if processed > 0 else 1.0)
            if not unit.key_grouped or (self.units is not None and name not in self.units):
                continue
            if target_in <= 0 and processed <= 0:  # no input at all: the fewest SPUs will do
                needed[name] = self.min_spus
                continue
            rate = _mean_true_rate(unit, snapshot.period, self.min_busy)
            if rate is None:
                continue  # too little busy time this period to know its true rate
            want = math.ceil(target_in * self.headroom / rate)
            needed[name] = min(self.max_spus, max(self.min_spus, want))
        return needed

    def decide(self, snapshot: MetricsSnapshot) -> list[Operation]:
        if snapshot.period <= 0 or snapshot.time < self._quiet_until:
            return []
        needed = self.needed(snapshot)
        self.plans.append(needed)
        ops: list[Operation] = [Rescale(name, n) for name, n in needed.items()
                                if n != len(snapshot.units[name].spus)]
        if ops:
            self._quiet_until = snapshot.time + self.cooldown  # let the new SPUs show their rates
        return ops


def _mean_true_rate(unit: UnitMetrics, period: float, min_busy_seconds: float) -> float | None:
    """Tuples per busy second of one SPU, over the unit's SPUs (sum processed / sum busy time); None when
    they were busy less than `min_busy_seconds` in all this period (too little to measure)."""
    processed = busy = 0.0
    for spu in unit.spus.values():
        if spu.processed_rate is not None and spu.busy is not None:
            processed += spu.processed_rate
            busy += spu.busy
    if busy * period < min_busy_seconds or processed <= 0:
        return None
    return processed / busy


def _in_order(units: Mapping[str, UnitMetrics]) -> list[UnitMetrics]:
    """Units with every unit after the units it reads from (the topology is a DAG)."""
    done: set[str] = set()
    order: list[UnitMetrics] = []
    pending = list(units.values())
    while pending:
        ready = [u for u in pending if all(s in done or s not in units for s in u.inputs)]
        if not ready:  # a cycle cannot be built, but never loop for ever
            ready = pending[:1]
        for u in ready:
            order.append(u)
            done.add(u.name)
        pending = [u for u in pending if u.name not in done]
    return order
