"""Placement: the SPU budget per worker decides when a worker has room and how many to ask for."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, strategies as st

from esault.cluster.placement import Placement
from esault.errors import ConfigError

loads = st.dictionaries(st.sampled_from([f"w{i}" for i in range(12)]), st.integers(0, 20), max_size=12)


def test_no_budget_packs_the_fewest_loaded_worker_and_never_asks_for_more():
    placement = Placement()
    assert placement.choose({"w1": 3, "w2": 1, "w3": 1}) == "w2"
    assert placement.workers_needed({"w1": 50}, 100) == 0
    assert placement.workers_needed({}, 1) == 1  # with no worker at all, one is needed


def test_a_budget_leaves_full_workers_out_and_asks_for_what_is_short():
    placement = Placement(spus_per_worker=2)
    assert placement.choose({"w1": 2, "w2": 2}) is None
    assert placement.choose({"w1": 2, "w2": 1}) == "w2"
    assert placement.workers_needed({"w1": 2, "w2": 1}, 1) == 0
    assert placement.workers_needed({"w1": 2, "w2": 1}, 4) == 2  # 1 free slot, 3 short: two workers of 2
    assert placement.workers_needed({"w1": 2}, 3, pending=1) == 1  # the pending worker holds 2 of them


@pytest.mark.parametrize("budget", [0, -1, 1.5, "4", True])
def test_a_budget_that_is_no_whole_positive_number_is_refused_with_what_to_give(budget):
    with pytest.raises(ConfigError, match="spus_per_worker must be a whole number >= 1"):
        Placement(spus_per_worker=budget)


@given(loads, st.integers(1, 8), st.integers(0, 40), st.integers(0, 3))
def test_the_workers_asked_for_are_exactly_enough(spus_on, budget, new, pending):
    """Asking for workers_needed() more makes room for every new SPU, and one fewer would not."""
    placement = Placement(budget)
    needed = placement.workers_needed(spus_on, new, pending)
    assert placement.free(spus_on, pending + needed) >= new
    if needed:
        assert placement.free(spus_on, pending + needed - 1) < new


@given(loads, st.one_of(st.none(), st.integers(1, 8)))
def test_the_chosen_worker_has_room_and_no_roomy_worker_has_fewer_spus(spus_on, budget):
    placement = Placement(budget)
    chosen = placement.choose(spus_on)
    roomy = {w: n for w, n in spus_on.items() if budget is None or n < budget}
    if not roomy:
        assert chosen is None
        return
    assert chosen in roomy and spus_on[chosen] == min(roomy.values())
    assert placement.free(spus_on) >= 1 if budget else placement.free(spus_on) == math.inf
