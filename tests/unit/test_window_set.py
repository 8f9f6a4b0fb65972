"""Window cores against brute-force oracles: assigners, the per-key window state machine, watermarks."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings, strategies as st

from esault.aggregates import Count, Mean, Sum, TopK
from esault.transport.codec import decode, encode
from esault.windows import EventTime, Session, Sliding, Tumbling, WatermarkTracker, WindowSet


# --- a stream within the out-of-orderness bound, and brute-force oracles -------

@st.composite
def bounded_streams(draw, bound: int = 5, max_ts: int = 200):
    """(events in arrival order, tick positions): each timestamp >= the greatest before it - bound.

    Built from delays: arrival = ts + delay with delay in [0, bound]; sorting by arrival keeps
    every tuple within the bound of all the tuples before it."""
    n = draw(st.integers(0, 40))
    ts = draw(st.lists(st.integers(0, max_ts), min_size=n, max_size=n))
    delays = draw(st.lists(st.integers(0, bound), min_size=n, max_size=n))
    values = draw(st.lists(st.integers(-50, 50), min_size=n, max_size=n))
    order = sorted(range(n), key=lambda i: (ts[i] + delays[i], i))
    events = [(ts[i], values[i]) for i in order]
    ticks = draw(st.sets(st.integers(0, n)))
    return events, ticks


def fixed_oracle(assigner, events, aggregate):
    """Every window holding at least one event, folded from scratch: {(start, end): result}."""
    out = {}
    for start in {s for ts, _ in events for s in assigner.starts(ts)}:
        end = assigner.end(start)
        out[(start, end)] = aggregate.result(aggregate.fold(v for ts, v in events if start <= ts < end))
    return out


def session_oracle(gap, events, aggregate):
    """Sessions from sorted timestamps: a tuple joins the session it overlaps or touches."""
    out = {}
    current: list = []
    for ts, v in sorted(events, key=lambda e: e[0]):
        if current and ts > current[-1][0] + gap:
            out[(current[0][0], max(t for t, _ in current) + gap)] = aggregate.result(
                aggregate.fold(x for _, x in current))
            current = []
        current.append((ts, v))
    if current:
        out[(current[0][0], max(t for t, _ in current) + gap)] = aggregate.result(aggregate.fold(x for _, x in current))
    return out


def run(windows: WindowSet, events, ticks, bound, roundtrip=False):
    """Feed events in order through one SPU's watermark, advancing at the tick positions, then to infinity."""
    state = windows.new_state()
    tracker = WatermarkTracker(bound)
    out = []
    for i, (ts, v) in enumerate(events):
        if i in ticks:
            out += windows.advance(state, tracker.watermark)
            if roundtrip:  # the state crosses a hand-off or a checkpoint here
                state = decode(encode(state))
        tracker.observe(ts)
        out += windows.add(state, ts, v)
    out += windows.advance(state, tracker.watermark)
    out += windows.advance(state, math.inf)
    return out, state


def results(outputs):
    assert not [o for o in outputs if "late" in o], "a tuple within the bound was judged late"
    finals = [((o["start"], o["end"]), o["result"]) for o in outputs if not o["update"]]
    assert len(finals) == len(set(k for k, _ in finals)), "a window fired twice"
    return dict(finals)


ASSIGNERS = [Tumbling(10), Tumbling(7, offset=3), Sliding(10, 5), Sliding(12, 1), Sliding(10, 3)]


@settings(max_examples=100, deadline=None)
@given(stream=bounded_streams(), which=st.integers(0, len(ASSIGNERS) - 1), roundtrip=st.booleans())
def test_any_order_within_the_watermark_bound_gives_the_brute_force_window_results(stream, which, roundtrip):
    events, ticks = stream
    assigner = ASSIGNERS[which]
    outputs, state = run(WindowSet(assigner, Sum()), events, ticks, bound=5, roundtrip=roundtrip)
    assert results(outputs) == fixed_oracle(assigner, events, Sum())
    assert state["w"] == {}, "windows past the watermark stay in memory"


@settings(max_examples=100, deadline=None)
@given(stream=bounded_streams(), gap=st.integers(1, 15), roundtrip=st.booleans())
def test_session_windows_in_any_order_within_the_bound_equal_sessions_of_the_sorted_stream(stream, gap, roundtrip):
    events, ticks = stream
    outputs, state = run(WindowSet(Session(gap), Count()), events, ticks, bound=5, roundtrip=roundtrip)
    assert results(outputs) == session_oracle(gap, events, Count())
    assert state["w"] == {}


