"""SplitGain and the LatencyController: a split that did not raise the bolt's rate holds the next one."""

from __future__ import annotations

from types import SimpleNamespace

from hypothesis import given, settings, strategies as st

from esault.config import ElasticityConfig
from esault.control import Change, LatencyController, ProbeRecord, Split
from esault.control.snapshot import MetricsSnapshot, SpuMetrics, UnitMetrics
from esault.control.split_gain import SplitGain
from esault.elasticity.detector import ProbeSample
from esault.keyhash import KEY_SPACE_MAX
from esault.messages.control import ScaleResult

HALF = KEY_SPACE_MAX // 2


def spus(**rates: float | None) -> dict:
    return {int(k[1:]): SimpleNamespace(processed_rate=r) for k, r in rates.items()}


def feed(gain: SplitGain, start: float, end: float, step: float = 0.5, workers=("w1", "w2"), **rates) -> None:
    t = start
    while t < end - 1e-9:
        t += step
        gain.observe(t, step, spus(**rates), workers)


def test_a_split_that_raised_the_rate_lets_the_next_go_ahead_and_one_that_did_not_holds_it():
    gain = SplitGain(0.1, window=3.0)
    feed(gain, 0.0, 5.0, s1=1000.0)  # one SPU at its capacity
    gain.changed("split", 1, started=5.0, finished=5.2)
    feed(gain, 5.2, 12.0, s1=870.0, s2=870.0)  # two SPUs on two cores: 1.74x
    assert gain.holds(12.0) is None
    gain.changed("split", 1, started=12.0, finished=12.3)
    feed(gain, 12.3, 19.0, s1=600.0, s2=600.0, s3=560.0)  # a third on the same two cores: 1.76k
    why = gain.holds(19.0)
    assert why is not None and "+1.1%" in why and "5.0%" in why, why


def test_a_hold_ends_when_the_rate_rises_past_it_or_the_workers_change_or_a_merge():
    for end in ("rate", "workers", "merge"):
        gain = SplitGain(0.1, window=2.0)
        feed(gain, 0.0, 4.0, s1=900.0, s2=900.0)
        gain.changed("split", 2, started=4.0, finished=4.1)
        feed(gain, 4.1, 8.0, s1=600.0, s2=600.0, s3=600.0)
        assert gain.holds(8.0) is not None
        if end == "rate":
            feed(gain, 8.0, 10.5, s1=700.0, s2=700.0, s3=700.0)  # 2.1k > 1.8k x 1.1: more load came through
        elif end == "workers":
            feed(gain, 8.0, 8.5, workers=("w1", "w2", "w3"), s1=600.0, s2=600.0, s3=600.0)
        else:
            gain.changed("merge", 3, started=8.0, finished=8.2)
        assert gain.holds(10.5) is None, end


def test_the_gain_a_split_must_show_is_the_givers_share_of_it():
    """One hot SPU of four split: relieving it raises the bolt's rate by less than 10%, and that is enough."""
    gain = SplitGain(0.1, window=2.0)
    feed(gain, 0.0, 4.0, s1=1000.0, s2=300.0, s3=300.0, s4=300.0)  # s1 holds 53% of the work
    gain.changed("split", 1, started=4.0, finished=4.1)
    feed(gain, 4.1, 8.0, s1=560.0, s5=560.0, s2=300.0, s3=300.0, s4=300.0)  # +6.3% for the bolt
    assert gain.holds(8.0) is None  # needed 10% x 53% = 5.3%


def test_without_rates_or_with_the_check_off_nothing_is_held():
    gain = SplitGain(0.1, window=2.0)
    feed(gain, 0.0, 4.0, s1=None)  # no SPU has two readings yet
    gain.changed("split", 1, 4.0, 4.1)
    feed(gain, 4.1, 8.0, s1=500.0, s2=None)
    assert gain.holds(8.0) is None
    off = SplitGain(0.0, window=2.0)
    feed(off, 0.0, 4.0, s1=1000.0)
    off.changed("split", 1, 4.0, 4.1)
    feed(off, 4.1, 8.0, s1=500.0, s2=500.0)
    assert off.holds(8.0) is None


