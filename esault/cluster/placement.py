"""Whether the workers there are have room for new SPUs, and how many workers to ask for when they do not.

Pure arithmetic over SPU counts per worker, so the rule is tested on its own (tests/unit/test_placement.py).
A worker has room while it hosts fewer than `spus_per_worker` SPUs; None is no budget (today's fixed pools:
every worker takes one more, the fewest-loaded first). Workers asked for and not joined yet count as empty.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from esault.errors import ConfigError


@dataclass(frozen=True, slots=True)
class Placement:
    """The SPU budget of a worker process (one interpreter: one core of work under the GIL)."""

    spus_per_worker: int | None = None

    def __post_init__(self) -> None:
        budget = self.spus_per_worker
        if budget is not None and (type(budget) is not int or budget < 1):
            raise ConfigError(f"spus_per_worker must be a whole number >= 1 (or None for no budget), got {budget!r}")

    def free(self, spus_on: Mapping[str, int], pending: int = 0) -> float:
        """SPU slots left on the workers (`spus_on`: SPUs each hosts) and `pending` empty ones on their way."""
        if self.spus_per_worker is None:
            return math.inf if spus_on or pending else 0
        budget = self.spus_per_worker
        return sum(max(0, budget - n) for n in spus_on.values()) + budget * pending

    def workers_needed(self, spus_on: Mapping[str, int], new_spus: int, pending: int = 0) -> int:
        """Workers to ask for so that `new_spus` more SPUs fit (0 when they fit already)."""
        short = new_spus - self.free(spus_on, pending)
        if short <= 0:
            return 0
        return math.ceil(short / (self.spus_per_worker or short))

    def choose(self, spus_on: Mapping[str, int]) -> str | None:
        """The worker a new SPU goes to: the fewest SPUs among those with room (by name on a tie), or None
        when none has room."""
        budget = self.spus_per_worker
        roomy = [w for w, n in spus_on.items() if budget is None or n < budget]
        return min(roomy, key=lambda w: (spus_on[w], w)) if roomy else None
