"""SPUs in real `esault worker` processes linked by pyzmq: exact results, live reconfiguration."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

import pytest

from esault import LocalCluster, TopologyBuilder
from esault.testing import collected, reset_collected, wait_until

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT / "tests" / "integration"))
import wordcount  # noqa: E402
from test_elasticity import load_step_splits_then_merges  # noqa: E402
from test_split_merge import assert_exact, sequenced_items  # noqa: E402
from topology_parts import (  # noqa: E402
    GATES, DriverCollectorBolt, GatedListSpout, SequenceCheckBolt,
)

pytestmark = pytest.mark.system


@pytest.fixture(scope="module")
def workers():
    """Two worker processes shared by this module's tests."""
    with LocalCluster(workers=2) as cluster:
        yield cluster


@pytest.fixture(autouse=True)
def _fresh(workers):
    reset_collected()
    yield
    for job in list(workers.jobs.values()):
        job.stop()


def test_wordcount_across_two_worker_processes_equals_the_counter(workers, config):
    job = workers.submit(wordcount.build_topology(total=3000, seed=11, count_parallelism=3, sink=None), config)
    assert job.wait(60), job.status()
    assert all(workers.registry.spus_on[w] for w in workers.registry.workers), "both workers host SPUs"
    job.stop()
    counts = json.loads((job.data_dir / "wordcount.json").read_text())
    assert counts == dict(wordcount.oracle(3000, seed=11))


