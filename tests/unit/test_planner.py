"""Split planning (sampled median split point) and merge planning (less loaded neighbour)."""

from __future__ import annotations

from bisect import bisect_left

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from esault.elasticity import HashSampler, choose_merge_target, choose_split_point
from esault.errors import ConfigError, RoutingError
from esault.keyhash import KEY_SPACE_MAX
from esault.routing import IntervalTable


# ------------------------------------------------------------------ sampler
def test_sampler_stores_every_nth_hash() -> None:
    sampler = HashSampler(capacity=100, every=4)
    for h in range(1, 21):
        sampler.record(h)
    assert sampler.snapshot() == [4, 8, 12, 16, 20]
    assert len(sampler) == 5


def test_sampler_keeps_the_newest_capacity_hashes_oldest_first() -> None:
    sampler = HashSampler(capacity=3, every=1)
    for h in range(10):
        sampler.record(h)
    assert sampler.snapshot() == [7, 8, 9]
    sampler.record(10)
    assert sampler.snapshot() == [8, 9, 10]
    assert len(sampler) == 3


def test_sampler_clear_starts_over() -> None:
    sampler = HashSampler(capacity=4, every=2)
    for h in range(9):
        sampler.record(h)
    sampler.clear()
    assert sampler.snapshot() == [] and len(sampler) == 0
    sampler.record(100)
    sampler.record(101)
    assert sampler.snapshot() == [101]


@settings(max_examples=100, deadline=None)
@given(capacity=st.integers(1, 20), every=st.integers(1, 5), hashes=st.lists(st.integers(0, KEY_SPACE_MAX), max_size=200))
def test_sampler_snapshot_is_the_tail_of_every_nth_hash(capacity, every, hashes) -> None:
    sampler = HashSampler(capacity=capacity, every=every)
    for h in hashes:
        sampler.record(h)
    chosen = hashes[every - 1 :: every]
    assert sampler.snapshot() == chosen[-capacity:] if chosen else sampler.snapshot() == []
    assert sampler.capacity == capacity and sampler.every == every


@settings(max_examples=150, deadline=None)
@given(capacity=st.integers(1, 20), every=st.integers(1, 5),
       batches=st.lists(st.lists(st.integers(0, 1000), max_size=30), max_size=12))
def test_recording_a_batch_at_once_equals_recording_its_items_one_by_one(capacity, every, batches) -> None:
    one_by_one = HashSampler(capacity=capacity, every=every)
    batched = HashSampler(capacity=capacity, every=every)
    for batch in batches:
        for h in batch:
            one_by_one.record(h)
        batched.record_many(batch)
        assert batched.snapshot() == one_by_one.snapshot() and len(batched) == len(one_by_one)


def test_sampler_rejects_bad_sizes() -> None:
    with pytest.raises(ConfigError, match=r"HashSampler capacity must be a whole number >= 1, got 0"):
        HashSampler(capacity=0)
    with pytest.raises(ConfigError, match=r"HashSampler every must be a whole number >= 1, got 2.5"):
        HashSampler(every=2.5)  # type: ignore[arg-type]


# -------------------------------------------------------------- split point
def test_split_point_falls_back_to_the_midpoint_with_too_few_samples() -> None:
    assert choose_split_point([], 0, KEY_SPACE_MAX) == 2**30
    assert choose_split_point([5], 0, 99) == 50
    assert choose_split_point([500, 600], 0, 99) == 50  # samples outside the interval are ignored
    assert choose_split_point([], 10, 11) == 11


def test_split_point_halves_a_skewed_interval_by_load() -> None:
    # Almost all traffic sits in the low 1% of the interval: the midpoint would move none of it.
    hashes = list(range(0, 1000, 10)) + [900_000]
    p = choose_split_point(hashes, 0, 999_999)
    below = sum(1 for h in hashes if h < p)
    assert below == len(hashes) // 2
    assert 490 < p <= 500  # between the samples either side of the cut (490 and 500)


def test_split_point_cannot_cut_a_single_hot_key() -> None:
    # One key's hash repeated: the only cut leaves it whole on one side.
    assert choose_split_point([70] * 10, 0, 99) == 70  # the hot key moves whole to the new SPU
    assert choose_split_point([0] * 10, 0, 99) == 50  # it cannot move (p > start): split the rest
    assert choose_split_point([99] * 10, 0, 99) == 99


def test_split_point_needs_an_interval_of_two_hashes() -> None:
    with pytest.raises(RoutingError, match=r"cannot choose a split point in \[5, 5\]: a split needs an interval of at least two hashes"):
        choose_split_point([5, 5], 5, 5)


