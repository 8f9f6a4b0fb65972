"""Operations are bounded before anything is built from them: SPU counts by the unit's limit, ranges and split
points by the key space (esault.job.requests), whatever the numbers."""

from __future__ import annotations

import tracemalloc

import pytest
from hypothesis import given, settings, strategies as st

from esault import KEY_SPACE_MAX, TopologyBuilder
from esault.config import MAX_SPUS
from esault.errors import ScalingError
from esault.job.requests import rescale_request, split_request, spu_limit, workload_request
from esault.testing import CollectorBolt, ListSpout

HALF = (KEY_SPACE_MAX + 1) // 2
WORKLOAD = {7: [(0, HALF - 1)], 8: [(HALF, KEY_SPACE_MAX)]}
"""A key-grouped unit on two SPUs, as Job.workload gives it."""

numbers = st.one_of(st.integers(), st.integers(-10, 20), st.floats(allow_nan=True), st.booleans(), st.none(),
                    st.text(max_size=3))


@settings(max_examples=300, deadline=None)
@given(spus=numbers, limit=st.integers(1, 16))
def test_a_rescale_is_refused_unless_it_is_a_whole_number_within_the_limit_and_then_covers_the_key_space(spus,
                                                                                                          limit):
    fits = isinstance(spus, int) and not isinstance(spus, bool) and 1 <= spus <= limit
    if not fits:
        with pytest.raises(ScalingError, match=r"rescale of 'count' to .* SPUs: (give a whole number >= 1|it runs "
                                               rf"at most {limit} \(its max_spus)"):
            rescale_request("count", spus, WORKLOAD, "manual", limit)
        return
    request = rescale_request("count", spus, WORKLOAD, "manual", limit)
    ranges = sorted(r for owned in request.assignment.values() for r in owned)
    assert len(request.assignment) == spus and ranges[0][0] == 0 and ranges[-1][1] == KEY_SPACE_MAX
    assert all(a[1] + 1 == b[0] for a, b in zip(ranges, ranges[1:]))


@settings(max_examples=300, deadline=None)
@given(lo=numbers, hi=numbers)
def test_a_range_outside_the_key_space_is_refused_naming_it(lo, hi):
    whole = all(isinstance(x, int) and not isinstance(x, bool) for x in (lo, hi))
    if whole and 0 <= lo <= hi <= KEY_SPACE_MAX:
        assert workload_request("count", {7: [(lo, hi)]}, "manual").assignment == {7: [(lo, hi)]}
    else:
        with pytest.raises(ScalingError, match=r"SPU 7's range \[.*\] is not within the key space: give whole "
                                               rf"numbers 0 <= lo <= hi <= {KEY_SPACE_MAX}"):
            workload_request("count", {7: [(lo, hi)]}, "manual")


@settings(max_examples=200, deadline=None)
@given(at=numbers)
def test_a_split_point_outside_the_key_space_is_refused(at):
    if at is None or (isinstance(at, int) and not isinstance(at, bool) and 0 <= at <= KEY_SPACE_MAX):
        assert split_request("count", 7, at, "manual").at == at
    else:
        with pytest.raises(ScalingError, match=rf"give an SPU id and a hash 0 <= at <= {KEY_SPACE_MAX}"):
            split_request("count", 7, at, "manual")


def test_a_huge_count_is_refused_before_anything_is_allocated():
    tracemalloc.start()
    try:
        for spus in (10**9, 10**12, 10**100):
            with pytest.raises(ScalingError, match="it runs at most 8"):
                rescale_request("count", spus, WORKLOAD, "manual", 8)
        with pytest.raises(ScalingError, match="names 1025 SPUs; 'count' runs at most 8"):
            workload_request("count", {-i: [(i, i)] for i in range(1, 1026)}, "manual", 8)
        assert tracemalloc.get_traced_memory()[1] < 1 << 20, "refused after allocating"
    finally:
        tracemalloc.stop()


def test_a_units_limit_is_its_max_spus_or_its_parallelism_if_larger_and_max_spus_caps_both():
    b = TopologyBuilder("t")
    b.set_spout("src", ListSpout, params={"items": []})
    b.set_bolt("few", CollectorBolt, 2, max_spus=4).key_grouping("src")
    b.set_bolt("wide", CollectorBolt, 12).key_grouping("src")
    topology = b.build()
    assert (spu_limit(topology, "few"), spu_limit(topology, "wide"), MAX_SPUS) == (4, 12, 1024)
