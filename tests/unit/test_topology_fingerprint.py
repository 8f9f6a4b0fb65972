"""What a restore accepts: key-grouped bolts may change parallelism; spouts and per-instance bolts may not."""

from __future__ import annotations

from esault import TopologyBuilder
from esault.checkpoint.coordinator import fingerprint_difference, topology_fingerprint
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
