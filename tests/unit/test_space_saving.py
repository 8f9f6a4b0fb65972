"""SpaceSaving against an exact counter: its error bound, no missed heavy hitter, invariants after every step."""

from collections import Counter

import pytest
from hypothesis import given, settings, strategies as st

from esault.routing.space_saving import SpaceSaving

streams = st.lists(st.integers(min_value=0, max_value=40), max_size=400)
epsilons = st.sampled_from([0.5, 0.25, 0.1, 0.05, 0.02])


@settings(max_examples=200, deadline=None)
@given(streams, epsilons)
def test_every_count_over_estimates_by_at_most_its_error_and_epsilon_n(stream, epsilon):
    sketch = SpaceSaving(epsilon)
    for item in stream:
        assert sketch.add(item) == sketch.count(item)
        sketch.check_invariants()
    exact = Counter(stream)
    n = len(stream)
    for item in set(stream) | {-1}:
        if item in sketch:
            assert sketch.count(item) - sketch.error(item) <= exact[item] <= sketch.count(item)
            assert sketch.error(item) <= epsilon * n
        else:
            assert exact[item] <= epsilon * n


@settings(max_examples=200, deadline=None)
@given(streams, epsilons)
def test_no_item_more_frequent_than_epsilon_n_is_missed_by_heavy(stream, epsilon):
    sketch = SpaceSaving(epsilon)
    for item in stream:
        sketch.add(item)
    heavy = sketch.heavy(epsilon)
    for item, f in Counter(stream).items():
        if f > epsilon * len(stream):
            assert item in heavy and heavy[item] >= f


def test_clear_starts_an_empty_window():
    sketch = SpaceSaving(0.1)
    for item in "aabbbc":
        sketch.add(item)
    sketch.clear()
    sketch.check_invariants()
    assert len(sketch) == 0 and sketch.total == 0 and sketch.heavy(0.1) == {}


@pytest.mark.parametrize("epsilon", [0, 1, 1.5, -0.1, "0.1", True])
def test_an_epsilon_outside_zero_to_one_is_refused_with_what_it_means(epsilon):
    with pytest.raises(ValueError, match="epsilon must be a number in \\(0, 1\\).*error bound"):
        SpaceSaving(epsilon)
