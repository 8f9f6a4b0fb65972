"""The controllers' pure parts: snapshots from counter readings, and DS2's parallelism, deterministically."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, strategies as st

from esault.control import DS2Controller, Rescale, SnapshotBuilder
from esault.errors import ConfigError

UNITS = [("src", "spout", False, ()), ("count", "bolt", True, ("src",)), ("out", "bolt", False, ("count",))]
LAYOUT = {"src": {1: None}, "count": {2: ((0, 99),), 3: ((100, 2**31 - 1),)}, "out": {4: None}}


def rows(src_emitted: int, count: tuple[tuple[int, int, int], ...], out_processed: int = 0, src_backlog: int = 0):
    """(processed, emitted, busy_us) per count SPU, in SPU order 2, 3."""
    out = [("src", 1, {"emitted": src_emitted, "backlog": src_backlog})]
    for spu, (processed, emitted, busy_us) in zip((2, 3), count):
        out.append(("count", spu, {"processed": processed, "emitted": emitted, "busy_us": busy_us,
                                   "queue_depth": 4, "pes": 10}))
    out.append(("out", 4, {"processed": out_processed, "busy_us": 1000}))
    return out


def test_the_first_reading_has_no_rates_and_the_second_has_them_per_second():
    builder = SnapshotBuilder()
    first = builder.update(10.0, rows(0, ((0, 0, 0), (0, 0, 0))), UNITS, LAYOUT, {2: "w1", 3: "w2"}, ["w1", "w2"])
    assert first.period == 0 and first.unit("count").spus[2].processed_rate is None
    second = builder.update(12.0, rows(4000, ((1000, 500, 250_000), (3000, 1500, 1_500_000))), UNITS, LAYOUT,
                            {2: "w1", 3: "w2"}, ["w1", "w2"])
    a, b = second.unit("count").spus[2], second.unit("count").spus[3]
    assert second.period == 2.0 and second.workers == ("w1", "w2")
    assert (a.processed_rate, a.emitted_rate, a.busy, a.true_rate) == (500.0, 250.0, 0.125, 4000.0)
    assert (b.processed_rate, b.busy, b.true_rate) == (1500.0, 0.75, 2000.0)
    assert (a.worker, a.intervals, a.queue_depth, a.pes) == ("w1", ((0, 99),), 4, 10)
    assert second.unit("count").processed_rate == 2000.0 and second.unit("src").emitted_rate == 2000.0
    assert second.unit("count").workload() == {2: [(0, 99)], 3: [(100, 2**31 - 1)]}


def test_an_spu_that_appears_between_readings_has_no_rate_yet():
    builder = SnapshotBuilder()
    builder.update(0.0, rows(0, ((0, 0, 0),)), UNITS, {**LAYOUT, "count": {2: ((0, 2**31 - 1),)}})
    snap = builder.update(1.0, rows(10, ((10, 10, 1000), (5, 5, 500))), UNITS, LAYOUT)
    assert snap.unit("count").spus[2].processed_rate == 10.0
    assert snap.unit("count").spus[3].processed_rate is None and snap.unit("count").spus[3].true_rate is None


def snapshots(src_rate: float, true_rate: float, selectivity: float = 1.0, spus: int = 2, seconds: float = 2.0,
              src_backlog: int = 0):
    """Two readings `seconds` apart: the spout emits src_rate/s, the count SPUs share that input and process
    it at `true_rate` tuples per busy second each."""
    builder = SnapshotBuilder()
    builder.update(0.0, rows(0, ((0, 0, 0),) * spus), UNITS, LAYOUT)
    per_spu = src_rate * seconds / spus
    busy_us = int(per_spu / true_rate * 1e6)
    counts = tuple((int(per_spu), int(per_spu * selectivity), busy_us) for _ in range(spus))
    return builder.update(seconds, rows(int(src_rate * seconds), counts, src_backlog=src_backlog), UNITS, LAYOUT)


@given(src_rate=st.floats(100, 1e6), true_rate=st.floats(100, 1e6), headroom=st.sampled_from([1.0, 1.2, 1.5]))
def test_ds2_asks_for_the_input_rate_over_one_spus_true_rate_within_bounds(src_rate, true_rate, headroom):
    ds2 = DS2Controller(["count"], max_spus=8, headroom=headroom, cooldown=0)
    snap = snapshots(src_rate, true_rate)
    if sum(m.busy for m in snap.unit("count").spus.values()) * snap.period < ds2.min_busy:
        assert ds2.needed(snap) == {}  # too little busy time to measure: no decision
        return
    want = min(8, max(1, math.ceil(src_rate * headroom / true_rate - 1e-6)))
    got = ds2.needed(snap)["count"]
    assert abs(got - want) <= 1, (got, want)  # busy time is counted in whole microseconds
    ops = ds2.decide(snap)
    assert ops == ([] if got == 2 else [Rescale("count", got)])


def test_ds2_reaches_the_needed_parallelism_in_one_step_and_then_waits_its_cooldown():
    ds2 = DS2Controller(cooldown=10.0, headroom=1.0)
    snap = snapshots(src_rate=10_000, true_rate=2_000)  # needs 5, runs 2
    assert ds2.decide(snap) == [Rescale("count", 5)]
    later = snapshots(src_rate=10_000, true_rate=2_000)
    assert later.time < 10.0 + snap.time and ds2.decide(later) == []  # within its cooldown


def test_ds2_propagates_targets_through_selectivity_and_leaves_units_it_is_not_given():
    snap = snapshots(src_rate=1_000, true_rate=2_000, selectivity=3.0)
    ds2 = DS2Controller(["count"], headroom=1.0)
    assert ds2.needed(snap) == {"count": 1}  # 1000/s at 2000/s per SPU: one is enough (it runs 2)
    assert DS2Controller(["other"]).needed(snap) == {}


def test_ds2_sees_the_demand_a_throttled_spout_holds_back_in_its_backlog():
    """Under back-pressure a spout emits what the bolts manage: DS2 on emit rates alone would keep the
    parallelism it has. The backlog, worked off over catch_up seconds, is the demand it adds."""
    throttled = snapshots(src_rate=1_000, true_rate=500)  # two SPUs, saturated: 1000/s is all they manage
    assert DS2Controller(["count"], headroom=1.0).needed(throttled) == {"count": 2}
    behind = snapshots(src_rate=1_000, true_rate=500, src_backlog=30_000)
    assert DS2Controller(["count"], headroom=1.0, catch_up=30.0).needed(behind) == {"count": 4}  # 2000/s
    assert DS2Controller(["count"], headroom=1.0, catch_up=10.0).needed(behind) == {"count": 8}  # 4000/s


def test_ds2_refuses_bad_settings_clearly():
    with pytest.raises(ConfigError, match="1 <= min_spus <= max_spus"):
        DS2Controller(min_spus=3, max_spus=2)
    with pytest.raises(ConfigError, match="headroom is a factor >= 1"):
        DS2Controller(headroom=0.5)
    with pytest.raises(ConfigError, match="catch_up is the seconds"):
        DS2Controller(catch_up=0)
