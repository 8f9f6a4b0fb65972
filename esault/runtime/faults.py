"""What happens when user code raises on a tuple: retried in place, then dead-lettered.

Shared by bolt SPUs and by bolts chained into another unit's SPUs. Only the
failing tuple is affected: its batch's trees still complete, so no other
tuple is replayed because of it.
"""

from __future__ import annotations

import os
import traceback
from typing import Any

from esault.dsl.tuple import Tuple
from esault.metrics.stats import SpuStats
from esault.runtime.context import RateLimitedLog
from esault.runtime.messages import DeadLettered


class UserFaults:
    """One per (unit, SPU): retries a failing process() up to max_retries times, then gives the tuple up."""

    def __init__(self, topology: str, unit: str, spu_id: int, stats: SpuStats, acker: Any, max_retries: int) -> None:
        self.topology = topology
        self.unit = unit
        self.spu_id = spu_id
        self.stats = stats
        self.acker = acker
        self.max_retries = max_retries
        self._log = RateLimitedLog()

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

    def give_up(self, key: Any, value: Any, exc: BaseException, where: str, attempts: int) -> None:
        """Write the tuple to the job's dead letters (through the ack server, in the driver)."""
        at = _where(exc)
        reason = f"bolt {self.unit!r} {where} raised {type(exc).__name__}: {exc}{at} (key {key!r})"
        self.stats.failed += 1
        self.stats.dead_letters += 1
        self._log("topology %r: %s; gave up after %d attempt(s), dead-lettered", self.topology, reason, attempts)
        if self.acker is not None:
            self.acker.tell(DeadLettered(self.unit, self.spu_id, key, value, reason, attempts))


_RUNTIME_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _where(exc: BaseException) -> str:
    """' at file:line' of the innermost frame in user code (outside esault), else the innermost frame."""
    frames = traceback.extract_tb(exc.__traceback__) if exc.__traceback__ else []
    for frame in reversed(frames):
        if not os.path.abspath(frame.filename).startswith(_RUNTIME_DIR + os.sep):
            return f" at {frame.filename}:{frame.lineno}"
    return f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
