"""A PE that sets a process() of its own has it called. A guard for the PE loop's speed work: calling the
class's function instead of looking `pe.process` up per tuple (tried in #31, ~10 ns a word) must notice
such a PE, even one made in the middle of a batch."""

from __future__ import annotations

import collections

import pytest

from esault import TopologyBuilder
from esault.testing import CollectorBolt, ListSpout, run_to_completion


@pytest.mark.parametrize("guarantee", ["exactly_once", "at_least_once"])
def test_a_pe_with_a_process_of_its_own_has_it_called_even_after_others_used_the_class_one(config, guarantee):
    """Odd keys come first in every batch, so the loop has started with the class's function when the first
    even key's PE is made; every tuple of an even key must still count twice."""
    from topology_parts import OwnProcessOnEvenKeys

    keys = [f"k{d}" for d in (1, 3, 0, 5, 2, 7, 4, 9, 6, 8)]
    items = [[key, 1] for _ in range(40) for key in keys]
    b = TopologyBuilder(f"own-process-{guarantee}")
    b.set_spout("src", ListSpout, params={"items": items})
    b.set_bolt("count", OwnProcessOnEvenKeys, 2, elastic=False).key_grouping("src")
    b.set_bolt("counts", CollectorBolt, elastic=False).global_grouping("count")
    got = run_to_completion(b, workers="in-process", config=config.replace(guarantee=guarantee), timeout=60)
    expected = {key: 80 if int(key[-1]) % 2 == 0 else 40 for key in keys}
    assert dict(got["counts"]) == expected
    assert len(got["counts"]) == len(collections.Counter(k for k, _ in got["counts"]))
