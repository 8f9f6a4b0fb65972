"""JoinController: S2J's elasticity rule (tau2 / tau0) applied to a join unit through esault's control plane.

Utilisation tau is the join unit's SPUs' mean busy fraction over a
controller period. When tau stays above tau2 for `sustain` periods the unit
is rescaled to one more SPU, below tau0 to one fewer. In keyed mode keys and
their chains split off to the new SPU (or merge back), state moving with
them; in chain mode the SPUs are the chain's workers, and it grows or shrinks
at its tail (esault.joins.node). Both keep every pair exactly once
(tests/integration/test_joins.py, test_join_chain_spus.py).
"""

from __future__ import annotations

from typing import Iterable

from esault.control.controller import Controller
from esault.control.operations import Operation, Rescale
from esault.control.snapshot import MetricsSnapshot
from esault.joins.shedding import ShedPolicy


class JoinController(Controller):
    """Grows or shrinks each of `units` by one SPU per decision, by the ShedPolicy's tau0/tau2 rule."""

    def __init__(self, units: Iterable[str], interval: float = 1.0, tau0: float = 0.3, tau2: float = 0.8,
                 sustain: int = 3, min_spus: int = 1, max_spus: int = 8) -> None:
        self.interval = interval
        self.policies = {u: ShedPolicy(tau0=tau0, tau2=tau2, tau1=1.0, sustain=sustain, min_workers=min_spus,
                                       max_workers=max_spus) for u in units}
        self.decisions: list[tuple[str, float, int]] = []  # (unit, tau, SPUs wanted), for tests and logs

    def decide(self, snapshot: MetricsSnapshot) -> list[Operation]:
        ops: list[Operation] = []
        for name, policy in self.policies.items():
            unit = snapshot.units.get(name)
            busy = [s.busy for s in unit.spus.values() if s.busy is not None] if unit else []
            if not busy:
                continue
            tau, spus = sum(busy) / len(busy), len(unit.spus)
            action = policy.observe(tau, spus)
            if action:
                want = spus + (1 if action == "add" else -1)
                self.decisions.append((name, tau, want))
                ops.append(Rescale(name, want))  # the reason is "controller"; tau is in self.decisions
        return ops
