"""SplitGain: whether a bolt's last split raised its processing rate; if not, the next split is held.

Why: the latency rules split an SPU whose probes time out. On a CPU-bound bolt
whose SPUs already fill the workers' cores, a split adds an SPU that shares a
busy interpreter: the bolt processes no more than before, the backlog the
split's pause left drains slowly, probes keep timing out, and the rules split
again every cool-down up to max_spus (docs/ELASTICITY.md, "Splits that add
nothing"). So when the rules call for another split, the bolt's rate over the
last window is compared with its rate over the window before the last split
began: a split should have raised the giver's part of the work by
`min_gain`, so the bolt's rate by `min_gain` x the giver's share of it. Less
holds the split; the hold ends when the bolt's rate over the last window
rises enough (more input came through), a merge changes the layout, or the
set of workers changes. Pure: rates come from MetricsSnapshots, times from
the job's clock.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Mapping

HISTORY = 30.0
"""Seconds of rates kept: a split's "before" must outlive the split itself (one slower than this is simply not
judged). At a snapshot per probe (8 SPUs probed 5 times a second) that is ~1,200 small dicts per bolt."""


class SplitGain:
    """The bolt's processing rate around its latest split. Only snapshots where every SPU has a rate count."""

    def __init__(self, min_gain: float, window: float) -> None:
        self.min_gain = min_gain
        self.window = window  # seconds of rate that make "before" and "now"
        self._rates: deque[tuple[float, float, dict[int, float]]] = deque()  # (time, period, spu -> tuples/s)
        self._split: tuple[float, float, float] | None = None  # (its end, the bolt's rate before, needed gain)
        self._told = False
        self._workers: tuple[str, ...] | None = None

    def observe(self, now: float, period: float, spus: Mapping[int, Any], workers: tuple[str, ...]) -> None:
        """One snapshot: the bolt's live SPUs (`SpuMetrics`, their `processed_rate`) and the job's workers."""
        named = tuple(sorted(workers))
        if named and self._workers is not None and named != self._workers:
            self.forget()  # capacity came or went: what the last split showed says nothing now
        if named:
            self._workers = named
        rates = {spu: m.processed_rate for spu, m in spus.items()}
        if period > 0 and rates and None not in rates.values():
            self._rates.append((now, period, rates))
        while self._rates and self._rates[0][0] < now - HISTORY:
            self._rates.popleft()

    def changed(self, action: str, giver: int, started: float, finished: float) -> None:
        """A reconfiguration of the bolt finished (`started`, `finished`: the job's clock)."""
        self.forget()
        if action != "split":
            return
        before = self._mean(started - self.window, started)
        share = self._mean(started - self.window, started, only=giver)
        if before is None or before <= 0 or share is None:
            return
        self._split = (finished, before, self.min_gain * share / before)

    def holds(self, now: float) -> str | None:
        """Why another split now would add nothing, or None to let it go ahead."""
        if self.min_gain <= 0 or self._split is None:
            return None
        finished, before, needed = self._split
        after = self._mean(max(finished, now - self.window), now)  # the rate now, the split's SPUs settled in
        if after is None or after >= before * (1 + needed):
            self._told = False  # a later hold is news again
            return None
        return (f"the last split raised the bolt's processing rate {after / before - 1:+.1%} ({before:,.0f} -> "
                f"{after:,.0f} tuples/s), less than the {needed:.1%} min_split_gain asks of it: its SPUs share "
                "cores that are already busy, so another split would add nothing; held until the rate rises, a "
                "merge, or a change of workers")

    def tell_once(self) -> bool:
        """True the first time a hold is reported (logged once per hold, not every probe)."""
        told, self._told = self._told, True
        return not told

    def forget(self) -> None:
        self._split = None
        self._told = False

    def _mean(self, start: float, end: float, only: int | None = None) -> float | None:
        """Tuples/s (of the bolt, or of SPU `only`) over the snapshots taken in (start, end], weighted by their
        periods; None if there are none."""
        tuples = seconds = 0.0
        for when, period, rates in self._rates:
            if start < when <= end:
                if only is None:
                    tuples += sum(rates.values()) * period
                elif only in rates:
                    tuples += rates[only] * period
                else:
                    continue
                seconds += period
        return tuples / seconds if seconds > 0 else None
