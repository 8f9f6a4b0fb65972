"""TAG aggregates with the SPUs in real worker processes: the aggregate travels as data, results stay exact."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from pathlib import Path

import pytest

from esault import JobConfig, LocalCluster, TopologyBuilder
from esault.aggregates import TopK
from esault.dsl.aggregation import FinalAggregate
from esault.testing import ListSpout, reset_collected, wait_until

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "integration"))
sys.path.insert(0, str(ROOT / "examples"))
import wordcount  # noqa: E402
from test_tag_grouping import last_per_key, oracle, zipf_items  # noqa: E402
from topology_parts import GATES, DriverCollectorBolt, GatedListSpout, SlowFirstPartial  # noqa: E402

pytestmark = pytest.mark.system


def test_a_tag_grouped_top_k_split_mid_stream_across_two_workers_equals_a_plain_fold(config):
    reset_collected()
    items = zipf_items(8000, seed=21)
    GATES["tag-workers"] = threading.Event()
    b = TopologyBuilder("tag-workers")
    b.set_spout("src", GatedListSpout, params={"items": items, "gate": "tag-workers", "hold_at": 3000})
    b.aggregate("top", TopK(3), parallelism=2).tag_grouping("src")
    b.set_bolt("out", DriverCollectorBolt, params={"name": "tag-workers"}).global_grouping("top")
    with LocalCluster(workers=2) as cluster:
        job = cluster.submit(b.build(), config.replace(guarantee="at_least_once"))
        wait_until(lambda: job.status()["units"]["top_partial"]["processed"] >= 1500, 30, message="first part")
        job.split("top_partial", job.spus("top_partial")[0])
        GATES["tag-workers"].set()
        assert job.wait(60), job.status()
        assert len(job.spus("top_partial")) == 3
        job.stop()
    assert last_per_key("tag-workers") == oracle(items, TopK(3))


@pytest.mark.parametrize("grouping", ["tag", "partial_key"])
def test_the_driver_relays_spu_loads_so_a_spout_in_the_driver_shuns_a_slow_worker_spu(config, grouping):
    items = [(f"k{i % 500}", 1) for i in range(12000)]
    b = TopologyBuilder(f"slow-workers-{grouping}")
    b.set_spout("src", ListSpout, params={"items": items})  # in the driver: every partial SPU is remote
    partial = b.set_bolt("agg_partial", SlowFirstPartial, 3, params={"aggregate": "count"}, chain=False)
    getattr(partial, f"{grouping}_grouping")("src")
    b.set_bolt("agg", FinalAggregate, 1, params={"aggregate": "count", "merge": True}).key_grouping("agg_partial")
    with LocalCluster(workers=2) as cluster:
        job = cluster.submit(b.build(), config.replace(max_spout_pending=300, guarantee="at_least_once"))
        assert job.wait(60), job.status()
        job.stop()
        spus = job.final_status["units"]["agg_partial"]["spus"]
    slow_share = spus[min(spus)]["processed"] / len(items)
    if grouping == "tag":
        assert slow_share < 0.2, slow_share
    else:  # PKG balances counts: a third each whatever the speed
        assert slow_share > 0.25, slow_share


def test_tag_word_counts_stay_exact_through_two_kill9s_of_workers_under_exactly_once(tmp_path):
    """A rollback restores empty partials (they never outlive a batch) and the merged counts of the last
    checkpoint; the spout rewinds: nothing lost, nothing counted twice (the latest counts would exceed)."""
    total = 3000
    b = TopologyBuilder("eo-tag")
    b.set_spout("sentences", wordcount.SentenceSpout, params={"total": total, "seed": 5, "rate": 600})
    b.set_bolt("split", wordcount.SplitBolt, elastic=False).shuffle_grouping("sentences")
    b.aggregate("count", "count", parallelism=2, elastic=False).tag_grouping("split")
    b.set_bolt("latest", wordcount.LatestCountsBolt, elastic=False).global_grouping("count")
    config = JobConfig(data_dir=tmp_path / "data", elasticity=False, checkpoint_interval=0.3, message_timeout=300.0)
    with LocalCluster(workers=2, heartbeat_timeout=1.0) as cluster:
        job = cluster.submit(b.build(), config)
        for kill in (1, 2):
            wait_until(lambda: job.checkpoints.stats.completed >= 2 * kill, 60, message="checkpoints before a kill")
            partial = job.spus("count_partial")[0]
            victim = next(w for w, spus in cluster.registry.spus_on.items() if partial in spus)
            os.kill(cluster.registry.pids[victim], signal.SIGKILL)
            cluster.pool.spawn(f"r{kill}")
            wait_until(lambda: len(job.checkpoints.stats.recoveries) >= kill, 60, message=f"rollback {kill}")
            # joined before the next kill: a job whose every worker died fails, which is not this test's case
            cluster.wait_for_workers(2, 60)
        assert job.wait(120), job.status()
        job.stop()
    counts = json.loads((job.data_dir / "wordcount.json").read_text())
    assert counts == dict(wordcount.oracle(total, seed=5))
