"""Failure detection by missed heartbeats: a pure core, time from an injected Clock.

The owner (the driver, for its workers) calls `beat(process)` whenever a
heartbeat - or any frame - arrives from a process, and asks `dead()` on each
tick. A process is dead once its last beat is more than `interval * misses`
seconds old (paper §6: the fixed-parallelism runs failed by missing
heartbeats). `dead()` only reports; the owner decides what to do (disconnect
the endpoint, fail the SPUs' trees, start a replacement) and then calls
`forget(process)`.

Not thread-safe: one actor (or one thread) owns a monitor. O(1) per beat and
forget, O(n) per dead() for n watched processes.
"""

from __future__ import annotations

from esault.clock import Clock
from esault.errors import ConfigError

__all__ = ["HeartbeatMonitor"]


class HeartbeatMonitor:
    """Which watched processes have been silent for more than `interval * misses` seconds."""

    def __init__(self, clock: Clock, interval: float, misses: int) -> None:
        if isinstance(interval, bool) or not isinstance(interval, (int, float)) or not interval > 0:
            raise ConfigError(
                f"HeartbeatMonitor: interval must be seconds > 0 (the heartbeat period), got {interval!r}"
            )
        if type(misses) is not int or misses < 1:
            raise ConfigError(
                f"HeartbeatMonitor: misses must be an int >= 1 (beats missed before a process is dead), got {misses!r}"
            )
        self._clock = clock
        self.interval = float(interval)
        self.misses = misses
        self.timeout = self.interval * misses
        """Seconds of silence after which a process is dead."""
        self._last: dict[str, float] = {}

    def beat(self, process: str) -> None:
        """`process` is alive now; starts watching it if it was not watched."""
        self._last[process] = self._clock.now()

    def dead(self) -> list[str]:
        """Watched processes whose last beat is more than `timeout` seconds old, sorted by name."""
        now = self._clock.now()
        return sorted(p for p, last in self._last.items() if now - last > self.timeout)

    def forget(self, process: str) -> None:
        """Stop watching `process` (it was handled, or left on purpose); unknown names are ignored."""
        self._last.pop(process, None)

    def watched(self) -> list[str]:
        """Every process being watched, sorted by name."""
        return sorted(self._last)

    def silence(self, process: str) -> float | None:
        """Seconds since `process`'s last beat; None if it is not watched."""
        last = self._last.get(process)
        return None if last is None else self._clock.now() - last
