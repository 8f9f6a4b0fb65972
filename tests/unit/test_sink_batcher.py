"""The sink's Batcher: sealing by count and age, one batch per partition value, ids in order."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from esault.errors import ConfigError
from spark_sink.batcher import Batcher


def test_a_flush_is_due_when_batch_rows_are_buffered():
    b = Batcher(batch_rows=3, batch_seconds=None, writer="w")
    assert not b.add(("p",), {"i": 0}, "a0", now=0)
    assert not b.add(("p",), {"i": 1}, "a1", now=0)
    assert b.add(("p",), {"i": 2}, "a2", now=0)
    [batch] = b.seal(now=1)
    assert [r["i"] for r in batch.rows] == [0, 1, 2]
    assert batch.anchors == ["a0", "a1", "a2"]
    assert (batch.seq, batch.batch_id, batch.partition) == (0, "w.0000000000", ("p",))
    assert b.buffered_rows == 0 and b.deadline() is None
    b.check_invariants()


def test_age_makes_a_flush_due_counting_from_the_oldest_buffered_row():
    b = Batcher(batch_rows=100, batch_seconds=5.0, writer="w")
    assert b.deadline() is None
    b.add((), {}, None, now=10.0)
    b.add((), {}, None, now=14.0)
    assert b.deadline() == 15.0
    assert not b.due(14.9)
    assert b.due(15.0)
    b.seal(15.0)
    b.add((), {}, None, now=20.0)
    assert b.deadline() == 25.0


def test_a_flush_seals_one_batch_per_partition_value_in_first_seen_order():
    b = Batcher(batch_rows=10, batch_seconds=None, writer="w", first_seq=7)
    for i, p in enumerate(["h1", "h2", "h1", "h3", "h2"]):
        b.add((p,), {"i": i}, i, now=0)
    assert b.pending_batches() == 3
    batches = b.seal(now=0)
    assert [(x.partition, x.seq, [r["i"] for r in x.rows]) for x in batches] == [
        (("h1",), 7, [0, 2]), (("h2",), 8, [1, 4]), (("h3",), 9, [3])
    ]
    assert b.next_seq == 10


def test_sealing_nothing_uses_no_sequence_number():
    b = Batcher(batch_rows=1, batch_seconds=None, writer="w")
    assert b.seal(0) == []
    assert b.next_seq == 0


@pytest.mark.parametrize(
    ("rows", "seconds", "message"),
    [(0, None, "batch_rows must be a whole number >= 1"), (True, None, "batch_rows"),
     (5, 0, "batch_seconds must be seconds > 0 or None"), (5, "1", "batch_seconds")],
)
def test_bad_batching_settings_are_refused(rows, seconds, message):
    with pytest.raises(ConfigError, match=message):
        Batcher(rows, seconds, "w")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.tuples(st.just("add"), st.integers(0, 3)), st.just(("seal", 0))), max_size=60),
       st.integers(1, 8))
def test_every_row_is_sealed_exactly_once_in_arrival_order_per_partition(ops, batch_rows):
    b = Batcher(batch_rows=batch_rows, batch_seconds=None, writer="w")
    sealed = []
    n = 0
    for op, part in ops:
        if op == "add":
            if b.add((part,), {"n": n, "p": part}, n, now=0):
                sealed += b.seal(0)
            n += 1
        else:
            sealed += b.seal(0)
        b.check_invariants()
        assert b.buffered_rows < batch_rows
    sealed += b.seal(0)
    seen = [r["n"] for batch in sealed for r in batch.rows]
    assert sorted(seen) == list(range(n))
    for batch in sealed:
        assert {r["p"] for r in batch.rows} == {batch.partition[0]}
        assert [r["n"] for r in batch.rows] == sorted(r["n"] for r in batch.rows)
        assert batch.anchors == [r["n"] for r in batch.rows]
        assert len(batch.rows) <= batch_rows
    assert [x.seq for x in sealed] == list(range(len(sealed)))
    assert len({x.batch_id for x in sealed}) == len(sealed)
