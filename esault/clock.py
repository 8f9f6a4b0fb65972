"""Injected time: cores read a Clock instead of calling time.monotonic()."""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    """Monotonic seconds; only differences between readings mean anything."""

    def now(self) -> float: ...


class SystemClock:
    """The real monotonic clock."""

    def now(self) -> float:
        return time.monotonic()


class ManualClock:
    """A clock that moves only when a test calls advance(); thread-safe."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> float:
        if seconds < 0:
            raise ValueError(f"ManualClock.advance needs seconds >= 0, got {seconds}")
        with self._lock:
            self._now += seconds
            return self._now
