"""Watermarks with bounded out-of-orderness: how far event time has certainly progressed.

A stream is *within the bound* b when every tuple's timestamp is at least
(the greatest timestamp before it) - b. The watermark after a tuple is then
max_seen - b: no later tuple of such a stream can have a smaller timestamp,
so every window ending at or before the watermark is complete and fires.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class EventTime:
    """Windows on the tuples' own timestamps.

    max_out_of_orderness: the bound b above (the same unit as timestamps).
    allowed_lateness: a fired window keeps its state this much longer;
      tuples arriving for it meanwhile update it and fire it again ("update").
      Tuples later still go to the side output (see WindowBolt).
    """

    max_out_of_orderness: float = 0
    allowed_lateness: float = 0

    def __post_init__(self) -> None:
        for name in ("max_out_of_orderness", "allowed_lateness"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0 \
                    or not math.isfinite(value):
                raise ValueError(f"EventTime({name}=...): must be a finite number >= 0, got {value!r}")


@dataclass(frozen=True, slots=True)
class ProcessingTime:
    """Windows on the time tuples arrive at their SPU (the job's clock, seconds); they fire on its ticks."""


class WatermarkTracker:
    """The watermark of one stream of timestamps (one SPU's input): max_seen - bound, never decreasing.

    O(1) per observation. Pure: the caller feeds timestamps in arrival order.
    """

    __slots__ = ("bound", "max_seen")

    def __init__(self, bound: float) -> None:
        self.bound = bound
        self.max_seen = -math.inf

    def observe(self, ts: float) -> None:
        if ts > self.max_seen:
            self.max_seen = ts

    @property
    def watermark(self) -> float:
        """Every later tuple of a stream within the bound has a timestamp >= this."""
        return self.max_seen - self.bound
