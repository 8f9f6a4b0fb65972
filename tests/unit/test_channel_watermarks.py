"""ChannelWatermarks: the minimum over the inputs that are not idle, never decreasing (against a naive model)."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from esault.windows.channel_watermarks import NOTHING_YET, ChannelWatermarks


def test_the_watermark_is_the_minimum_of_the_inputs_and_an_input_not_heard_from_holds_it():
    w = ChannelWatermarks(["a", "b"])
    assert w.advance("a", 5_000) is False  # b promised nothing yet
    assert w.watermark == NOTHING_YET
    assert w.advance("b", 1_000) is True
    assert w.watermark == 1_000
    w.advance("b", 7_000)
    assert w.watermark == 5_000
    w.check_invariants()


def test_it_never_decreases_whatever_an_input_sends():
    w = ChannelWatermarks(["a"])
    w.advance("a", 10)
    assert w.advance("a", 3) is False
    assert w.value("a") == 10 and w.watermark == 10
    w.expect("b")  # a new input holds it where it is, it does not pull it back
    assert w.watermark == 10
    w.advance("b", 4)
    assert w.watermark == 10


def test_an_idle_input_is_left_out_until_it_speaks_again():
    w = ChannelWatermarks(["a", "b"])
    w.advance("a", 100)
    assert w.watermark == NOTHING_YET  # b never spoke
    assert w.set_idle("b") is True
    assert w.watermark == 100 and not w.idle
    w.advance("a", 900)
    assert w.watermark == 900
    w.advance("b", 300)  # active again, behind: its records from here on may be late; the watermark holds
    assert w.watermark == 900
    w.advance("a", 2_000)
    assert w.watermark == 900  # b is the minimum again
    w.advance("b", 1_500)
    assert w.watermark == 1_500


def test_when_every_input_is_idle_the_watermark_stays_and_the_whole_is_idle():
    w = ChannelWatermarks(["a", "b"])
    w.advance("a", 100)
    w.advance("b", 200)
    w.set_idle("a")
    w.set_idle("b")
    assert w.watermark == 200 and w.idle  # it took b's once a went idle, and no more
    w.set_idle("a", False)
    assert not w.idle and w.watermark == 200


def test_no_input_at_all_is_not_idle():
    w = ChannelWatermarks()
    assert not w.idle and w.watermark == NOTHING_YET


def test_a_removed_input_stops_holding_the_minimum_and_never_comes_back():
    w = ChannelWatermarks(["a", "b"])
    w.advance("a", 100)
    w.advance("b", 50)
    assert w.remove("b") is True
    assert w.watermark == 100
    assert w.advance("b", 10) is False and "b" not in w
    assert w.expect("b") is False and w.is_gone("b")


def test_a_new_input_starts_at_its_givers_watermark_and_one_heard_from_keeps_its_own():
    w = ChannelWatermarks(["g", "r"])
    w.advance("g", 4_000)
    w.advance("r", 3_000)
    w.expect("n")
    assert w.watermark == 3_000
    assert w.inherit("n", "g") is False  # r still holds it at 3000
    assert w.value("n") == 4_000
    assert w.inherit("r", "g") is False and w.value("r") == 3_000


names = st.sampled_from("abcd")
steps = st.lists(st.one_of(
    st.tuples(st.just("expect"), names),
    st.tuples(st.just("advance"), names, st.integers(0, 100)),
    st.tuples(st.just("idle"), names, st.booleans()),
    st.tuples(st.just("remove"), names),
    st.tuples(st.just("inherit"), names, names),
), max_size=40)


@settings(max_examples=400, deadline=None)
@given(steps)
def test_any_sequence_matches_a_naive_model(ops):
    w = ChannelWatermarks()
    values: dict[str, float] = {}
    idle: set[str] = set()
    gone: set[str] = set()
    mark = -math.inf
    for op in ops:
        before = (w.watermark, w.idle)
        kind, name = op[0], op[1]
        if kind == "expect":
            w.expect(name)
            if name not in gone:
                values.setdefault(name, -math.inf)
        elif kind == "advance":
            w.advance(name, op[2])
            if name not in gone:
                values[name] = max(values.get(name, -math.inf), op[2])
                idle.discard(name)
        elif kind == "idle":
            w.set_idle(name, op[2])
            if name not in gone:
                values.setdefault(name, -math.inf)
                (idle.add if op[2] else idle.discard)(name)
        elif kind == "remove":
            w.remove(name)
            gone.add(name)
            values.pop(name, None)
            idle.discard(name)
        else:
            giver = op[2]
            changed = w.inherit(name, giver)
            if name not in gone and giver in values and values.get(name, -math.inf) == -math.inf:
                values[name] = values[giver]
            assert changed == ((w.watermark, w.idle) != before)
        active = [v for n, v in values.items() if n not in idle]
        if active:
            mark = max(mark, min(active))
        w.check_invariants()
        assert w.watermark == mark
        assert w.watermark >= before[0]  # monotonic
        assert w.idle == (bool(values) and not active)
        assert set(w.inputs()) == set(values)
