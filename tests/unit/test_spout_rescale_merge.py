"""A source's positions merge so that any count of instances restores every partition exactly once, at its
offset (esault_merge_positions, the hook Job.rescale of a spout and a restore with another parallelism use)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from esault import TopologyBuilder
from esault.checkpoint.coordinator import topology_fingerprint
from esault.connectors import KafkaSource
from esault.connectors.partitions import PartitionOffsets, merge_positions, owned
from esault.dsl.topology import UnitSpec
from esault.job.spout_rescale import spout_rescale_refusal
from esault.testing import CollectorBolt, ListSpout

partition_sets = st.dictionaries(st.tuples(st.sampled_from(["a", "orders", "t-2"]), st.integers(0, 30)),
                                 st.integers(0, 10**9), min_size=0, max_size=40)


def positions_of(offsets: dict, instances: int) -> list[dict]:
    """What `instances` instances record at a checkpoint: each its own partitions' next offsets."""
    out = []
    for i in range(instances):
        mine = PartitionOffsets()
        for tp in owned(offsets, i, instances):
            mine.add(tp, offsets[tp])
        out.append(mine.snapshot())
    return out


@given(partition_sets, st.integers(1, 9), st.integers(1, 9))
def test_merge_then_own_then_restore_gives_every_partition_exactly_once_at_its_offset(offsets, before, after):
    merged = KafkaSource.esault_merge_positions(positions_of(offsets, before))
    restored: list[tuple] = []
    for i in range(after):  # each new instance keeps its own share of the merged position (restore_position)
        nexts, _ = PartitionOffsets.read(merged)
        restored += [(tp, nexts[tp]) for tp in owned(offsets, i, after)]
    assert sorted(restored) == sorted(offsets.items())


def test_merge_keeps_the_ends_of_a_bounded_read_and_skips_instances_that_recorded_nothing():
    one = {"next": [["t", 0, 5]], "end": [["t", 0, 9]]}
    two = {"next": [["t", 1, 7], ["u", 0, 0]], "end": []}
    assert merge_positions([one, None, two]) == {"next": [["t", 0, 5], ["t", 1, 7], ["u", 0, 0]],
                                                 "end": [["t", 0, 9]]}


def test_a_partition_in_two_positions_is_refused_naming_it():
    with pytest.raises(ValueError, match=r"partition \('t', 1\) is in two instances' positions"):
        merge_positions([{"next": [["t", 1, 3]]}, {"next": [["t", 1, 4]]}])


def test_a_spout_without_the_hook_is_refused_naming_the_hook_and_none_naming_both_guarantees():
    plain = UnitSpec("src", ListSpout, 2, True)
    assert "esault_merge_positions" in spout_rescale_refusal(plain, "exactly_once")
    kafka = UnitSpec("orders", KafkaSource, 2, True)
    assert spout_rescale_refusal(kafka, "exactly_once") is None
    assert spout_rescale_refusal(kafka, "at_least_once") is None  # live, at the acked watermarks
    refusal = spout_rescale_refusal(kafka, "none")
    assert "guarantee='exactly_once'" in refusal and "guarantee='at_least_once'" in refusal


def test_at_least_once_refuses_a_spout_that_merges_positions_but_cannot_hand_shares_over_live():
    class MergeOnly(ListSpout):
        @staticmethod
        def esault_merge_positions(positions):
            return positions[0]

    refusal = spout_rescale_refusal(UnitSpec("src", MergeOnly, 2, True), "at_least_once")
    assert "release_share(), released_position() and take_share()" in refusal, refusal
    assert spout_rescale_refusal(UnitSpec("src", MergeOnly, 2, True), "exactly_once") is None


def test_the_fingerprint_lets_a_spout_with_the_hook_restore_with_another_parallelism():
    def topology(spouts: int):
        b = TopologyBuilder("k")
        b.set_spout("orders", KafkaSource, spouts, params={"topic": "t", "bootstrap": "127.0.0.1:1"})
        b.set_bolt("c", CollectorBolt, params={"name": "c"}).shuffle_grouping("orders")
        return b.build()

    assert topology_fingerprint(topology(2)) == topology_fingerprint(topology(4))


def test_a_spout_rescale_outside_its_bounds_is_refused_naming_the_bound():
    kafka = UnitSpec("orders", KafkaSource, 2, True)
    assert "give a whole number >= 1" in spout_rescale_refusal(kafka, "exactly_once", 0, 8)
    assert "give a whole number >= 1" in spout_rescale_refusal(kafka, "exactly_once", True, 8)
    assert "at most 8 (its max_spus" in spout_rescale_refusal(kafka, "exactly_once", 9, 8)
    assert spout_rescale_refusal(kafka, "exactly_once", 8, 8) is None
