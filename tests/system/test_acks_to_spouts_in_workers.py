"""Spout SPUs in worker processes track their own trees: acks go from the SPU that processed a batch to the
spout SPU that rooted it, through the driver only until each worker has learned where that spout SPU is
(FindOwner -> OwnerAt). kill -9 of a worker at each step of that exchange loses nothing."""

from __future__ import annotations

import collections
import sys
from pathlib import Path

import pytest

from esault import JobConfig, LocalCluster, TopologyBuilder
from esault.testing import collected, reset_collected, wait_until

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests" / "integration"))
import esault_wordcount  # noqa: E402
import wordcount_input  # noqa: E402
from topology_parts import DriverCollectorBolt, SlowIncrementBolt  # noqa: E402

pytestmark = pytest.mark.system


def relayed(job) -> int:
    """Acks the driver's ack server relayed (a worker did not know the spout SPU yet)."""
    return job.ctx.acker.proxy().relayed.get(timeout=10)


def test_once_learned_no_ack_passes_through_the_driver_and_every_count_is_exact(tmp_path):
    path = wordcount_input.make_input(tmp_path / "words.txt", words=120_000, vocabulary=2_000)
    lines = sum(1 for _ in path.open())
    topology = esault_wordcount.build_timed(str(path), rate_lines=lines / 4)  # about 4 s of input
    with LocalCluster(workers=2) as cluster:
        job = cluster.submit(topology, JobConfig(data_dir=tmp_path / "data", elasticity=False))
        spout_workers = {job.worker_of(spu) for spu in job.spus("lines")}
        count_workers = {job.worker_of(spu) for spu in job.spus("count")}
        assert spout_workers == count_workers == {"w1", "w2"}, "each worker acks the other's spout SPU"
        wait_until(lambda: job.status()["units"]["count"]["processed"] >= 30_000, 60,
                   message="a quarter of the words counted")
        warmed = relayed(job)
        assert job.wait(120), job.status()
        assert relayed(job) == warmed, "acks still went through the driver after the workers learned the owners"
        assert warmed > 0, "a worker's first ack for the other worker's spout SPU is relayed"
        assert job.status()["pending_trees"] == 0
        job.stop()
    assert esault_wordcount.final_counts(tmp_path / "data") == dict(wordcount_input.oracle(path))


def every_spout_emitted(job) -> bool:
    """Each spout SPU of `lines` emitted at least once (a row has no counts before its SPU's first report)."""
    return all(spu.get("emitted") for spu in job.status()["units"]["lines"]["spus"].values())


def build_forwarding(path: str, rate_lines: float, name: str):
    """Lines read in the workers -> split (chained) -> per word (word, 1) after 1 ms of work -> a collector in
    the driver. The input comes faster than the count SPUs' 2,000 words/s, so trees are always in flight."""
    builder = TopologyBuilder(name)
    builder.set_spout("lines", esault_wordcount.TimedLines, 2,  # 4 KiB blocks: both instances read the small file
                      params={"path": path, "rate": rate_lines / 2, "block_bytes": 4096}, max_pending=1_000,
                      placement="worker")
    builder.set_bolt("split", esault_wordcount.SplitTimed, 2, elastic=False).shuffle_grouping("lines")
    builder.set_bolt("count", SlowIncrementBolt, 2, params={"seconds": 0.001}, elastic=False).key_grouping("split")
    builder.set_bolt("out", DriverCollectorBolt, params={"name": name}).global_grouping("count")
    return builder.build()


@pytest.mark.parametrize("step", ["while learning", "acks direct"])
def test_at_least_once_kill9_of_a_worker_holding_a_spout_loses_no_word_and_ends_long_before_the_timeout(
        tmp_path, step):
    """message_timeout is 300 s: the job ends in time only because the trees in flight fail at once
    (FailPending reaches every spout SPU, the survivor's too) and the replacement spout SPU reads the dead
    one's blocks again."""
    path = wordcount_input.make_input(tmp_path / "words.txt", words=12_000, vocabulary=300)
    lines = sum(1 for _ in path.open())
    name = f"acks-kill-{step.split()[0]}"
    reset_collected(name)
    with LocalCluster(workers=2, heartbeat_timeout=1.0) as cluster:
        job = cluster.submit(build_forwarding(str(path), lines / 4, name),
                             JobConfig(data_dir=tmp_path / "data", guarantee="at_least_once", message_timeout=300.0,
                                       elasticity=False))
        assert {job.worker_of(spu) for spu in job.spus("lines")} == {"w1", "w2"}, "a spout SPU survives the kill"
        assert {job.worker_of(spu) for spu in job.spus("count")} == {"w1", "w2"}, "and acks into the dead worker"
        victim = job.worker_of(job.spus("lines")[0])
        if step == "acks direct":
            wait_until(lambda: len(collected(name)) >= 3_000, 60, message="a quarter of the words counted")
            assert relayed(job) >= 1
        else:  # trees in flight from both spout SPUs at the kill (a loaded host may not have started them yet)
            wait_until(lambda: every_spout_emitted(job), 60, interval=0.02, message="both spout SPUs emitting")
        cluster.pool.processes[int(victim[1:]) - 1].kill()
        wait_until(lambda: [r for r in job.scaling_history if r.action == "replace"], 30,
                   message="the dead worker's SPUs replaced")
        assert job.wait(120), job.status()
        counts = collections.Counter(word for word, _ in collected(name))
        oracle = wordcount_input.oracle(path)
        assert all(counts[w] >= n for w, n in oracle.items()), "a word lost a count"
        assert job.status()["units"]["lines"]["failed"] >= 1, "trees in flight at the kill failed and replayed"
        assert every_spout_emitted(job), "both spouts read"
        job.stop()


@pytest.mark.parametrize("step", ["while learning", "acks direct"])
def test_exactly_once_kill9_of_a_worker_holding_a_spout_keeps_every_count_exact(tmp_path, step):
    path = wordcount_input.make_input(tmp_path / "words.txt", words=120_000, vocabulary=2_000)
    lines = sum(1 for _ in path.open())
    topology = esault_wordcount.build_timed(str(path), rate_lines=lines / 5)
    with LocalCluster(workers=2, heartbeat_timeout=1.0) as cluster:
        job = cluster.submit(topology, JobConfig(data_dir=tmp_path / "data", elasticity=False,
                                                 checkpoint_interval=0.5))
        victim = job.worker_of(job.spus("lines")[0])
        if step == "acks direct":
            wait_until(lambda: job.checkpoints.stats.completed >= 2, 60, message="two checkpoints")
        cluster.pool.processes[int(victim[1:]) - 1].kill()
        wait_until(lambda: job.checkpoints.stats.recoveries, 60, message="the rollback after the kill")
        assert job.wait(120), job.status()
        # The spout SPUs the rollback replaced said so as they stopped (OwnerGone, over the wire from the
        # survivor): the ack server sends FailPending and relayed acks to the live ones only.
        wait_until(lambda: set(job.ctx.acker.proxy().owners.get(timeout=10)) == set(job.spus("lines")), 30,
                   message="the ack server knowing only the live spout SPUs")
        job.stop()
    assert esault_wordcount.final_counts(tmp_path / "data") == dict(wordcount_input.oracle(path))
