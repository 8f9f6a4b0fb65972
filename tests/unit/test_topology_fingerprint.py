"""What a restore accepts: key-grouped bolts may change parallelism; spouts and per-instance bolts may not."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from esault import JobConfig, TopologyBuilder
from esault.checkpoint.coordinator import (AckCollector, CheckpointCoordinator, fingerprint_difference,
                                           fingerprints_compatible, topology_fingerprint)
from esault.checkpoint.store import CheckpointStore
from esault.errors import ConfigError
from esault.testing import CollectorBolt, ListSpout


def topology(spouts: int = 2, counts: int = 2, sinks: int = 1, extra: bool = False):
    builder = TopologyBuilder("wc")
    builder.set_spout("src", ListSpout, spouts, params={"items": []})
    builder.set_bolt("count", CollectorBolt, counts, params={"name": "c"}).key_grouping("src")
    builder.set_bolt("sink", CollectorBolt, sinks, params={"name": "s"}).shuffle_grouping("count")
    if extra:
        builder.set_bolt("more", CollectorBolt, params={"name": "m"}).shuffle_grouping("sink")
    return builder.build()


def test_a_key_grouped_bolt_may_change_parallelism():
    assert topology_fingerprint(topology(counts=2)) == topology_fingerprint(topology(counts=5))


def test_spout_and_per_instance_bolt_parallelism_must_match_and_the_difference_is_named():
    stored = topology_fingerprint(topology())
    fewer_spouts = topology_fingerprint(topology(spouts=1))
    assert stored != fewer_spouts
    assert "unit 'src' had parallelism 2 in the checkpoint and 1 now" in fingerprint_difference(stored, fewer_spouts)
    more_sinks = topology_fingerprint(topology(sinks=3))
    assert "unit 'sink' had parallelism 1 in the checkpoint and 3 now" in fingerprint_difference(stored, more_sinks)
    assert "units ['count', 'sink', 'src'] in the checkpoint" in fingerprint_difference(
        stored, topology_fingerprint(topology(extra=True)))


class MergingSpout(ListSpout):
    """A spout whose positions merge, as KafkaSource's do: any instance count restores."""

    @staticmethod
    def esault_merge_positions(positions: list) -> list:
        return [p for p in positions if p is not None]


def merging_topology(spouts: int):
    builder = TopologyBuilder("wc")
    builder.set_spout("src", MergingSpout, spouts, params={"items": []})
    builder.set_bolt("count", CollectorBolt, 2, params={"name": "c"}).key_grouping("src")
    builder.set_bolt("sink", CollectorBolt, 1, params={"name": "s"}).shuffle_grouping("count")
    return builder.build()


def fingerprint_before_the_merge_hook(topology) -> str:
    """What topology_fingerprint recorded before spout rescale landed: every spout's parallelism as a number."""
    return json.dumps([[u.name, "spout" if u.is_spout else "bolt", bool(u.per_key),
                        None if u.per_key else u.parallelism] for u in topology.units])


def coordinator_over(path, topology) -> CheckpointCoordinator:
    job = SimpleNamespace(name="wc", topology=topology, config=JobConfig(),
                          ctx=SimpleNamespace(checkpoint_path=path))
    return CheckpointCoordinator(job, AckCollector())


def data_dir_written_with(path, fingerprint: str) -> None:
    """A store holding one completed checkpoint, recorded under `fingerprint`."""
    store = CheckpointStore(path)
    store.set_meta("topology", fingerprint)
    store.complete(1, "checkpoint", {"src": {0: {"next": [["t", 0, 5]]}, 1: {"next": [["t", 1, 7]]}}})
    store.close()


@pytest.mark.parametrize("now", [2, 3, 1])
def test_a_data_dir_recorded_before_the_merge_hook_restores_into_a_spout_that_now_has_it_at_any_count(
        tmp_path, now):
    path = tmp_path / "c.sqlite"
    old = fingerprint_before_the_merge_hook(merging_topology(2))
    assert json.loads(old)[0] == ["src", "spout", False, 2], "the old record holds the spout's number"
    data_dir_written_with(path, old)
    current = merging_topology(now)
    assert fingerprints_compatible(old, topology_fingerprint(current))

    coordinator = coordinator_over(path, current)
    point = coordinator.restore_point()
    assert point is not None and point.epoch == 1
    assert coordinator.store.get_meta("topology") == topology_fingerprint(current), \
        "the record is rewritten in the new form, so later restarts compare like with like"


def test_a_numeric_record_still_refuses_another_count_for_a_spout_without_the_hook(tmp_path):
    path = tmp_path / "c.sqlite"
    old = topology_fingerprint(topology(spouts=2))
    data_dir_written_with(path, old)
    assert not fingerprints_compatible(old, topology_fingerprint(topology(spouts=3)))
    with pytest.raises(ConfigError, match="unit 'src' had parallelism 2 in the checkpoint and 3 now"):
        coordinator_over(path, topology(spouts=3)).restore_point()


def test_only_a_spout_recorded_as_a_number_and_now_none_is_tolerated_not_the_other_way_nor_other_changes():
    hooked = topology_fingerprint(merging_topology(2))
    assert not fingerprints_compatible(hooked, fingerprint_before_the_merge_hook(merging_topology(2))), \
        "a class that lost its hook cannot restore a merged record into fixed instances"
    old = json.loads(fingerprint_before_the_merge_hook(merging_topology(2)))
    old[2][3] = 3  # the per-instance sink had 3 instances then, 1 now
    assert not fingerprints_compatible(json.dumps(old), hooked)
    assert not fingerprints_compatible("not json", hooked)
    assert not fingerprints_compatible(json.dumps([["src", "spout", False, 2]]), hooked)
