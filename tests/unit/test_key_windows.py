"""Key windows give, for every key and every window, what naive sliding windows give."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings, strategies as st

from esault.aggregates import Count, Max, Mean, Sum
from esault.windows import KeyWindows, Sliding, WatermarkTracker, WindowSet
from test_window_set import bounded_streams, fixed_oracle, results, run


def expand(outputs, slide, first, last):
    """The result key windows give for each window start in [first, last]: the latest output at or before it."""
    assert not [o for o in outputs if "late" in o]
    starts = [o["start"] for o in outputs]
    assert starts == sorted(starts) and len(set(starts)) == len(starts), "key windows must move forward"
    per_window = {}
    i = -1
    for j in range(math.floor(first / slide), math.floor(last / slide) + 1):
        while i + 1 < len(outputs) and outputs[i + 1]["start"] <= j * slide:
            i += 1
        if i >= 0 and not outputs[i]["empty"]:
            per_window[j * slide] = outputs[i]["result"]
    return per_window


SHAPES = [(10, 1), (10, 5), (12, 3), (6, 6), (30, 2)]
AGGREGATES = [Sum, Count, Max, Mean]


@settings(max_examples=120, deadline=None)
@given(stream=bounded_streams(), shape=st.sampled_from(SHAPES), make=st.sampled_from(AGGREGATES),
       roundtrip=st.booleans())
def test_key_windows_give_the_naive_sliding_result_for_every_window(stream, shape, make, roundtrip):
    events, ticks = stream
    size, slide = shape
    kw_out, state = run(KeyWindows(size, slide, make()), events, ticks, bound=5, roundtrip=roundtrip)
    naive = {start: r for (start, _), r in fixed_oracle(Sliding(size, slide), events, make()).items()}
    assert expand(kw_out, slide, -size, 200 + size) == naive
    assert len(kw_out) <= 2 * len(events), "more than one window per tuple entering and one per tuple leaving"
    if events:
        assert kw_out[-1]["empty"] and kw_out[-1]["result"] == make().result(make().create())
    assert not KeyWindows(size, slide, make()).pending(state)


@settings(max_examples=60, deadline=None)
@given(stream=bounded_streams())
def test_key_windows_and_the_naive_window_state_machine_agree_fed_the_same_way(stream):
    events, ticks = stream
    kw_out, _ = run(KeyWindows(10, 2, Sum()), events, ticks, bound=5)
    state = WindowSet(Sliding(10, 2), Sum())
    naive_out = []
    st_ = state.new_state()
    tracker = WatermarkTracker(5)
    for i, (ts, v) in enumerate(events):
        if i in ticks:
            naive_out += state.advance(st_, tracker.watermark)
        tracker.observe(ts)
        naive_out += state.add(st_, ts, v)
    naive_out += state.advance(st_, math.inf)
    naive = {start: r for (start, _), r in results(naive_out).items()}
    assert expand(kw_out, 2, -10, 210) == naive


def test_a_dense_key_gets_one_window_per_change_not_size_over_slide_per_tuple():
    kw = KeyWindows(100, 1, Count())
    state = kw.new_state()
    for ts in range(50):
        kw.add(state, ts, "x")
    out = kw.advance(state, math.inf)
    assert len(out) == 2 * 50  # each tuple enters once and leaves once
    assert [o["result"] for o in out[:3]] == [1, 2, 3] and out[-1]["empty"]


def test_a_tuple_whose_window_was_evaluated_goes_to_the_side_output():
    kw = KeyWindows(10, 5, Sum())
    state = kw.new_state()
    kw.add(state, 7, 1)
    assert kw.advance(state, 10) == [{"start": 0, "end": 10, "result": 1, "empty": False}]
    assert kw.add(state, 9, 2) == [{"late": 2, "timestamp": 9}]
    assert kw.add(state, 10, 3) == []


def test_key_windows_need_size_a_multiple_of_slide():
    with pytest.raises(ValueError, match="whole multiple of slide"):
        KeyWindows(10, 3, Sum())
