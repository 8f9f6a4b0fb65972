"""Window assigners: which windows a timestamp belongs to (pure, stateless, shared by every key).

A window is the half-open interval [start, end) of event (or processing)
time. Timestamps are numbers in the unit the job chooses (milliseconds as
ints keep window bounds exact; floats work but bounds are then floats too).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


def _positive(kind: str, name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{kind}({name}=...): {name} must be a finite number > 0, got {value!r}")


@dataclass(frozen=True, slots=True)
class Tumbling:
    """Back-to-back windows of `size`: [k*size + offset, (k+1)*size + offset). One window per timestamp."""

    size: float
    offset: float = 0

    def __post_init__(self) -> None:
        _positive("Tumbling", "size", self.size)

    merging = False

    def starts(self, ts: float) -> list[float]:
        """The start of the one window holding ts. O(1)."""
        return [ts - (ts - self.offset) % self.size]

    def end(self, start: float) -> float:
        return start + self.size


@dataclass(frozen=True, slots=True)
class Sliding:
    """Windows of `size` starting every `slide`: a timestamp lies in ceil(size / slide) of them.

    The windows one timestamp belongs to are created for it (size/slide per
    tuple, the cost key windows avoid: see esault.windows.key_windows).
    """

    size: float
    slide: float
    offset: float = 0

    def __post_init__(self) -> None:
        _positive("Sliding", "size", self.size)
        _positive("Sliding", "slide", self.slide)
        if self.slide > self.size:
            raise ValueError(f"Sliding(size={self.size}, slide={self.slide}): slide must be <= size "
                             "(a slide longer than the window skips data); for slide == size use Tumbling(size)")

    merging = False

    def starts(self, ts: float) -> list[float]:
        """Starts of the windows holding ts, latest first. O(size / slide)."""
        last = ts - (ts - self.offset) % self.slide
        out = []
        start = last
        while start > ts - self.size:
            out.append(start)
            start -= self.slide
        return out

    def end(self, start: float) -> float:
        return start + self.size


@dataclass(frozen=True, slots=True)
class Session:
    """Per-key activity sessions: a tuple opens [ts, ts + gap); windows that overlap or touch merge."""

    gap: float

    def __post_init__(self) -> None:
        _positive("Session", "gap", self.gap)

    merging = True

    def starts(self, ts: float) -> list[float]:
        return [ts]

    def end(self, start: float) -> float:
        return start + self.gap


Assigner = Tumbling | Sliding | Session
"""Any of the window kinds."""


def check_assigner(where: str, value: Any) -> Assigner:
    """`value` if it is a window assigner, else a ValueError saying which ones there are."""
    if isinstance(value, (Tumbling, Sliding, Session)):
        return value
    raise ValueError(f"{where}: window must be Tumbling(size), Sliding(size, slide) or Session(gap) from "
                     f"esault.windows, got {value!r}")
