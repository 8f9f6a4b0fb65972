"""Word count end to end on real actors: results equal a plain Counter."""

from __future__ import annotations

import collections
import json
import sys
from pathlib import Path

import pytest

from esault import TopologyBuilder
from esault.testing import CollectorBolt, collected

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import wordcount  # noqa: E402


def final_counts(pairs):
    latest: dict = {}
    for word, count in pairs:
        latest[word] = max(latest.get(word, 0), count)
    return latest


@pytest.mark.parametrize("acking", [True, False])
def test_wordcount_equals_a_plain_counter_over_the_same_sentences(cluster, config, acking):
    topology = wordcount.build_topology(total=3000, seed=7, count_parallelism=3, sink=None)
    job = cluster.submit(topology, config.replace(acking=acking))
    assert job.wait(60), job.status()
    job.stop()
    counts = json.loads((job.data_dir / "wordcount.json").read_text())
    assert counts == dict(wordcount.oracle(3000, seed=7))
    status = job.final_status
    assert status["units"]["count"]["processed"] == sum(counts.values())
    if acking:
        assert status["units"]["sentences"]["acked"] == 3000
        assert status["pending_trees"] == 0


def test_running_counts_reach_the_collector_in_order_per_word(cluster, config):
    builder = TopologyBuilder("wc-collect")
    sentences = wordcount.make_sentences(500, seed=3)
    builder.set_spout("s", wordcount.SentenceSpout, params={"total": 500, "seed": 3})
    builder.set_bolt("split", wordcount.SplitBolt, 2).shuffle_grouping("s")
    builder.set_bolt("count", wordcount.CountBolt, 2).key_grouping("split")
    builder.set_bolt("out", CollectorBolt).global_grouping("count")
    job = cluster.submit(builder.build(), config)
    assert job.wait(60)
    per_word = collections.defaultdict(list)
    for word, count in collected("out"):
        per_word[word].append(count)
    oracle = collections.Counter(w for s in sentences for w in s.split())
    assert {w: seq[-1] for w, seq in per_word.items()} == dict(oracle)
    assert all(seq == list(range(1, len(seq) + 1)) for seq in per_word.values())


def test_a_job_raises_the_gc_threshold_while_it_runs_and_restores_it(cluster, config):
    import gc

    before = gc.get_threshold()
    job = cluster.submit(wordcount.build_topology(total=10, sink=None), config.replace(gc_gen0_threshold=12345))
    assert gc.get_threshold()[0] == 12345
    assert job.wait(30)
    job.stop()
    assert gc.get_threshold() == before
