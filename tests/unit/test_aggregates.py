"""Aggregates: merge of partial folds equals one fold, whatever the partition."""

import operator

import pytest
from hypothesis import given, strategies as st

from esault.aggregates import Count, Max, Mean, Min, Reduce, Sum, TopK, aggregate_of

AGGREGATES = [Count(), Sum(), Min(), Max(), Mean(), TopK(3), Reduce(operator.add)]


@pytest.mark.parametrize("agg", AGGREGATES, ids=lambda a: type(a).__name__)
@given(values=st.lists(st.integers(-1000, 1000), max_size=40), cuts=st.lists(st.integers(0, 40), max_size=4))
def test_merging_partial_folds_in_any_grouping_gives_the_single_fold(agg, values, cuts):
    bounds = sorted({0, len(values), *[c for c in cuts if c <= len(values)]})
    parts = [agg.fold(values[a:b]) for a, b in zip(bounds, bounds[1:])]
    merged = agg.create()
    for part in reversed(parts):  # reversed: merge order must not matter
        merged = agg.merge(part, merged)
    assert agg.result(merged) == agg.result(agg.fold(values))


def test_builtin_aggregates_compute_what_their_names_say():
    values = [5, 1, 4, 9, 2]
    assert [aggregate_of(n).result(aggregate_of(n).fold(values)) for n in ("count", "sum", "min", "max", "mean")] \
        == [5, 21, 1, 9, 4.2]
    assert TopK(2).result(TopK(2).fold(values)) == [9, 5]
    assert Mean().result(Mean().create()) is None


def test_an_unknown_aggregate_name_says_what_is_accepted():
    with pytest.raises(ValueError, match="count.*TopK"):
        aggregate_of("median")
    with pytest.raises(ValueError, match="positive int"):
        TopK(0)
