"""PeTicks: on_tick() for the PEs that asked for it (Bolt.want_ticks), a service of a bolt SPU's PE table.

Both kinds of bolt SPU have it: a keyed bolt's PEs tick (a WindowBolt's
windows fire), and so may a join chain's declaration instance. The SPU's
processing part calls `tick` from its own tick step.
"""

from __future__ import annotations

from typing import Any, Callable

from esault.datapath.pe_manager import PeManager
from esault.datapath.pe_services import PeServices
from esault.dsl.topology import UnitSpec
from esault.user_errors import UserErrorLog


class PeTicks:
    """One per bolt SPU; only its actor thread touches it. Not on the per-tuple path."""

    def __init__(self, spec: UnitSpec, pes: PeManager, services: PeServices, error_log: UserErrorLog,
                 flush: Callable[[], None], job_name: str) -> None:
        self.spec = spec
        self.pes = pes
        self.services = services
        self._error_log = error_log
        self.flush = flush  # what a tick emitted leaves at once
        self.job_name = job_name
        self.unit_name = spec.name
        self._tick_interval = float(getattr(spec.cls, "esault_tick_interval", 0.05))
        self._last_pe_tick = float("-inf")

    def tick(self, now: float) -> None:
        """on_tick() on the PEs that asked for ticks, every esault_tick_interval.

        O(ticking PEs) per tick, or O(due PEs) when the bolt class tells which
        are due (a classmethod esault_due_keys(spu_local, now), as WindowBolt
        does). A ticked PE counts as used: what the tick changed enters the
        next checkpoint. The processing part decides when (a keyed SPU pauses
        them while keys arrive in a hand-off)."""
        if now - self._last_pe_tick < self._tick_interval:
            return
        self._last_pe_tick = now
        ticking = self.services.ticking
        due = getattr(self.spec.cls, "esault_due_keys", None)
        keys = list(ticking) if due is None else [k for k in due(self.services.local, now) if k in ticking]
        if not keys:
            return
        for key in keys:
            pe = self.pe_of(key)
            if pe is None:  # moved away: it asks again on its new SPU
                ticking.discard(key)
                continue
            try:
                pe.on_tick(now)
            except Exception as exc:
                self._error_log("topology %r: bolt %r on_tick() raised %r (key %r)",
                                self.job_name, self.unit_name, exc, key, exc=exc)
        if self.spec.per_key:
            self.pes.used(now)
        self.flush()

    def pe_of(self, key: Any) -> Any:
        """The PE of a key that asked for ticks, made active (a use); None if it left this SPU."""
        if not self.spec.per_key:
            return self.pes.single()
        pe = self.pes.active.get(key)
        if pe is None and self.pes.get(key) is not None:
            pe = self.pes.wake_or_create(key)
        elif pe is not None:
            self.pes.mark(pe)  # what the tick changes enters the next checkpoint
        return pe

    def keep_ticking(self, now: float) -> None:
        """Before an expiry scan: PEs waiting for ticks are in use (a window pending), so they do not expire.

        O(ticking PEs) once per scan (at most every second), not per tick."""
        ticking = self.services.ticking
        if not ticking or not self.spec.per_key:
            return
        for key in list(ticking):
            if self.pe_of(key) is None:
                ticking.discard(key)
        self.pes.used(now)
