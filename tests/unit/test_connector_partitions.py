"""The pure core of KafkaSource: who owns a partition, and where a source is in each (esault.connectors.partitions)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from esault.connectors.partitions import AckedOffsets, PartitionOffsets, TimeAligner, owned, owner

topics = st.lists(st.text(min_size=1, max_size=8), min_size=1, max_size=3, unique=True)


@given(topics, st.integers(1, 40), st.integers(1, 9))
def test_the_instances_own_disjoint_partition_sets_that_cover_every_partition(names, partitions, instances):
    every = [(t, p) for t in names for p in range(partitions)]
    sets = [owned(every, i, instances) for i in range(instances)]
    flat = [tp for s in sets for tp in s]
    assert sorted(flat) == sorted(every)
    assert len(flat) == len(set(flat))


@given(st.text(min_size=1, max_size=8), st.integers(1, 30), st.integers(1, 30), st.integers(1, 9))
def test_partitions_added_to_a_topic_never_move_the_existing_ones(topic, before, added, instances):
    old = [(topic, p) for p in range(before)]
    new = old + [(topic, p) for p in range(before, before + added)]
    for i in range(instances):
        assert set(owned(old, i, instances)) <= set(owned(new, i, instances))


def test_a_topic_of_four_partitions_spreads_evenly_over_two_and_four_instances():
    four = [("orders", p) for p in range(4)]
    assert sorted(len(owned(four, i, 2)) for i in range(2)) == [2, 2]
    assert sorted(len(owned(four, i, 4)) for i in range(4)) == [1, 1, 1, 1]
    assert owner("orders", 1, 4) == (owner("orders", 0, 4) + 1) % 4


@settings(max_examples=200)
@given(st.lists(st.integers(1, 5), min_size=1, max_size=60), st.data())
def test_records_are_emitted_once_each_in_order_across_any_checkpoint_and_restore(batches, data):
    """A partition of `sum(batches)` records read in fetches; at random moments the position is
    snapshotted, later restored (a rollback), and the fetch that follows may overlap what was emitted
    (librdkafka refetching). What is emitted after the last restore, from each restored position, is
    exactly the records after it: none twice, none skipped (the off-by-one of other Kafka sources)."""
    tp = ("t", 0)
    total = sum(batches)
    offsets = PartitionOffsets()
    offsets.add(tp, 0)
    emitted: list[int] = []
    saved = (offsets.snapshot(), 0)  # (position, how many were emitted when it was taken)
    fetch_from = 0
    while fetch_from < total:
        size = data.draw(st.integers(1, 5))
        overlap = data.draw(st.integers(0, 3))
        for offset in range(max(0, fetch_from - overlap), min(total, fetch_from + size)):
            if offsets.accept(tp, offset):
                emitted.append(offset)
        fetch_from = offsets.next_offset(tp)
        action = data.draw(st.sampled_from(["go on", "snapshot", "restore"]))
        if action == "snapshot":
            saved = (offsets.snapshot(), len(emitted))
        elif action == "restore":
            nexts, ends = PartitionOffsets.read(saved[0])
            offsets = PartitionOffsets()
            offsets.add(tp, nexts[tp], ends.get(tp))
            del emitted[saved[1]:]  # a rollback: what came after the checkpoint is undone downstream
            fetch_from = offsets.next_offset(tp)
    assert emitted == list(range(total))


def test_a_bounded_partition_stops_at_its_end_and_drops_records_past_it():
    tp = ("t", 3)
    offsets = PartitionOffsets()
    offsets.add(tp, 5, end=8)
    assert [o for o in range(5, 12) if offsets.accept(tp, o)] == [5, 6, 7]
    assert offsets.done(tp) and offsets.all_done()


def test_an_end_the_broker_has_not_confirmed_is_raised_by_the_first_fetch_and_never_checkpointed():
    """Tansu's ListOffsets answers the last batch's base offset + 1: 1 for a partition written in one batch."""
    tp = ("t", 0)
    offsets = PartitionOffsets()
    offsets.add(tp, 0, end=1, end_known=False)
    assert not offsets.all_done()
    assert offsets.snapshot()["end"] == []  # a restore asks the broker again
    offsets.confirm_end(tp, 750)
    assert offsets.snapshot()["end"] == [["t", 0, 750]]
    offsets.confirm_end(tp, 900)  # once: records written after the first fetch are past the end
    assert offsets.end(tp) == 750


def test_lag_counts_the_records_between_the_next_offset_and_the_log_end_or_a_bounded_end():
    offsets = PartitionOffsets()
    offsets.add(("a", 0), 10)
    offsets.add(("a", 1), 10, end=15)
    assert offsets.lag(("a", 0), 25) == 15
    assert offsets.lag(("a", 1), 25) == 5
    assert offsets.lag(("a", 0), 3) == 0


@pytest.mark.parametrize("position", [None, [], {"next": "x"}, {"next": [["t", 0]]}, {"next": [["t", -1, 0]]},
                                      {"next": [[1, 0, 0]]}, {"next": [["t", 0, 1.5]]}])
def test_a_position_that_is_not_a_kafka_source_position_is_refused_naming_the_shape(position):
    with pytest.raises(ValueError, match=r"\[topic, partition, offset\]"):
        PartitionOffsets.read(position)


@settings(max_examples=200)
@given(st.lists(st.lists(st.tuples(st.integers(0, 2), st.integers(1, 4)), min_size=1, max_size=3),
                min_size=1, max_size=25), st.randoms())
def test_the_committable_offset_of_each_partition_never_passes_a_batch_not_yet_acked(batches, rnd):
    """Batches (each with records of some partitions) are acked in random order; after every ack, each
    partition's committed offset is exactly the end of its longest fully-acked prefix of batches."""
    acked = AckedOffsets()
    ends: dict[tuple, list[tuple[int, int]]] = {}  # tp -> [(batch, end)] in emit order: the naive model
    position = {p: 0 for p in range(3)}
    for batch, parts in enumerate(batches):
        nexts = {}
        for p, count in parts:
            position[p] += count
            nexts[("t", p)] = position[p]
        for tp, end in nexts.items():
            ends.setdefault(tp, []).append((batch, end))
        acked.emitted(batch, nexts)
    order = list(range(len(batches)))
    rnd.shuffle(order)
    done: set[int] = set()
    committed: dict[tuple, int] = {}
    for batch in order:
        acked.settled(batch)
        done.add(batch)
        committed.update(acked.take())
        for tp, seq in ends.items():
            prefix = 0
            for b, end in seq:
                if b not in done:
                    break
                prefix = end
            assert committed.get(tp, 0) == prefix


