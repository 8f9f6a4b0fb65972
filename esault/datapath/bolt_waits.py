"""A bolt SPU's view of what its non-keyed instances wait for outside esault (Bolt.waiting_for()).

Read at the SPU's ticks; each wait becomes one esault_bolt_waiting_since_seconds series, stamped when first
seen and removed once the instance says None again or the SPU stops. Job.status() reads the series (its own
process's, and the workers' from their heartbeats), as it reads a spout's.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from esault.metrics import registry as metrics
from esault.dsl.bolt import Bolt
from esault.metrics.registry import BOLT_WAITING

WAITING_CHECK_INTERVAL = 1.0
"""Seconds (job clock) an SPU with an instance that can wait sleeps at most between looks at waiting_for()."""


class BoltWaits:
    """The waits of one SPU's instances that override waiting_for(): (unit, instance) pairs."""

    def __init__(self, topology: str, spu_id: int, instances: list[tuple[str, Any]],
                 report_error: Callable[..., None]) -> None:
        self.topology = topology
        self.spu_id = spu_id
        self._instances = [(unit, pe) for unit, pe in instances if type(pe).waiting_for is not Bolt.waiting_for]
        self._report_error = report_error
        self._shown: dict[str, str] = {}  # unit -> the wait its series says now

    @property
    def may_wait(self) -> bool:
        return bool(self._instances)

    def next_due(self, now: float) -> float | None:
        """The latest the SPU may sleep to (None: nothing here to look at)."""
        return now + WAITING_CHECK_INTERVAL if self._instances else None

    def read(self) -> None:
        for unit, pe in self._instances:
            try:
                what = pe.waiting_for()
            except Exception as exc:  # noqa: BLE001 - user code: reported, read as no wait
                self._report_error("topology %r: bolt %r waiting_for() raised %s: %s", self.topology, unit,
                                   type(exc).__name__, exc, exc=exc)
                what = None
            if what is not None and not isinstance(what, str):
                what = repr(what)
            if what == self._shown.get(unit):
                continue
            if what is None:
                self._shown.pop(unit, None)
                metrics.clear_waiting(BOLT_WAITING, self.topology, unit, self.spu_id)
            else:
                self._shown[unit] = what
                metrics.set_waiting(BOLT_WAITING, self.topology, unit, self.spu_id, what, time.time())

    def clear(self) -> None:
        """The SPU stops: its series go."""
        for unit in list(self._shown):
            metrics.clear_waiting(BOLT_WAITING, self.topology, unit, self.spu_id)
        self._shown.clear()
