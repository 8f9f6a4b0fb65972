"""BoltHarness, the test kit the sink tests use: emits, deferred anchors, waits."""

from __future__ import annotations

import threading

import pytest

from esault.dsl.bolt import Bolt
from esault.testing.harness import BoltHarness


class Doubler(Bolt):
    def open(self, context):
        self.context = context

    def process(self, tup):
        self.emit(tup.key, tup.value * 2)


class Holder(Bolt):
    """Defers every input; a test settles the anchors from another thread."""

    def open(self, context):
        self.held = []

    def process(self, tup):
        self.held.append(self.defer())


def test_feed_calls_process_and_collects_emits(tmp_path):
    with BoltHarness(Doubler, data_dir=tmp_path, topology="top", unit="u", spu_id=2) as h:
        assert h.feed("a", 2) == []
        h.feed("b", 5)
    assert h.emitted == [("a", 4), ("b", 10)]
    ctx = h.bolt.context
    assert (ctx.topology, ctx.unit, ctx.spu_id, ctx.data_dir, ctx.per_key) == ("top", "u", 2, tmp_path, False)


def test_anchors_settled_on_another_thread_wake_the_waiter(tmp_path):
    h = BoltHarness(Holder, data_dir=tmp_path)
    anchors = h.feed_many([("a", 1), ("b", 2), ("c", 3)])
    assert [a.tuple.key for a in anchors] == ["a", "b", "c"]

    def settle():
        anchors[0].ack()
        anchors[1].fail("disk full")
        anchors[2].ack()

    t = threading.Thread(target=settle)
    t.start()
    h.wait_acked(2, timeout=10)
    h.wait_settled(timeout=10)
    t.join()
    assert (h.acked_count, h.failed_count) == (2, 1)
    assert h.failures() == [("b", "disk full")]
    assert h.pending == []


def test_waiting_too_long_says_how_far_it_got(tmp_path):
    h = BoltHarness(Holder, data_dir=tmp_path)
    h.feed("a", 1)[0].fail("nope")
    h.feed("b", 1)
    with pytest.raises(TimeoutError, match=r"acked 0, failed 1 \(first failure: nope\)"):
        h.wait_acked(1, timeout=0.05)


def test_a_second_settle_is_recorded_and_the_first_wins(tmp_path):
    h = BoltHarness(Holder, data_dir=tmp_path)
    [a] = h.feed("a", 1)
    a.ack()
    a.fail("late")
    assert a.acked and not a.failed
    assert h.double_settled == [a]


def test_defer_outside_process_is_an_error(tmp_path):
    h = BoltHarness(Holder, data_dir=tmp_path)
    with pytest.raises(RuntimeError, match="defer\\(\\) must be called inside process"):
        h.bolt.defer()


def test_per_key_harness_sets_the_key_and_the_context(tmp_path):
    h = BoltHarness(Doubler, data_dir=tmp_path, per_key=True, key="k")
    assert h.bolt.key == "k" and h.bolt.context.per_key and h.bolt.context.key == "k"


def test_close_is_called_once_and_feeding_after_close_is_an_error(tmp_path):
    calls = []

    class Closing(Doubler):
        def close(self):
            calls.append(1)

    h = BoltHarness(Closing, data_dir=tmp_path)
    h.close()
    h.close()
    assert calls == [1]
    with pytest.raises(RuntimeError, match="not open"):
        h.feed("a", 1)