@settings(max_examples=200, deadline=None)
@given(before=st.floats(10.0, 1e6), factor=st.floats(0.5, 3.0), share=st.floats(0.05, 1.0),
       min_gain=st.floats(0.01, 1.0))
def test_it_holds_exactly_when_the_rate_rose_less_than_the_givers_share_of_min_gain(before, factor, share, min_gain):
    gain = SplitGain(min_gain, window=2.0)
    giver, rest = before * share, before * (1 - share)
    feed(gain, 0.0, 4.0, s1=giver, s2=rest)
    gain.changed("split", 1, started=4.0, finished=4.0)
    after = before * factor
    feed(gain, 4.0, 8.0, s1=after * share, s2=after * (1 - share))
    held = gain.holds(8.0) is not None
    needed = 1 + min_gain * share
    if abs(factor - needed) > 1e-6:  # at the boundary itself rounding decides
        assert held == (factor < needed)


# --- the controller -------------------------------------------------------------------------------------

CFG = ElasticityConfig(max_latency=0.1, probe_period=1.0, overload_reaction_time=3, overload_reaction_factor=0.5,
                       cooldown=2.0, max_spus=8)


def snapshot(now: float, rates: dict[int, float], probes=(), changes=()) -> MetricsSnapshot:
    width = (KEY_SPACE_MAX + 1) // len(rates)
    metrics = {s: SpuMetrics(s, "w1", ((i * width, (i + 1) * width - 1),), r, None, None, None, 0, 0)
               for i, (s, r) in enumerate(sorted(rates.items()))}
    unit = UnitMetrics("count", "bolt", True, ("src",), metrics)
    return MetricsSnapshot(now, 1.0, {"count": unit}, ("w1", "w2"), tuple(probes), tuple(changes))


def timeouts(spu: int, at: float) -> list:
    return [ProbeRecord("count", spu, ProbeSample(at + i / 10, None, 100)) for i in range(3)]


def test_the_controller_splits_on_overload_then_holds_a_split_that_added_nothing_and_says_why():
    controller = LatencyController("count", CFG)
    t = 0.0
    for _ in range(4):
        t += 1.0
        assert list(controller.decide(snapshot(t, {2: 1000.0}))) == []
    ops = list(controller.decide(snapshot(t + 1, {2: 1000.0}, timeouts(2, t + 0.5))))
    assert [type(op) for op in ops] == [Split]
    controller.applied(ops[0], None, None)
    split = Change(t + 1.5, ScaleResult("split", "count", 2, 3, 0, HALF, 10, 0.01, 0.5, "overload"))
    t += 2.0
    controller.decide(snapshot(t, {2: 870.0, 3: 870.0}, changes=[split]))
    for _ in range(4):
        t += 1.0
        controller.decide(snapshot(t, {2: 870.0, 3: 870.0}))
    ops = list(controller.decide(snapshot(t + 1, {2: 870.0, 3: 870.0}, timeouts(3, t + 0.5))))
    assert [type(op) for op in ops] == [Split], "the first split raised the rate 74%: a second may help"
    controller.applied(ops[0], None, None)
    second = Change(t + 1.5, ScaleResult("split", "count", 3, 4, HALF, KEY_SPACE_MAX, 10, 0.01, 0.5, "overload"))
    t += 2.0
    controller.decide(snapshot(t, {2: 580.0, 3: 590.0, 4: 580.0}, changes=[second]))
    for _ in range(6):
        t += 1.0
        assert list(controller.decide(snapshot(t, {2: 580.0, 3: 590.0, 4: 580.0}, timeouts(4, t - 0.5)))) == []
    holds = [d for d in controller.decisions if d[0] == "hold"]
    assert len(holds) == 1 and "+0.6%" in holds[0][2], controller.decisions
