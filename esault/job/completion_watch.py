"""CompletionWatch: whether a job has processed all of its input (Job.wait(), Job.is_complete()).

Its own part because "done" is read from several witnesses that each lag in
their own way: the spouts' progress reports, the tracked trees, the SPUs'
counts (a worker's arrive with its heartbeats), two waves of fresh counts
(job/completion.py), and after a rollback or a lost worker only the SPUs that
still count. The job's control code (start, scale, roll back, stop) only tells
it what changed (a rollback's first SPU, a claimed completion); the rules for
"done" live here.
"""

from __future__ import annotations

import math
import threading
import time
from typing import Any

from esault.job.completion import confirmed_by_two_waves
from esault.messages.control import GetLayout, GetSpus
from esault.metrics.stats import RETIRED_SPU

__all__ = ["COUNT_WAVE_TIMEOUT", "CompletionWatch", "LOSS_SETTLE_SECONDS", "SPOUT_LIST_MAX_AGE"]

Job = Any
"""An esault.job.job.Job (not imported: job.py imports this part)."""

COUNT_WAVE_TIMEOUT = 5.0
"""How long one wave of fresh counts (every worker asked for its counts now) may take before wait() polls on;
a worker answers in a round trip unless its transport is full or it is dying (its death then ends the wave)."""

SPOUT_LIST_MAX_AGE = 0.2
"""wait() lists the live spout SPUs at most this often; between two lists, a spout still reading is seen from its
own reports alone (no actor is asked)."""

LOSS_SETTLE_SECONDS = 2.0
"""Guarantee "none" after a worker died: how long totals must stand still (nothing queued) before the
tuples never processed count as lost and the job completes (ten heartbeats: the counts come with them)."""


