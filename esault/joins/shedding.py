"""S2J's utilisation policy: grow the chain above tau2, shrink it below tau0, shed load above tau1.

Utilisation tau is the busy fraction of the join's time (0..1, may exceed 1
when input queues up). The policy is a pure class fed one sample per period:
`observe(tau)` returns what to do with the chain ("add", "remove" or None)
and sets the fraction of new tuples to shed. Shedding is graded: nothing up
to tau1, above it 1 - tau1/tau (what brings the admitted load back to tau1:
at twice the capacity with tau1 = 0.9, 55%), at most `max_shed`. It is
deterministic (every k-th tuple, not a coin), so a run can be replayed.
Every shed tuple is counted by the caller: shedding is never silent.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ShedPolicy:
    """Thresholds tau0 < tau1 < tau2 and how many periods a condition must hold."""

    tau0: float = 0.3
    tau1: float = 0.9
    tau2: float = 0.8
    sustain: int = 3
    min_workers: int = 1
    max_workers: int = 8
    max_shed: float = 0.9

    def __post_init__(self) -> None:
        if not (self.tau0 < self.tau2 and 0 < self.tau1):
            raise ValueError(f"need tau0 < tau2 and tau1 > 0, got tau0={self.tau0}, tau1={self.tau1}, "
                             f"tau2={self.tau2}")
        if not 0 <= self.max_shed <= 1 or self.sustain < 1 or not 1 <= self.min_workers <= self.max_workers:
            raise ValueError("max_shed must be in [0, 1], sustain >= 1 and 1 <= min_workers <= max_workers")
        self.shed_fraction = 0.0
        self._above = self._below = 0
        self._credit = 0.0
        self.admitted = self.shed = 0

    def observe(self, tau: float, workers: int) -> str | None:
        """One utilisation sample; returns "add", "remove" or None, and updates the shed fraction."""
        self._above = self._above + 1 if tau > self.tau2 else 0
        self._below = self._below + 1 if tau < self.tau0 else 0
        self.shed_fraction = 0.0 if tau <= self.tau1 else min(self.max_shed, 1.0 - self.tau1 / tau)
        if self._above >= self.sustain and workers < self.max_workers:
            self._above = 0
            return "add"
        if self._below >= self.sustain and workers > self.min_workers:
            self._below = 0
            return "remove"
        return None

    def admit(self) -> bool:
        """Whether the next tuple enters the join (False: shed it, and count it)."""
        self._credit += self.shed_fraction
        if self._credit >= 1.0:
            self._credit -= 1.0
            self.shed += 1
            return False
        self.admitted += 1
        return True
