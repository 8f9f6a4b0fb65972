"""Two-stage aggregates on real actors: TAG, PKG and shuffle+combine give a key grouping's final results."""

from __future__ import annotations

import json
import threading
from collections import defaultdict

import numpy as np
import pytest

from esault import TopologyBuilder
from esault.aggregates import Count, Mean, Min, Sum, TopK, aggregate_of
from esault.dsl.aggregation import FinalAggregate
from esault.testing import CollectorBolt, ListSpout, collected, wait_until

from topology_parts import GATES, GatedListSpout, SlowFirstPartial


def zipf_items(n: int, seed: int) -> list[tuple[str, int]]:
    rng = np.random.default_rng(seed)
    keys = rng.zipf(1.2, n) % 300
    values = rng.integers(-50, 50, n)
    return [(f"w{k}", int(v)) for k, v in zip(keys, values)]


def oracle(items, aggregate) -> dict:
    agg = aggregate_of(aggregate)
    per_key: dict = defaultdict(list)
    for key, value in items:
        per_key[key].append(value)
    return {key: agg.result(agg.fold(values)) for key, values in per_key.items()}


def last_per_key(name: str) -> dict:
    latest: dict = {}
    for key, result in collected(name):
        latest[key] = result
    return latest


def build(name: str, items, aggregate, grouping: str, hold_at: int | None = None, parallelism: int = 3):
    b = TopologyBuilder(name)
    b.set_spout("src", GatedListSpout, params={"items": items, "gate": name,
                                               "hold_at": len(items) if hold_at is None else hold_at})
    GATES.setdefault(name, threading.Event())
    getattr(b.aggregate("agg", aggregate, parallelism=parallelism), f"{grouping}_grouping")("src")
    b.set_bolt("out", CollectorBolt, params={"name": name}).global_grouping("agg")
    return b.build()


@pytest.mark.parametrize("grouping", ["tag", "partial_key", "shuffle", "key"])
@pytest.mark.parametrize("aggregate", [Count(), Sum(), Mean(), Min(), TopK(3)], ids=lambda a: type(a).__name__)
def test_every_plan_ends_with_the_aggregates_of_a_plain_fold_per_key(cluster, config, grouping, aggregate):
    items = zipf_items(3000, seed=len(grouping))
    name = f"plan-{grouping}-{type(aggregate).__name__}"
    job = cluster.submit(build(name, items, aggregate, grouping), config)
    assert job.wait(30), job.status()
    assert last_per_key(name) == oracle(items, aggregate)


def test_tag_spreads_the_hot_key_over_several_partial_spus(cluster, config):
    items = [("hot", 1)] * 6000 + [(f"c{i}", 1) for i in range(600)]
    job = cluster.submit(build("spread", items, Count(), "tag", parallelism=3), config.replace(acking=False))
    assert job.wait(30), job.status()
    spus = job.status()["units"]["agg_partial"]["spus"]
    busy = [spu["processed"] for spu in spus.values()]
    assert sum(busy) == len(items) and sum(1 for p in busy if p > 500) >= 2, busy
    assert last_per_key("spread")["hot"] == 6000


@pytest.mark.parametrize("guarantee", ["exactly_once", "at_least_once"])
def test_splitting_and_merging_the_partial_stage_mid_stream_loses_and_double_counts_nothing(cluster, config,
                                                                                             guarantee):
    items = zipf_items(12000, seed=9)
    name = f"split-{guarantee}"
    job = cluster.submit(build(name, items, Sum(), "tag", hold_at=4000, parallelism=2),
                         config.replace(guarantee=guarantee))
    wait_until(lambda: job.status()["units"]["agg_partial"]["processed"] >= 2000, 30, message="first part processed")
    first = job.split("agg_partial", job.spus("agg_partial")[0])
    GATES[name].set()  # the rest flows over three partial SPUs, then two again
    job.split("agg", job.spus("agg")[0])
    job.merge("agg_partial", first.giver)
    assert job.wait(30), job.status()
    assert len(job.spus("agg_partial")) == 2
    assert last_per_key(name) == oracle(items, Sum())


@pytest.mark.parametrize("grouping", ["tag", "partial_key"])
def test_tag_routes_around_a_slow_spu_that_pkg_feeds_its_even_share(cluster, config, grouping):
    items = [(f"k{i % 500}", 1) for i in range(6000)]
    b = TopologyBuilder(f"slow-{grouping}")
    b.set_spout("src", ListSpout, params={"items": items})
    partial = b.set_bolt("agg_partial", SlowFirstPartial, 3, params={"aggregate": "count"}, chain=False)
    getattr(partial, f"{grouping}_grouping")("src")
    b.set_bolt("agg", FinalAggregate, 1, params={"aggregate": "count", "merge": True}).key_grouping("agg_partial")
    job = cluster.submit(b.build(), config.replace(max_spout_pending=300, guarantee="at_least_once"))
    assert job.wait(30), job.status()
    spus = job.status()["units"]["agg_partial"]["spus"]
    slow_share = spus[min(spus)]["processed"] / len(items)
    if grouping == "tag":  # t_i measured from the SPU's busy time: the slow SPU is shunned
        assert slow_share < 0.15, slow_share
    else:  # PKG balances counts: a third each whatever the speed
        assert slow_share > 0.25, slow_share


def test_the_hot_keys_example_counts_exactly_under_tag_and_key_grouping_and_tag_spreads_the_hot_word(cluster, config):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
    import hot_keys

    spread = {}
    for grouping in ("tag", "key"):
        job = cluster.submit(hot_keys.build_topology(total=1500, parallelism=3, grouping=grouping),
                             config.replace(data_dir=config.data_dir / grouping))
        assert job.wait(30), job.status()
        job.stop()
        counts = json.loads((job.data_dir / "wordcount.json").read_text())
        assert counts == hot_keys.oracle(1500)
        first = job.final_status["units"]["count_partial" if grouping == "tag" else "count"]["spus"]
        spread[grouping] = max(s["processed"] for s in first.values()) / sum(s["processed"] for s in first.values())
    assert spread["tag"] < spread["key"], spread
