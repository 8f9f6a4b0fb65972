"""ControlEvents: a bounded log every reader sees in order; only each SPU's newest probe keeps its key sample."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from esault.control import events as events_module
from esault.control.events import Change, ControlEvents, ProbeRecord
from esault.elasticity.detector import ProbeSample


def probe(spu: int, t: float, hashes: tuple[int, ...] = ()) -> ProbeRecord:
    return ProbeRecord("count", spu, ProbeSample(t, 0.01, 10), hashes)


def test_an_older_probe_gives_up_its_key_sample_when_a_newer_one_of_the_same_spu_comes():
    events = ControlEvents(capacity=100)
    reader = events.cursor()
    sample = tuple(range(1024))
    for i in range(50):
        events.record(probe(2, float(i), sample))
        events.record(probe(3, float(i), sample))
    got, _, dropped = events.since(reader)
    assert dropped == 0 and len(got) == 100
    assert [e.sample.sent_at for e in got if e.spu == 2] == [float(i) for i in range(50)], "every record, in order"
    held = [e for e in got if e.hashes]
    assert [(e.spu, e.sample.sent_at) for e in held] == [(2, 49.0), (3, 49.0)], "only the newest per SPU"
    assert held[0].hashes == sample


def test_a_reader_that_took_a_record_keeps_what_it_took_and_a_probe_without_hashes_changes_nothing():
    events = ControlEvents(capacity=10)
    first = events.cursor()
    events.record(probe(2, 0.0, (5, 6, 7)))
    taken, cursor, _ = events.since(first)
    events.record(probe(2, 1.0))  # no sample: the older record keeps its own
    assert [e.hashes for e in events.since(first)[0]] == [(5, 6, 7), ()]
    events.record(probe(2, 2.0, (8,)))
    events.record(Change(3.0, object()))
    assert taken[0].hashes == (5, 6, 7), "records a reader already has are its own"
    newer, _, _ = events.since(cursor)
    assert [e.hashes for e in newer if isinstance(e, ProbeRecord)] == [(), (8,)]
    assert [e.hashes for e in events.since(first)[0] if isinstance(e, ProbeRecord)] == [(), (), (8,)]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.booleans()), max_size=80), st.integers(1, 30))
def test_readers_see_every_event_in_order_and_the_newest_sample_of_each_spu(steps, capacity):
    """Whatever the interleaving and however small the log, the log keeps the last `capacity` events in order,
    and each SPU's newest sampled record still in it holds its sample: what a controller splits by."""
    events = ControlEvents(capacity=capacity)
    start = events.cursor()
    recorded = []
    for i, (spu, sampled) in enumerate(steps):
        record = probe(spu, float(i), (i, spu) if sampled else ())
        events.record(record)
        recorded.append(record)
    got, _, dropped = events.since(start)
    assert dropped == max(0, len(recorded) - capacity)
    assert [(e.spu, e.sample) for e in got] == [(r.spu, r.sample) for r in recorded[dropped:]]
    newest = {}
    for r in recorded:
        if r.hashes:
            newest[r.spu] = r
    for e in got:
        assert e.hashes == (newest[e.spu].hashes if newest.get(e.spu) is not None
                            and e.sample == newest[e.spu].sample else ())


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), st.booleans()), max_size=150), st.integers(1, 12))
def test_samples_of_spus_long_gone_are_forgotten_and_the_live_ones_kept(steps, capacity):
    """Many SPUs come and go (a job that splits and merges for weeks): the sample bookkeeping keeps no more
    than about twice the SPUs with a record in the log, and each newest sample still in the log holds."""
    with pytest.MonkeyPatch.context() as patch:  # a small threshold, for every pass (it is read at each one)
        patch.setattr(events_module, "PRUNE_SAMPLED_AT", 4)
        events = ControlEvents(capacity=capacity)
        start = events.cursor()
        newest: dict[int, ProbeRecord] = {}
        for i, (spu, sampled) in enumerate(steps):
            record = probe(spu, float(i), (i, spu) if sampled else ())
            events.record(record)
            if sampled:
                newest[spu] = record
            # a pass keeps the samples of the log's records and the new one: at most capacity + 1
            assert len(events._sampled) <= max(4, 2 * (capacity + 1))
    got, _, _ = events.since(start)
    for e in got:
        keeps = newest.get(e.spu) is not None and e.sample == newest[e.spu].sample
        assert e.hashes == (newest[e.spu].hashes if keeps else ())