def test_splits_and_merges_across_processes_keep_every_key_exact(workers, config):
    keys, per_key = 200, 30
    items = sequenced_items(keys, per_key, seed=21)
    GATES["mp"] = threading.Event()
    builder = TopologyBuilder("mp")
    builder.set_spout("src", GatedListSpout, params={"items": items, "gate": "mp", "hold_at": len(items) // 3})
    builder.set_bolt("check", SequenceCheckBolt, 2, pe_idle_timeout=None).key_grouping("src")
    builder.set_bolt("out", DriverCollectorBolt, params={"name": "mp"}).global_grouping("check")
    job = workers.submit(builder.build(), config)
    wait_until(lambda: len(collected("mp")) >= len(items) // 4, 30, message="a quarter collected")
    first = job.split("check", job.spus("check")[0])
    job.merge("check", first.giver)
    GATES["mp"].set()
    second = job.split("check", job.spus("check")[-1])
    job.merge("check", second.receiver)
    assert job.wait(60), job.status()
    assert_exact("mp", keys, per_key)
    check_spus = set(job.spus("check"))
    assert check_spus <= set().union(*workers.registry.spus_on.values()), "check's SPUs live in workers"


def test_a_load_step_splits_a_bolt_across_processes_and_the_lull_merges_it(workers, config):
    job = load_step_splits_then_merges(workers, config, "mp-elastic", DriverCollectorBolt)
    assert set(job.spus("check")) <= set().union(*workers.registry.spus_on.values()), "SPUs live in workers"


def test_killing_a_worker_mid_run_still_counts_every_word_at_least_once(tmp_path, config):
    import collections
    import random

    from topology_parts import SlowIncrementBolt

    rnd = random.Random(41)
    words = [f"w{rnd.randrange(60)}" for _ in range(1500)]
    items = [(w, i) for i, w in enumerate(words)]
    GATES["kill"] = threading.Event()
    builder = TopologyBuilder("kill")
    builder.set_spout("src", GatedListSpout, params={"items": items, "gate": "kill", "hold_at": 300},
                      max_pending=200)
    builder.set_bolt("count", SlowIncrementBolt, 2, params={"seconds": 0.001}, elastic=False).key_grouping("src")
    builder.set_bolt("out", DriverCollectorBolt, params={"name": "kill"}).global_grouping("count")
    with LocalCluster(workers=2, heartbeat_timeout=1.0) as cluster:
        job = cluster.submit(builder.build(), config.replace(message_timeout=2.0, data_dir=tmp_path))
        wait_until(lambda: len(collected("kill")) >= 200, 30, message="the first tuples counted")
        GATES["kill"].set()
        wait_until(lambda: job.status()["units"]["src"]["inflight"] >= 50, 30, message="tuples in flight")
        victim = max(cluster.registry.workers, key=lambda w: len(cluster.registry.spus_on[w]))
        lost = set(cluster.registry.spus_on[victim])
        cluster.pool.processes[int(victim[1:]) - 1].kill()
        replaced = wait_until(lambda: [r for r in job.scaling_history if r.action == "replace"], 30,
                              message="the dead worker's SPUs replaced")
        assert {r.giver for r in replaced} <= lost and replaced[0].reason == "worker lost"
        assert job.wait(90), job.status()
        counts = collections.Counter(word for word, _ in collected("kill"))
        oracle = collections.Counter(words)
        assert all(counts[w] >= n for w, n in oracle.items()), "a word lost a count"
        duplicates = sum(counts.values()) - sum(oracle.values())
        src = job.status()["units"]["src"]
        assert src["acked"] == len(items) and src["replayed"] >= 1
        print(f"\n[worker kill] {src['replayed']} tuples replayed, {duplicates} duplicate counts")
        assert list(cluster.registry.workers) == [w for w in ("w1", "w2") if w != victim]


def test_a_bolt_chained_into_a_worker_hosted_bolt_follows_its_splits_and_merges(workers, config):
    from topology_parts import RaiseOnBadBolt

    keys, per_key = 120, 20
    items = sequenced_items(keys, per_key, seed=5)
    GATES["mp-chain"] = threading.Event()
    builder = TopologyBuilder("mp-chain")
    builder.set_spout("src", GatedListSpout, params={"items": items, "gate": "mp-chain", "hold_at": len(items) // 3})
    builder.set_bolt("check", SequenceCheckBolt, 2, pe_idle_timeout=None).key_grouping("src")
    builder.set_bolt("relay", RaiseOnBadBolt, 2).shuffle_grouping("check")  # fused into check's SPUs
    builder.set_bolt("out", DriverCollectorBolt, params={"name": "mp-chain"}).global_grouping("relay")
    topology = builder.build()
    assert topology.host_of("relay") == "check"
    job = workers.submit(topology, config)
    wait_until(lambda: len(collected("mp-chain")) >= len(items) // 4, 30, message="a quarter collected")
    split = job.split("check", job.spus("check")[0])
    GATES["mp-chain"].set()
    job.merge("check", split.receiver)
    assert job.wait(60), job.status()
    assert_exact("mp-chain", keys, per_key)
    check_spus = set(job.spus("check"))
    job.stop()  # the final status waits for the workers' last counts
    relay = job.final_status["units"]["relay"]
    assert relay["chained_into"] == "check" and relay["processed"] == len(items) == relay["emitted"]
    assert set(relay["spus"]) == check_spus


def test_spouts_placed_in_workers_read_their_partitions_and_the_job_completes_exactly(workers, config, tmp_path):
    sys.path.insert(0, str(ROOT / "bench"))
    import esault_wordcount
    import wordcount_input

    path = wordcount_input.make_input(tmp_path / "words.txt", words=60_000, vocabulary=3_000)
    topology = esault_wordcount.build(str(path), count_spus=2, spout_placement="worker")
    assert topology.unit("lines").where == "worker" and topology.host_of("split") == "lines"
    job = workers.submit(topology, config.replace(data_dir=tmp_path / "data"))
    assert job.wait(60), job.status()
    spout_spus = set(job.spus("lines"))
    hosted = set().union(*workers.registry.spus_on.values())
    assert spout_spus <= hosted, "the spout SPUs ran in the workers"
    job.stop()
    assert esault_wordcount.final_counts(tmp_path / "data") == dict(wordcount_input.oracle(path))
    lines = job.final_status["units"]["lines"]
    assert lines["acked"] == 6_000 and len(lines["spus"]) == 2