class CompletionWatch:
    """One per job; any thread that may ask the units (the driver's, the control thread), never an actor."""

    def __init__(self, job: Job) -> None:
        self.job = job
        self.untracked_units = any(getattr(s.cls, "esault_chain", False) for s in job.topology.units)
        """Units that emit outside the input trees (join chains): completion also needs the counts to agree."""
        self.unaccounted = 0
        """Guarantee "none": tuples emitted but never processed once a dead worker's loss settled."""
        self._settle: tuple[tuple[int, int], float] | None = None
        self.claimed = False
        """wait() returned True: the run reads as complete, so under exactly_once its final checkpoint must cover
        the end of every spout's input (stop() waits for a rollback's replay to get there again)."""
        self.counted_from: tuple[int, dict[str, tuple[int, int]]] | None = None
        """After a rollback: (the first SPU id it could launch, each local unit's retired (emitted, processed)
        once the rollback discarded its SPUs). Completion by counts (counted_totals) leaves out what the
        discarded SPUs counted: a dead worker's last report and the tuples a rollback dropped in flight never
        balance, while the relaunched SPUs redo that work."""

    def count_from(self, first_new: int) -> None:
        """A rollback relaunched every SPU with an id from `first_new` on: count only those from now on."""
        job = self.job
        self.counted_from = (first_new, {s.unit: (s.emitted, s.processed) for s in job.ctx.stats.totals()
                                         if s.topology == job.name and s.spu == RETIRED_SPU})

    # --- the spouts' word ------------------------------------------------------

    def spout_states(self) -> list[Any]:
        """The latest SpoutProgress of every live spout SPU (None before its first report)."""
        progress = self.job.ctx.spout_progress
        return [progress.get(spu) for spu in self.spout_spu_ids()]

    def spout_spu_ids(self) -> list[int]:
        """Every live spout SPU, as its unit lists it (an ask per spout unit)."""
        job = self.job
        return [spu for s in job.topology.units if s.is_spout for spu in job.units[s.name].ask(GetSpus())]

    def some_spout_still_reading(self, spus: list[int]) -> bool:
        """A cheap "not yet" for wait(): one of `spus` (a list up to SPOUT_LIST_MAX_AGE old) has reported that
        it is still reading, or has not reported. Asking the units for their SPUs on each 10 ms poll cost the
        driver about 2% of a core in a paced join bench (its main thread and the units' threads), taken from
        the spouts and the sink; a stale list only delays a "done" (one of its SPUs retired while the rest
        finished), and is_complete() decides "done" from a fresh one."""
        progress = self.job.ctx.spout_progress
        for spu in spus:
            report = progress.get(spu)
            if report is None or not report.finished:
                return True
        return False

    def spouts_finished(self) -> bool:
        """Every live spout SPU has reported the end of its input (its trees may still be in flight)."""
        return all(p is not None and p.finished for p in self.spout_states())

    # --- the SPUs' counts ------------------------------------------------------

    def totals(self) -> tuple[int, int, int]:
        """(emitted, processed, in flight + queued) over every SPU's counters, retired totals included."""
        emitted = processed = inflight = 0
        for s in self.job._all_stats():
            emitted += s.emitted
            processed += s.processed
            inflight += s.inflight + s.queue_depth
        return emitted, processed, inflight

    def counted_totals(self) -> tuple[int, int, int]:
        """totals() of the SPUs since the last rollback (all of them if none ran): what completion compares.

        Rows of SPUs the rollback discarded are left out by id (workers report each SPU's own row), and the
        local retired totals they were folded into (discarded SPUs of this process stop before any
        relaunched one starts) by the value they had then."""
        since = self.counted_from
        if since is None:
            return self.totals()
        first_new, retired_before = since
        name = self.job.name
        emitted = processed = inflight = 0
        for s in self.job._all_stats():
            if s.spu == RETIRED_SPU:
                e, p = retired_before.get(s.unit, (0, 0)) if s.topology == name else (0, 0)
                emitted += s.emitted - e
                processed += s.processed - p
            elif s.spu >= first_new:
                emitted += s.emitted
                processed += s.processed
                inflight += s.inflight + s.queue_depth
        return emitted, processed, inflight

    def every_spu_reported(self) -> bool:
        """Counts of SPUs in worker processes arrive with heartbeats: until each live SPU's have,
        matching totals prove nothing."""
        job = self.job
        reported = {(s.unit, s.spu) for s in job._all_stats()}
        for spec in job.topology.units:
            for spu in job.units[job.topology.host_of(spec.name)].ask(GetLayout()):
                if (spec.name, spu) not in reported:
                    return False
        return True

    # --- complete? -------------------------------------------------------------

    def is_complete(self) -> bool:
        """Job.is_complete(): input_done() while no rollback is queued or running."""
        if self.job.recovering:
            return False
        return self.input_done()

    def input_done(self) -> bool:
        """is_complete() as the SPUs report it, whether or not a rollback is queued."""
        job = self.job
        states = self.spout_states()
        if not states or not all(p is not None and p.finished for p in states):
            return False
        if self.done_by_trees(states):
            # Every tuple is in a tracked tree, so spouts with none in flight are done: known at once,
            # from the spouts' own word, without waiting for the workers' counts (heartbeats).
            return all(p.drained for p in states)
        emitted, processed, inflight = self.counted_totals()
        if inflight:
            return False
        if job.config.acking and job.lost_spus:
            return True
        if emitted == processed and self.every_spu_reported():
            return True
        if not job.config.acking and job.lost_spus and self.every_spu_reported():
            return self.settled_with_loss(emitted, processed)
        return False

    def done_by_trees(self, states: list[Any]) -> bool:
        """Completion is the spouts' word (every tuple in a tracked tree), not the SPUs' counts."""
        return (self.job.config.acking and not any(p is None or p.untracked for p in states)
                and not self.untracked_units)

    def complete_confirmed(self) -> bool:
        """A completion read from the workers' counts holds in two waves of fresh counts (job/completion.py):
        heartbeat counts of different moments can balance while tuples still move between workers."""
        fresh_reports = self.job.fresh_reports
        if fresh_reports is None or self.done_by_trees(self.spout_states()):
            return True

        def wave() -> tuple[int, int, int] | None:
            if not fresh_reports(COUNT_WAVE_TIMEOUT) or not self.job.is_complete():
                return None
            return self.counted_totals()

        return confirmed_by_two_waves(wave)

    def settled_with_loss(self, emitted: int, processed: int) -> bool:
        """Guarantee "none" after a worker died: nothing tracks what it held, so once nothing is queued
        and the totals stay still for LOSS_SETTLE_SECONDS the rest is counted lost and the job is done."""
        now = time.monotonic()
        if self._settle is None or self._settle[0] != (emitted, processed):
            self._settle = ((emitted, processed), now)
            return False
        if now - self._settle[1] < LOSS_SETTLE_SECONDS:
            return False
        self.unaccounted = max(0, emitted - processed)
        return True

    def let_counts_settle(self, timeout: float = 1.0) -> None:
        """Counts of worker-hosted SPUs lag by a heartbeat: give a finished job's a moment to agree."""
        job = self.job
        if job.remote_stats is None or not self.spouts_finished():
            return
        if job.fresh_reports is not None:
            # Totals that merely agree can be one consistent but stale snapshot: first take reports
            # every worker made after the job was complete.
            job.fresh_reports(max(timeout, 2.0))
        deadline = time.monotonic() + timeout
        poll = threading.Event()
        while time.monotonic() < deadline:
            emitted, processed, _ = self.counted_totals()
            if emitted == processed and self.every_spu_reported():
                return
            poll.wait(0.01)

    def wait(self, timeout: float | None = None) -> bool:
        """Job.wait(): polls every 10 ms; a completion must read the same in two polls, then hold in two waves
        of fresh counts (complete_confirmed)."""
        job = self.job
        deadline = None if timeout is None else time.monotonic() + timeout
        poll = threading.Event()
        seen_complete = None
        spouts: list[int] = []
        listed_at = -math.inf
        while True:
            if job.spout_errors() or job.failures:
                return False
            now = time.monotonic()
            if now - listed_at >= SPOUT_LIST_MAX_AGE:
                spouts, listed_at = self.spout_spu_ids(), now
            if self.some_spout_still_reading(spouts):
                seen_complete = None  # not done: known without asking any actor
            elif job.is_complete():
                totals = self.counted_totals()
                if seen_complete == totals:  # stable across two polls: now two waves of fresh counts
                    if self.complete_confirmed():
                        self.claimed = True
                        return True
                    totals = None
                seen_complete = totals
            else:
                seen_complete = None
            if deadline is not None and time.monotonic() >= deadline:
                return False
            poll.wait(0.01)
