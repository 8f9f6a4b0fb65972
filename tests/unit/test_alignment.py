"""Alignment against a naive model: what runs before the snapshot is exactly what was sent before each barrier."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from esault.checkpoint.alignment import Alignment


def test_a_channel_is_held_from_its_barrier_until_every_expected_barrier_arrived():
    a = Alignment(3, {1, 2})
    assert not a.holds(1)
    a.barrier(1)
    assert a.holds(1) and not a.holds(2) and not a.complete and a.missing == {2}
    a.hold("after-1")
    a.barrier(2)
    assert a.complete
    assert a.release() == ["after-1"] and a.release() == []


def test_barriers_before_the_expected_set_hold_but_never_complete_until_it_is_known():
    a = Alignment(5)
    a.barrier(7)
    assert a.holds(7) and not a.complete
    a.expect({7})
    assert a.complete


@st.composite
def channels(draw):
    """Per sender: tuples numbered in send order, with the barrier somewhere among them; an interleaving."""
    senders = draw(st.lists(st.integers(0, 6), min_size=1, max_size=4, unique=True))
    streams = {}
    for s in senders:
        n = draw(st.integers(0, 6))
        cut = draw(st.integers(0, n))
        streams[s] = [("data", s, i) for i in range(cut)] + [("barrier", s, None)] + \
                     [("data", s, i) for i in range(cut, n)]
    order = []
    cursors = {s: 0 for s in senders}
    while any(cursors[s] < len(streams[s]) for s in senders):
        s = draw(st.sampled_from([s for s in senders if cursors[s] < len(streams[s])]))
        order.append(streams[s][cursors[s]])
        cursors[s] += 1
    late_expect = draw(st.integers(0, len(order)))
    return senders, streams, order, late_expect


@settings(max_examples=300, deadline=None)
@given(channels())
def test_the_snapshot_sees_exactly_the_data_sent_before_each_barrier_and_nothing_is_lost(case):
    senders, streams, order, late_expect = case
    before = {("data", s, i) for s in senders for (kind, _, i) in streams[s][:streams[s].index(("barrier", s, None))]
              if kind == "data"}
    align = Alignment(1)
    processed: list = []
    snapshot: set | None = None
    for step, message in enumerate(order):
        if step == late_expect:  # the coordinator's word may come at any point
            align.expect(senders)
        kind, sender, _ = message
        if kind == "barrier":
            align.barrier(sender)
        elif snapshot is None and align.holds(sender):
            align.hold(message)
        else:
            processed.append(message)
        if snapshot is None and align.complete:
            snapshot = set(processed)
            processed.extend(align.release())
    if snapshot is None:
        align.expect(senders)
        assert align.complete
        snapshot = set(processed)
        processed.extend(align.release())
    assert snapshot == before
    every = [m for s in senders for m in streams[s] if m[0] == "data"]
    assert sorted(processed) == sorted(every)
    for s in senders:  # per channel, FIFO order is kept
        assert [m for m in processed if m[1] == s] == [m for m in streams[s] if m[0] == "data"]