def best_balance(samples: list[int], start: int, end: int) -> float:
    """Brute force: the smallest |samples below p - n/2| over every valid p that matters."""
    candidates = {start + 1, end} | {h for h in samples if h > start} | {h + 1 for h in samples if h + 1 <= end}
    return min(abs(bisect_left(samples, p) - len(samples) / 2) for p in candidates if start < p <= end)


@st.composite
def intervals_with_samples(draw: st.DrawFn) -> tuple[int, int, list[int]]:
    start = draw(st.integers(0, KEY_SPACE_MAX - 1))
    end = draw(st.one_of(st.integers(start + 1, min(start + 50, KEY_SPACE_MAX)), st.integers(start + 1, KEY_SPACE_MAX)))
    inside = st.integers(start, end)
    edges = st.sampled_from([start, start + 1, end - 1, end])
    outside = st.integers(0, KEY_SPACE_MAX)
    hashes = draw(st.lists(st.one_of(inside, edges, outside), max_size=60))
    return start, end, hashes


@settings(max_examples=300, deadline=None)
@given(case=intervals_with_samples())
def test_split_point_is_in_range_and_as_balanced_as_any_cut(case) -> None:
    start, end, hashes = case
    p = choose_split_point(hashes, start, end)
    assert start < p <= end
    samples = sorted(h for h in hashes if start <= h <= end)
    if len(samples) < 2:
        assert p == start + (end - start + 1) // 2
    else:
        assert abs(bisect_left(samples, p) - len(samples) / 2) == best_balance(samples, start, end)
    # The result is usable by IntervalTable.split as is.
    table = IntervalTable.from_intervals([(0, 1)] + ([(start, 2)] if start else []) + ([(end + 1, 3)] if end < KEY_SPACE_MAX else []))
    owner = table.lookup(start)
    assert table.split(owner, 9, p) == (p, end)


@settings(max_examples=100, deadline=None)
@given(samples=st.lists(st.integers(0, 10_000), min_size=2, max_size=50, unique=True))
def test_distinct_samples_are_split_exactly_in_half(samples) -> None:
    p = choose_split_point(samples, 0, 10_000)
    assert sum(1 for h in samples if h < p) == len(samples) // 2


# ------------------------------------------------------------- merge target
def test_merge_target_is_the_less_loaded_neighbour() -> None:
    table = IntervalTable.from_intervals([(0, 1), (100, 2), (200, 3)])
    assert choose_merge_target(table, 2, {1: 0.9, 2: 0.1, 3: 0.2}) == 3
    assert choose_merge_target(table, 2, {1: 0.1, 2: 0.1, 3: 0.2}) == 1
    assert choose_merge_target(table, 2, {1: 0.5, 3: 0.5}) == 1  # tie: the left one
    assert choose_merge_target(table, 1, {2: 100.0}) == 2  # leftmost: only one neighbour
    assert choose_merge_target(table, 3, {}) == 2


def test_merge_target_prefers_a_neighbour_with_known_load() -> None:
    table = IntervalTable.from_intervals([(0, 1), (100, 2), (200, 3)])
    assert choose_merge_target(table, 2, {3: 5.0}) == 3
    assert choose_merge_target(table, 2, {1: 5.0}) == 1


def test_merge_target_of_the_only_spu_is_refused() -> None:
    with pytest.raises(RoutingError, match="SPU 4 has no neighbour to merge into: it is the only SPU"):
        choose_merge_target(IntervalTable(4), 4, {})
    with pytest.raises(RoutingError, match="SPU 5 is not in the routing table"):
        choose_merge_target(IntervalTable(4), 5, {})


@settings(max_examples=100, deadline=None)
@given(n=st.integers(2, 8), data=st.data())
def test_merge_target_is_always_an_adjacent_spu_with_minimal_load(n, data) -> None:
    table = IntervalTable.from_intervals([(i * 1000, 10 + i) for i in range(n)])
    spu = data.draw(st.sampled_from(table.spus()))
    load = data.draw(st.dictionaries(st.sampled_from(table.spus()), st.floats(0, 10)))
    target = choose_merge_target(table, spu, load)
    assert target in table.neighbours(spu)
    inf = float("inf")
    assert load.get(target, inf) == min(load.get(nb, inf) for nb in table.neighbours(spu))
    table.merge(spu, into=target)  # the planner's answer is a legal merge
    table.check_invariants()
