"""Two-stage aggregation, pure: any routing of any batches through partials and a merge equals one fold per key."""

from __future__ import annotations

from collections import defaultdict

import pytest
from hypothesis import given, settings, strategies as st

from esault.aggregates import Aggregate, Count, Max, Mean, Min, Reduce, Sum, TopK, aggregate_of
from esault.dsl import Bolt, Grouping, Spout, TopologyBuilder
from esault.dsl.aggregation import (
    FinalAggregate, PartialAggregate, aggregate_from_wire, aggregate_to_wire,
)
from esault.dsl.tuple import Tuple
from esault.errors import TopologyError
from esault.routing.tag import TagPartitioner

AGGREGATES = [Count(), Sum(), Min(), Max(), Mean(), TopK(3)]


def run(bolt: Bolt, pairs, out: list) -> None:
    bolt.emit = lambda k, v: out.append((k, v))
    view = Tuple()
    for key, value in pairs:
        view.key, view.value = key, value
        bolt.key = key
        bolt.process(view)


def two_stage(aggregate: Aggregate, batches: list[list[tuple]], spus: int, seed: int) -> dict:
    """Batches routed by TAG to `spus` partial instances; their per-batch partials merged per key."""
    wire = aggregate_to_wire(aggregate)
    router = TagPartitioner(range(spus), epsilon=0.1, seed=seed)
    partials = {spu: PartialAggregate(wire) for spu in range(spus)}
    finals: dict = {}
    emitted: list = []
    for i, batch in enumerate(batches):
        per_spu = defaultdict(list)
        for key, value in batch:
            per_spu[router.choose(key)].append((key, value))
        for spu, pairs in per_spu.items():
            run(partials[spu], pairs, emitted)
            partials[spu].on_batch_end()
        if i % 3 == 2:
            router.end_window()
    for key, acc in emitted:
        final = finals.get(key) or finals.setdefault(key, FinalAggregate(wire, merge=True))
        run(final, [(key, acc)], [])
    agg = aggregate_of(aggregate)
    return {key: agg.result(final.acc) for key, final in finals.items()}


batches = st.lists(st.lists(st.tuples(st.sampled_from("aaaaabbbcdefg"), st.integers(-20, 20)), max_size=30),
                   max_size=12)


@settings(max_examples=100, deadline=None)
@given(batches, st.sampled_from(AGGREGATES), st.integers(1, 5), st.integers(0, 3))
def test_partials_merged_per_key_equal_one_fold_per_key(batches, aggregate, spus, seed):
    per_key = defaultdict(list)
    for batch in batches:
        for key, value in batch:
            per_key[key].append(value)
    expected = {key: aggregate.result(aggregate.fold(values)) for key, values in per_key.items()}
    assert two_stage(aggregate, batches, spus, seed) == expected


def test_a_partial_holds_nothing_after_its_batch_so_checkpoints_and_hand_offs_carry_nothing():
    partial = PartialAggregate("count")
    out: list = []
    run(partial, [("a", 1), ("a", 1), ("b", 1)], out)
    assert out == [] and partial.snapshot_state() == {}
    partial.on_batch_end()
    assert sorted(out) == [("a", 2), ("b", 1)]
    partial.on_batch_end()
    assert len(out) == 2


def test_aggregates_travel_as_plain_data_when_they_can():
    assert aggregate_to_wire(Count()) == "count"
    wire = aggregate_to_wire(TopK(4))
    assert wire == {"class": "esault.aggregates:TopK", "args": {"k": 4}}
    topk = aggregate_from_wire(wire)
    assert type(topk) is TopK and topk.k == 4
    assert topk.result(topk.merge([5, 9, 1], [7, 3])) == [9, 7, 5, 3]
    reduce = Reduce(lambda a, b: a * b)
    assert aggregate_to_wire(reduce) is reduce  # a lambda cannot travel: in-process only


class Words(Spout):
    def next_tuple(self) -> None:
        pass


def test_aggregate_declares_a_tag_grouped_partial_and_a_key_grouped_final():
    b = TopologyBuilder("t")
    b.set_spout("words", Words)
    b.aggregate("counts", Count(), parallelism=4, final_parallelism=2).tag_grouping("words")
    topology = b.build()
    partial, final = topology.unit("counts_partial"), topology.unit("counts")
    assert partial.inputs[0].grouping is Grouping.TAG and partial.parallelism == 4 and not partial.per_key
    assert final.inputs[0].source == "counts_partial" and final.per_key and final.parallelism == 2
    assert final.params == {"aggregate": "count", "merge": True}


def test_key_grouped_aggregate_is_one_stage_that_adds():
    b = TopologyBuilder("t")
    b.set_spout("words", Words)
    b.aggregate("counts", "sum").key_grouping("words")
    topology = b.build()
    assert [u.name for u in topology.units] == ["words", "counts"]
    assert topology.unit("counts").params == {"aggregate": "sum"}


def test_aggregate_mistakes_say_what_to_do():
    b = TopologyBuilder("t")
    b.set_spout("words", Words)
    with pytest.raises(TopologyError, match="aggregate 'c': 'median' is not an aggregate.*TopK"):
        b.aggregate("c", "median")
    with pytest.raises(TopologyError, match="final_parallelism must be a whole number"):
        b.aggregate("c", Count(), final_parallelism=0)
    with pytest.raises(TopologyError, match="takes no params"):
        b.aggregate("c", Count(), params={"x": 1})
    declared = b.aggregate("c", Count()).tag_grouping("words")
    with pytest.raises(TopologyError, match="already reads with tag_grouping"):
        declared.shuffle_grouping("words")
    with pytest.raises(TopologyError, match="duplicate unit name 'c_partial'"):
        b.aggregate("c", Count()).partial_key_grouping("words")


class Combiner(Bolt):
    def process(self, tup) -> None:
        pass

    def on_batch_end(self) -> None:
        pass


class Plain(Bolt):
    def process(self, tup) -> None:
        pass


def test_a_bolt_that_flushes_at_batch_ends_is_never_chained_where_it_would_never_see_one():
    b = TopologyBuilder("t")
    b.set_spout("words", Words)
    b.set_bolt("combine", Combiner).shuffle_grouping("words")
    b.set_bolt("plain", Plain, elastic=False).shuffle_grouping("combine")
    topology = b.build()
    assert not topology.chained("combine") and topology.chained("plain")
