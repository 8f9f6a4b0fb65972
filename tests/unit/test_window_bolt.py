"""WindowBolt driven by BoltHarness: its declaration errors, state, ticks and processing time."""

from __future__ import annotations

import pytest

from esault import TopologyError
from esault.aggregates import Count, Sum, TopK
from esault.clock import ManualClock
from esault.testing.harness import BoltHarness
from esault.transport.codec import decode, encode
from esault.windows import EventTime, ProcessingTime, Session, Sliding, Tumbling, WindowBolt, is_late


class Totals(WindowBolt):
    window = Tumbling(10)
    aggregate = Sum()
    time = EventTime(max_out_of_orderness=2)


class PerSecond(WindowBolt):
    window = Tumbling(1.0)
    aggregate = Count()
    time = ProcessingTime()


class Amounts(WindowBolt):
    window = Session(5)
    aggregate = TopK(2)

    def timestamp(self, tup):
        return tup.value["ts"]

    def value(self, tup):
        return tup.value["amount"]


def test_windows_fire_on_ticks_once_the_spu_watermark_passes_their_end():
    with BoltHarness(Totals, per_key=True, key="a") as h:
        h.feed_many([("a", [1, 5]), ("a", [11, 1])])
        assert h.tick() and h.emitted == []  # watermark 9: [0, 10) may still get a tuple
        h.feed("a", [12, 1])
        h.tick()
        assert h.emitted == [("a", {"start": 0, "end": 10, "result": 5, "update": False})]
        h.feed("a", [3, 1])
        assert h.emitted[-1] == ("a", {"late": 1, "timestamp": 3}) and is_late(h.emitted[-1][1])


def test_a_quiet_pe_fires_on_the_watermark_its_spus_other_keys_move_then_stops_ticking():
    a = BoltHarness(Totals, per_key=True, key="a")
    b = BoltHarness(Totals, per_key=True, key="b")
    b.bolt._esault_spu = a.services  # two PEs of one SPU
    a.feed_many([("a", [1, 5]), ("a", [30, 1])])
    a.tick()
    assert [v["start"] for _, v in a.emitted] == [0]
    b.feed("b", [50, 0])  # only b's tuples move the SPU's watermark now: a's [30, 40) is due
    a.tick()
    assert [v["start"] for _, v in a.emitted] == [0, 30]
    assert not a.tick(), "a PE without windows keeps ticking"


def test_a_moved_key_takes_its_windows_and_asks_for_ticks_on_its_new_spu():
    with BoltHarness(Totals, per_key=True, key="a") as h:
        h.feed("a", [1, 5])
        state = decode(encode(h.bolt.snapshot_state()))  # what moves with the key: plain data only
    assert set(state) == {"window_state"}
    with BoltHarness(Totals, per_key=True, key="a") as moved:
        moved.bolt.restore_state(state)
        assert moved.services.ticking == {"a"}
        moved.services.local.clear()
        moved.feed("a", [20, 1])
        moved.tick()
        assert moved.emitted == [("a", {"start": 0, "end": 10, "result": 5, "update": False})]


def test_processing_time_windows_use_the_job_clock():
    clock = ManualClock(100.0)
    with BoltHarness(PerSecond, per_key=True, key="k", clock=clock) as h:
        h.feed_many([("k", "x"), ("k", "y")])
        clock.advance(0.5)
        h.tick()
        assert h.emitted == []
        h.feed("k", "z")
        clock.advance(0.6)
        h.tick()
        assert h.emitted == [("k", {"start": 100.0, "end": 101.0, "result": 3, "update": False})]


def test_timestamp_and_value_can_come_from_any_tuple_shape():
    with BoltHarness(Amounts, per_key=True, key="u") as h:
        h.feed_many([("u", {"ts": t, "amount": a}) for t, a in [(0, 3), (4, 9), (8, 1), (30, 2)]])
        h.tick()
        assert h.emitted == [("u", {"start": 0, "end": 13, "result": [9, 3], "update": False})]


def test_flush_on_close_fires_what_is_pending():
    class Bounded(Totals):
        flush_on_close = True

    h = BoltHarness(Bounded, per_key=True, key="a")
    h.feed("a", [1, 5])
    h.close()
    assert h.emitted == [("a", {"start": 0, "end": 10, "result": 5, "update": False})]


def test_the_end_of_input_fires_what_is_pending_once_so_close_fires_nothing_more():
    """The SPU calls finish() at the end of the input (under exactly_once before the final snapshot); close() comes later."""
    class Bounded(Totals):
        flush_on_close = True

    h = BoltHarness(Bounded, per_key=True, key="a")
    h.feed("a", [1, 5])
    h.finish()
    fired = [("a", {"start": 0, "end": 10, "result": 5, "update": False})]
    assert h.emitted == fired
    h.close()
    assert h.emitted == fired, "nothing pending is left for close()"


def test_without_flush_on_close_the_end_of_input_fires_nothing():
    h = BoltHarness(Totals, per_key=True, key="a")
    h.feed("a", [1, 5])
    h.finish()
    assert h.emitted == []
    h.close()


@pytest.mark.parametrize("attrs, message", [
    ({"window": 10}, r"window must be Tumbling\(size\), Sliding\(size, slide\) or Session\(gap\)"),
    ({"window": Tumbling(5), "aggregate": "median"}, "is not an aggregate"),
    ({"window": Tumbling(5), "time": "event"}, r"time must be EventTime\("),
    ({"window": Tumbling(5), "key_windows": True}, r"key_windows = True needs window = Sliding"),
    ({"window": Sliding(10, 3), "key_windows": True}, "whole multiple of slide"),
    ({"window": Sliding(10, 5), "key_windows": True, "time": EventTime(allowed_lateness=3)},
     "take no allowed_lateness"),
])
def test_a_badly_declared_window_bolt_fails_at_class_definition_naming_the_fix(attrs, message):
    with pytest.raises(TopologyError, match=message):
        type("Bad", (WindowBolt,), attrs)


def test_a_window_bolt_without_a_window_or_key_grouping_says_so_at_open():
    class NoWindow(WindowBolt):
        pass

    with pytest.raises(TopologyError, match="without a window"):
        BoltHarness(NoWindow, per_key=True, key="a")
    with pytest.raises(TopologyError, match="declare it with key_grouping"):
        BoltHarness(Totals, per_key=False)


def test_the_spu_ticks_only_the_keys_whose_windows_are_due_each_once():
    a = BoltHarness(Totals, per_key=True, key="a")
    b = BoltHarness(Totals, per_key=True, key="b")
    b.bolt._esault_spu = a.services
    a.feed("a", [1, 5])  # [0, 10): due at watermark 10
    b.feed("b", [15, 1])  # [10, 20): due at 20; the SPU's watermark is 13 now
    assert Totals.esault_due_keys(a.services.local, 0.0) == ["a"]
    assert Totals.esault_due_keys(a.services.local, 0.0) == [], "a due key is handed out once"
    assert a.services.ticking == {"a", "b"}
    b.feed("b", [30, 1])
    assert Totals.esault_due_keys(a.services.local, 0.0) == ["b"]
