"""What happens when user code raises on a tuple: retried in place, then dead-lettered.

Shared by bolt SPUs and by bolts chained into another unit's SPUs. Only the
failing tuple is affected: its batch's trees still complete, so no other
tuple is replayed because of it.
"""

from __future__ import annotations

from typing import Any

from esault.dsl.tuple import Tuple
from esault.metrics.stats import SpuStats
from esault.messages.acking import DeadLettered
from esault.user_errors import UserErrorLog, user_frame


class UserFaults:
    """One per (unit, SPU): retries a failing process() up to max_retries times, then gives the tuple up."""

    def __init__(self, topology: str, unit: str, spu_id: int, stats: SpuStats, acker: Any, max_retries: int) -> None:
        self.topology = topology
        self.unit = unit
        self.spu_id = spu_id
        self.stats = stats
        self.acker = acker
        self.max_retries = max_retries
        self._log = UserErrorLog()

    def retry(self, pe: Any, view: Tuple, key: Any, value: Any, source: str, exc: Exception) -> None:
        """process() raised `exc` on (key, value): retry on the same PE, then dead-letter."""
        self.stats.user_errors += 1
        attempts = 1
        while attempts <= self.max_retries:
            attempts += 1
            view.key, view.value, view.source = key, value, source
            try:
                pe.process(view)
                return
            except Exception as again:
                self.stats.user_errors += 1
                exc = again
        self.give_up(key, value, exc, "process()", attempts)

    def close(self) -> None:
        """At the SPU's stop: how many failures were only counted, not logged."""
        self._log.close(f"topology {self.topology!r}: bolt {self.unit!r} gave up tuples")

    def give_up(self, key: Any, value: Any, exc: BaseException, where: str, attempts: int) -> None:
        """Write the tuple to the job's dead letters (through the ack server, in the driver)."""
        at = user_frame(exc)
        reason = f"bolt {self.unit!r} {where} raised {type(exc).__name__}: {exc}{at} (key {key!r})"
        self.stats.failed += 1
        self.stats.dead_letters += 1
        self._log("topology %r: %s; gave up after %d attempt(s), dead-lettered", self.topology, reason, attempts,
                  exc=exc)
        if self.acker is not None:
            self.acker.tell(DeadLettered(self.unit, self.spu_id, key, value, reason, attempts))