@st.composite
def touching_streams(draw):
    """(gap, bound, events in arrival order, tick positions): a stream within the bound on a grid that makes
    sessions touch and tuples carry the watermark itself as their timestamp, in any order the bound allows.

    Each tuple arrives at ts + delay (delay in [0, bound], often exactly 0 or bound) and ties break at random,
    so a tuple may come right after one `bound` ahead of it: its timestamp is then the watermark."""
    unit = draw(st.sampled_from([1, 2, 5]))
    gap = unit * draw(st.integers(1, 3))
    bound = unit * draw(st.integers(0, 3))
    n = draw(st.integers(0, 12))
    ts = draw(st.lists(st.integers(0, 3 * n).map(lambda k: k * unit), min_size=n, max_size=n))
    delays = draw(st.lists(st.one_of(st.just(0), st.just(bound), st.integers(0, bound)), min_size=n, max_size=n))
    values = draw(st.lists(st.integers(1, 1000), min_size=n, max_size=n))
    ties = draw(st.permutations(range(n)))
    order = sorted(range(n), key=lambda i: (ts[i] + delays[i], ties[i]))
    ticks = draw(st.sets(st.integers(0, n)) | st.just(set(range(n + 1))))  # or a tick before every tuple
    return gap, bound, [(ts[i], values[i]) for i in order], ticks


@settings(max_examples=1000, deadline=None)
@given(stream=touching_streams(), lateness=st.integers(0, 10), roundtrip=st.booleans())
def test_touching_sessions_merge_whatever_the_arrival_order_and_tick_timing_within_the_bound(stream, lateness,
                                                                                             roundtrip):
    gap, bound, events, ticks = stream
    windows = WindowSet(Session(gap), Sum(), allowed_lateness=lateness)
    outputs, state = run(windows, events, ticks, bound=bound, roundtrip=roundtrip)
    assert not [o for o in outputs if o.get("update")], "a session within the bound fired before it was complete"
    assert results(outputs) == session_oracle(gap, events, Sum())
    assert state["w"] == {}


def test_a_tick_between_two_touching_sessions_does_not_split_them():
    """Issue 26: Session(gap=100), bound 50. ("a", 1000) then ("b", 1150) move the SPU's watermark to 1100;
    a tick there; then ("a", 1100), within the bound, touches a's session [1000, 1100): they are one."""
    windows = WindowSet(Session(100), Sum())
    tracker = WatermarkTracker(50)
    keys = {"a": windows.new_state(), "b": windows.new_state()}
    out = []
    for key, ts, value, tick_before in [("a", 1000, 1, False), ("b", 1150, 10, False), ("a", 1100, 100, True)]:
        if tick_before:
            for name, state in keys.items():
                out += [(name, o) for o in windows.advance(state, tracker.watermark)]
        tracker.observe(ts)
        out += [(key, o) for o in windows.add(keys[key], ts, value)]
    assert out == [], "nothing is complete at watermark 1100: a session ending there is still open"
    assert windows.advance(keys["a"], 1200) == []
    assert windows.advance(keys["a"], 1201) == [{"start": 1000, "end": 1200, "result": 101, "update": False}]


def test_a_session_at_its_end_takes_a_tuple_at_the_watermark_and_a_fixed_window_there_is_complete():
    sessions, tumbling = WindowSet(Session(10), Sum()), WindowSet(Tumbling(10), Sum())
    s, t = sessions.new_state(), tumbling.new_state()
    sessions.add(s, 0, 1)
    tumbling.add(t, 0, 1)
    assert sessions.advance(s, 10) == []
    assert tumbling.advance(t, 10) == [{"start": 0, "end": 10, "result": 1, "update": False}]
    assert sessions.add(s, 10, 2) == [], "touching: merged, not late"
    assert sessions.advance(s, 21) == [{"start": 0, "end": 20, "result": 3, "update": False}]
    assert sessions.add(s, 10, 5) == [{"late": 5, "timestamp": 10}], "past the watermark now: late"


