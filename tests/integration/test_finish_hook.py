"""Bolt.finish() at the end of the input: in topological and chain order, with and without checkpoints,
fused into a spout's SPU or on SPUs of its own; a finish() that raises fails the run."""

from __future__ import annotations

import pytest

from esault import TopologyBuilder
from esault.errors import RunIncomplete
from esault.testing import CollectorBolt, ListSpout, run_to_completion

ITEMS = [[f"k{i}", i] for i in range(300)]


@pytest.mark.parametrize("guarantee", ["exactly_once", "at_least_once"])
@pytest.mark.parametrize("chain", [True, False])
def test_finish_runs_once_per_instance_after_what_upstream_finish_emitted(config, guarantee, chain):
    """first's finish() emits its sum into second, whose finish() must run after it (chained: in chain order
    within the spout's SPU; on SPUs of their own: upstream first, through the barrier or the stop order);
    the keyed count downstream finishes last, each key once."""
    from topology_parts import CountOnFinish, TallyOnFinish

    b = TopologyBuilder(f"finish-order-{guarantee}-{chain}")
    b.set_spout("src", ListSpout, 2, params={"items": ITEMS})  # each instance emits every item
    b.set_bolt("first", TallyOnFinish, 2, elastic=False, chain=chain).shuffle_grouping("src")
    b.set_bolt("second", TallyOnFinish, 2, elastic=False, chain=chain).shuffle_grouping("first")
    b.set_bolt("sums", CollectorBolt, elastic=False).global_grouping("second")
    b.set_bolt("count", CountOnFinish, 2, elastic=False).key_grouping("second")
    b.set_bolt("counts", CollectorBolt, elastic=False).global_grouping("count")
    topology = b.build()
    assert topology.chained("first") is chain and topology.chained("second") is chain
    got = run_to_completion(topology, workers="in-process", config=config.replace(guarantee=guarantee),
                            timeout=60)
    total = sum(v for _, v in ITEMS)
    sums = [v for _, v in got["sums"]]  # one per instance of second: what first's finish() fed it, summed
    assert len(sums) == 2 and sum(sums) == 2 * total, sums
    if chain:  # each spout SPU's first feeds its own second
        assert sums == [total, total], sums
    assert got["counts"] == [("sum", 2)]


def test_a_finish_that_raises_fails_the_run_naming_the_bolt(config):
    from topology_parts import FinishFailsBolt

    b = TopologyBuilder("finish-fails")
    b.set_spout("src", ListSpout, params={"items": [["a", 1], ["b", 2], ["a", 3]]})
    b.set_bolt("count", FinishFailsBolt, elastic=False).key_grouping("src")
    with pytest.raises(RunIncomplete, match=r"finish\(\) or close\(\) raised 2 time\(s\) \(count 2\)"):
        run_to_completion(b, workers="in-process", config=config.replace(guarantee="exactly_once"), timeout=30)


def test_rows_a_bolt_emits_in_finish_reach_an_exactly_once_sink(config, tmp_path):
    """What close() emitted into an exactly-once sink failed the run (after the final checkpoint); the same
    rows from finish() are inside the final checkpoint and are published."""
    import collections

    from spark_sink import SparkSink
    from topology_parts import CountOnFinish

    items = [["a", 1], ["b", 2], ["a", 3]] * 50
    b = TopologyBuilder("finish-into-sink")
    b.set_spout("src", ListSpout, params={"items": items})
    b.set_bolt("count", CountOnFinish, 2, elastic=False).key_grouping("src")
    b.set_bolt("sink", SparkSink, elastic=False, params={
        "table": "finish_counts", "schema": "key STRING, value BIGINT", "engine": "pyarrow",
        "warehouse": str(tmp_path / "warehouse")}).shuffle_grouping("count")
    run_to_completion(b, workers="in-process", config=config.replace(guarantee="exactly_once"), timeout=30)
    import pyarrow.dataset as ds

    files = [str(p) for p in (tmp_path / "warehouse" / "finish_counts").rglob("*.parquet") if "_esault" not in p.parts]
    table = ds.dataset(files, format="parquet").to_table().to_pydict()
    assert sorted(zip(table["key"], table["value"])) == sorted(collections.Counter(k for k, _ in items).items())
