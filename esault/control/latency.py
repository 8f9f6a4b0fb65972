"""LatencyController: the paper's latency-probe elasticity (PAPER_NOTES §5) as a control-plane policy.

The driver probes each SPU of an elastic bolt (job/prober.py); every
probe's round trip reaches this controller in the snapshot's `probes`, in
order. Per SPU a pure LoadDetector turns them into verdicts; this class adds
the policy: min_spus/max_spus, one change at a time, a cool-down after each, a
load-aware split point (the median of the sampled key hashes), the
less-loaded neighbour as merge target, and no split after one that did not
raise the bolt's processing rate (SplitGain). It returns Split and Merge
operations, applied like any controller's, and logs every decision with its
evidence.
"""

from __future__ import annotations

import logging
from collections import deque
from typing import Iterable

from esault.config import ElasticityConfig
from esault.control.controller import Controller
from esault.control.events import Change, ProbeRecord
from esault.control.operations import Merge, Operation, Split
from esault.control.snapshot import MetricsSnapshot
from esault.control.split_gain import SplitGain
from esault.elasticity.detector import Load, LoadDetector, Verdict
from esault.elasticity.planner import choose_merge_target, choose_split_point
from esault.routing.interval_table import IntervalTable
from esault.messages.control import ScaleResult

log = logging.getLogger("esault.elasticity")

DECISIONS_KEPT = 1000


class LatencyController(Controller):
    """Splits an SPU whose probes time out, merges one that stays light; one per elastic bolt."""

    wake_on_probes = True  # decide right after each probe, as the paper's monitor does

    def __init__(self, unit: str, cfg: ElasticityConfig) -> None:
        self.unit = unit
        self.cfg = cfg
        self.interval = cfg.probe_period
        self.detectors: dict[int, LoadDetector] = {}
        self.layout: dict[int, tuple[tuple[int, int], ...] | None] = {}
        self.load: dict[int, int] = {}  # processed count of each SPU's newest probe (merge targets)
        self.hashes: dict[int, tuple[int, ...]] = {}  # newest key-hash sample of each SPU (split points)
        self.changing = False
        self.cooldown_until = float("-inf")
        self.decisions: deque[tuple[str, int, str]] = deque(maxlen=DECISIONS_KEPT)
        """(action: split, merge or hold; spu; evidence), the newest DECISIONS_KEPT: a job runs for weeks."""
        self.gain = SplitGain(cfg.min_split_gain, cfg.overload_reaction_time * cfg.probe_period)
        self._now = 0.0

    def decide(self, snapshot: MetricsSnapshot) -> Iterable[Operation]:
        self._now = snapshot.time
        unit = snapshot.units.get(self.unit)
        if unit is None:
            return []
        fresh_since = self._follow(unit.spus, snapshot.changes)
        self.gain.observe(snapshot.time, snapshot.period, unit.spus, snapshot.workers)
        for record in snapshot.probes:
            if record.unit != self.unit or record.spu not in self.detectors:
                continue  # another unit's, or an SPU that is gone
            if record.sample.sent_at < fresh_since.get(record.spu, float("-inf")):
                continue  # sent before a change that touched this SPU: it measured the old layout
            operation = self._observe(record)
            if operation is not None:
                return [operation]
        return []

    def applied(self, operation: Operation, result: ScaleResult | None, error: Exception | None) -> None:
        self.changing = False
        if error is not None:  # refused or aborted: wait a cool-down before trying again
            self.cooldown_until = self._now + self.cfg.cooldown

    # --- following the layout ---------------------------------------------------

    def _follow(self, spus: dict, changes: Iterable[Change]) -> dict[int, float]:
        """Adopt the unit's live SPUs; after each change, only the SPUs it touched start their history over.

        Resetting every detector would make each learn the current (e.g. trough) rate as its peak, and a
        steady lull would then never look light again. After a merge the receiver keeps its peak; after a
        split both halves learn their new share afresh. Returns, per touched SPU, when its change finished.
        """
        fresh_since: dict[int, float] = {}
        for change in changes:
            result = change.result
            if result.unit != self.unit:
                continue
            self.cooldown_until = max(self.cooldown_until, change.finished_at + self.cfg.cooldown)
            self.gain.changed(result.action, result.giver, change.finished_at - result.seconds, change.finished_at)
            for spu in _touched(result):
                self.detectors.pop(spu, None)
                fresh_since[spu] = change.finished_at
            self.hashes = {}  # sampled under the old intervals
        self.layout = {spu: m.intervals for spu, m in spus.items()}
        self.detectors = {spu: self.detectors.get(spu) or LoadDetector(self.cfg) for spu in self.layout}
        self.load = {s: v for s, v in self.load.items() if s in self.layout}
        return fresh_since

    # --- the paper's policy -------------------------------------------------------

    def _observe(self, record: ProbeRecord) -> Operation | None:
        spu, sample = record.spu, record.sample
        if sample.latency is not None:
            self.load[spu] = sample.processed
        if record.hashes:
            self.hashes[spu] = record.hashes
        verdict = self.detectors[spu].observe(sample)
        if verdict.kind is Load.NORMAL or self.changing or self._now < self.cooldown_until:
            return None
        operation = self._plan(spu, verdict)
        if operation is not None:
            log.info("%s of %r SPU %d (%d SPUs) because %s", type(operation).__name__.lower(), self.unit,
                     spu, len(self.layout), verdict.evidence)
            self.decisions.append((type(operation).__name__.lower(), spu, verdict.evidence))
            self.changing = True
        return operation

    def _plan(self, spu: int, verdict: Verdict) -> Operation | None:
        count = len(self.layout)
        owned = self.layout.get(spu)
        if verdict.kind is Load.OVERLOAD:
            if count >= self.cfg.max_spus:
                return None
            held = self.gain.holds(self._now)
            if held is not None:
                if self.gain.tell_once():
                    log.info("no split of %r SPU %d (%d SPUs) although %s: %s", self.unit, spu, count,
                             verdict.evidence, held)
                    self.decisions.append(("hold", spu, held))
                return None
            at = None
            if owned:
                if sum(hi - lo + 1 for lo, hi in owned) == 1:
                    return None  # one hash cannot be split further
                at = choose_split_point(self.hashes.get(spu, ()), owned[0][0], owned[-1][1])
            return Split(self.unit, spu, at, reason="overload")
        if count <= self.cfg.min_spus:
            return None
        into = None
        if owned is not None:
            table = IntervalTable.from_intervals(
                [(lo, s) for s, ranges in self.layout.items() for lo, _ in ranges or ()])
            into = choose_merge_target(table, spu, self.load)
        return Merge(self.unit, spu, into, reason="underload")


def _touched(result: ScaleResult) -> set[int]:
    """The SPUs whose keys a finished reconfiguration changed, except a merge's receiver (it keeps its peak)."""
    if result.action == "split":
        return {result.giver, result.receiver}
    if result.action == "merge":
        return set()
    return {spu for move in result.moves for spu in move[2:]} | set(result.started)