@settings(max_examples=50, deadline=None)
@given(stream=bounded_streams(bound=0))
def test_a_sorted_stream_with_no_bound_needs_no_slack(stream):
    events, ticks = stream
    outputs, _ = run(WindowSet(Sliding(10, 5), Mean()), events, ticks, bound=0)
    assert results(outputs) == fixed_oracle(Sliding(10, 5), events, Mean())


# --- lateness and the side output ------------------------------------------------

@settings(max_examples=100, deadline=None)
@given(stream=bounded_streams(bound=60), lateness=st.integers(0, 20))
def test_out_of_bound_tuples_are_either_folded_in_or_sent_to_the_side_output_never_both_nor_lost(stream, lateness):
    events, ticks = stream  # disorder up to 60 against a bound of 5: some tuples are late
    windows = WindowSet(Tumbling(10), Sum(), allowed_lateness=lateness)
    outputs, state = run(windows, events, ticks, bound=5)
    late = [(o["timestamp"], o["late"]) for o in outputs if "late" in o]
    latest = {}
    for o in outputs:
        if "late" not in o:
            assert o["update"] == ((o["start"], o["end"]) in latest), "update marks exactly the re-fires"
            latest[(o["start"], o["end"])] = o["result"]
    accepted = list(events)
    for tuple_ in late:
        accepted.remove(tuple_)
    assert latest == fixed_oracle(Tumbling(10), accepted, Sum())


def test_a_tuple_for_a_window_past_the_watermark_goes_to_the_side_output():
    windows = WindowSet(Tumbling(10), Sum())
    state = windows.new_state()
    windows.add(state, 3, 1)
    assert windows.advance(state, 10) == [{"start": 0, "end": 10, "result": 1, "update": False}]
    assert windows.add(state, 9, 5) == [{"late": 5, "timestamp": 9}]
    assert windows.advance(state, 100) == []


def test_allowed_lateness_refires_a_window_with_the_late_tuple_then_purges_it():
    windows = WindowSet(Tumbling(10), Sum(), allowed_lateness=5)
    state = windows.new_state()
    windows.add(state, 3, 1)
    assert windows.advance(state, 12) == [{"start": 0, "end": 10, "result": 1, "update": False}]
    assert windows.add(state, 9, 5) == [{"start": 0, "end": 10, "result": 6, "update": True}]
    assert windows.advance(state, 15) == []
    assert state["w"] == {}
    assert windows.add(state, 9, 7) == [{"late": 7, "timestamp": 9}]


def test_a_late_tuple_for_an_empty_window_within_the_lateness_fires_it_at_once_as_a_first_result():
    windows = WindowSet(Tumbling(10), Sum(), allowed_lateness=5)
    state = windows.new_state()
    windows.advance(state, 12)
    assert windows.add(state, 1, 4) == [{"start": 0, "end": 10, "result": 4, "update": False}]


def test_a_sliding_tuple_late_for_some_windows_still_counts_in_its_open_ones():
    windows = WindowSet(Sliding(10, 5), Count())
    state = windows.new_state()
    windows.advance(state, 10)
    assert windows.add(state, 7, "x") == []  # [0, 10) is over, [5, 15) is open
    assert windows.advance(state, 15) == [{"start": 5, "end": 15, "result": 1, "update": False}]


def test_a_session_bridging_two_sessions_merges_them():
    windows = WindowSet(Session(5), TopK(3))
    state = windows.new_state()
    windows.add(state, 0, 1)
    windows.add(state, 10, 3)
    windows.add(state, 5, 2)  # [5, 10) touches both
    assert windows.advance(state, math.inf) == [{"start": 0, "end": 15, "result": [3, 2, 1], "update": False}]


def test_the_watermark_never_goes_back():
    tracker = WatermarkTracker(3)
    assert tracker.watermark == -math.inf
    tracker.observe(10)
    tracker.observe(4)
    assert tracker.watermark == 7


@pytest.mark.parametrize("make, message", [
    (lambda: Tumbling(0), "size must be a finite number > 0"),
    (lambda: Sliding(5, 10), "slide must be <= size"),
    (lambda: Session(-1), "gap must be a finite number > 0"),
    (lambda: EventTime(max_out_of_orderness=-1), "max_out_of_orderness=...\\): must be a finite number >= 0"),
])
def test_bad_window_parameters_say_what_to_give(make, message):
    with pytest.raises(ValueError, match=message):
        make()
