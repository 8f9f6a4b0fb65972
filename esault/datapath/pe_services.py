"""PeServices: what an SPU offers its PEs besides emit: the clock, a shared dict, and ticks on request."""

from __future__ import annotations

from typing import Any

from esault.clock import Clock


class PeServices:
    """One per bolt SPU; only its actor thread touches it.

    `ticking` holds the keys (None for a bolt that is not key-grouped) whose
    PE asked for on_tick(); the SPU drops keys whose PE left (moved, expired).
    """

    __slots__ = ("clock", "local", "ticking")

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.local: dict[str, Any] = {}
        self.ticking: set[Any] = set()

    def now(self) -> float:
        return self.clock.now()

    def ticks(self, key: Any, on: bool) -> None:
        if on:
            self.ticking.add(key)
        else:
            self.ticking.discard(key)