def test_aligned_records_leave_in_timestamp_order_and_wait_for_a_partition_not_heard_from():
    aligner = TimeAligner(max_skew=5)
    a, b = ("t", 0), ("t", 1)
    for ts in (0, 10, 20, 30):
        aligner.add(a, ts, f"a{ts}")
    assert aligner.release([a, b]) == []  # b may still hold anything
    aligner.add(b, 12, "b12")
    # a's 0 and 10 are older than b's 12; a's 20 is more than 5 past b's newest once b has nothing buffered
    assert aligner.release([a, b]) == [(a, "a0"), (a, "a10"), (b, "b12")]
    assert aligner.release([a, b]) == []
    aligner.at_end(b)  # b has nothing to read now: it holds no one back
    assert aligner.release([a, b]) == [(a, "a20"), (a, "a30")]


@settings(max_examples=200)
@given(st.lists(st.lists(st.integers(0, 50), max_size=15), min_size=1, max_size=4), st.integers(0, 20), st.data())
def test_aligned_release_never_lets_a_record_pass_one_more_than_max_skew_older_that_may_still_come(
        parts, skew, data):
    """Each partition's timestamps arrive in order, in random interleavings; every released record is
    at most `skew` past the newest timestamp of any partition with nothing buffered, and at the end (every
    partition at its end) everything is released, each partition in its own order."""
    streams = {("t", i): sorted(ts) for i, ts in enumerate(parts)}
    aligner = TimeAligner(skew)
    cursor = {tp: 0 for tp in streams}
    newest: dict = {}
    released: list = []
    reading = list(streams)
    while any(cursor[tp] < len(s) for tp, s in streams.items()):
        tp = data.draw(st.sampled_from([tp for tp, s in streams.items() if cursor[tp] < len(s)]))
        ts = streams[tp][cursor[tp]]
        aligner.add(tp, ts, (tp, cursor[tp], ts))
        cursor[tp] += 1
        newest[tp] = ts
        for _, item in aligner.release(reading):
            empty = [q for q in reading if aligner.buffered(q) == 0 and q != item[0]]
            assert all(q in newest and item[2] <= newest[q] + skew for q in empty)
            released.append(item)
    for tp in streams:
        aligner.at_end(tp)
    released.extend(item for _, item in aligner.release(reading))
    for tp, s in streams.items():
        assert [i for (q, i, _) in released if q == tp] == list(range(len(s)))


@settings(max_examples=400)
@given(st.integers(0, 30), st.one_of(st.none(), st.integers(0, 60)), st.booleans(),
       st.lists(st.lists(st.integers(1, 4), max_size=12), max_size=5), st.integers(0, 25))
def test_accepting_a_run_of_increasing_offsets_at_once_is_the_same_as_accepting_each_in_turn(
        start, end, end_known, runs, rewind):
    """KafkaSource's plain case moves the offsets once per run of a partition's records (accept_run); the
    records it emits and the position it keeps must be those of accept() on each record."""
    tp = ("t", 0)
    each, at_once = PartitionOffsets(), PartitionOffsets()
    for offsets in (each, at_once):
        offsets.add(tp, start, end, end_known)
    first = max(0, start - rewind)  # a fetch may overlap what was emitted (a refetch after a seek)
    for gaps in runs:
        run, offset = [], first
        for gap in gaps:
            run.append(offset)
            offset += gap  # gaps: control records, compacted ones
        emitted = [o for o in run if each.accept(tp, o)]
        begin, stop = at_once.accept_run(tp, run)
        assert run[begin:stop] == emitted
        assert at_once.snapshot() == each.snapshot() and at_once.done(tp) == each.done(tp)
        first = max(0, each.next_offset(tp) - rewind)
    assert at_once.accept_run(("t", 9), [1, 2]) == (0, 0), "a partition not owned: nothing"


def test_increasing_is_strict():
    from esault.connectors.partitions import increasing

    assert increasing([]) and increasing([3]) and increasing([1, 2, 5])
    assert not increasing([1, 1]) and not increasing([2, 1, 3])
