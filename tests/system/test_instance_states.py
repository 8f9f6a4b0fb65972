"""Exactly-once for a bolt that is not key grouped and keeps a state, across its splits, merges and rescales.

Each instance's state is one checkpoint slot, named by its instance number. Before this was fixed, every
SPU a split or rescale started was instance 0: two SPUs wrote one slot, and a rollback gave both the same
state (the tally came out high after a split, low after a rescale). A rollback to a checkpoint taken before
a merge also lost the retired instance's state, which had no SPU to come back to. Now a new SPU takes a free
instance number, every checkpoint records which instances it holds, and a rollback or a restart brings back
exactly those, each from its own slot.

Workers are real processes, killed with SIGKILL; the tally is checked against the exact number of words.
"""

from __future__ import annotations

import os
import signal
import sys
from concurrent import futures
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from esault import JobConfig, LocalCluster
from esault.checkpoint.store import CheckpointStore
from esault.errors import ConfigError, ScalingError
from esault.testing import wait_until

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT / "tests" / "system"))
import eo_parts  # noqa: E402
from process_pause import paused  # noqa: E402

pytestmark = pytest.mark.system

TOTAL = 3000  # sentences: 30,000 words


def config(tmp_path: Path, **changes) -> JobConfig:
    """Checkpoints only when the test takes them, so it knows which one a rollback restores."""
    return JobConfig(data_dir=tmp_path / "data", elasticity=False, checkpoint_interval=3600.0,
                     message_timeout=300.0, **changes)


def processed_by(job, spu: int) -> int:
    return sum(s.processed for s in job.spu_counters() if s.unit == "tally" and s.spu == spu)


def emitted_by(job, spu: int) -> int:
    return sum(s.emitted for s in job.spu_counters() if s.unit == "tally" and s.spu == spu)


def kill_worker_of(cluster: LocalCluster, spu: int) -> None:
    worker = next(w for w, spus in cluster.registry.spus_on.items() if spu in spus)
    os.kill(cluster.registry.pids[worker], signal.SIGKILL)


def kill_and_roll_back(cluster: LocalCluster, job, spu: int, restore_to: int) -> None:
    """kill -9 the worker of `spu`, give the pool a fresh one, and wait for the job's rollback to `restore_to`."""
    kill_worker_of(cluster, spu)
    cluster.pool.spawn("fresh")
    wait_until(lambda: len(job.checkpoints.stats.recoveries) >= 1, 60, message="the rollback")
    assert job.checkpoints.stats.recoveries[0].restored_epoch == restore_to


def reconfigure(job, change: str) -> None:
    first, second = job.spus("tally")
    if change == "split":
        job.split("tally", first)
    elif change == "merge":
        job.merge("tally", second)
    elif change == "rescale up":
        job.rescale("tally", 3)
    else:
        job.rescale("tally", 1)


@pytest.mark.parametrize("change, checkpoint_after", [
    ("split", False), ("merge", False), ("rescale down", False), ("rescale up", True),
])
def test_a_kill9_after_a_reconfiguration_of_a_stateful_non_keyed_bolt_restores_each_instance_state_once(
        tmp_path, change, checkpoint_after):
    """The rollback goes to the checkpoint before the change (its instances come back, each with its own
    state) or after it (the SPUs it started hold states of their own, never a copy of instance 0's)."""
    with LocalCluster(workers=3) as cluster:
        job = cluster.submit(eo_parts.build_tally("tally-eo", TOTAL, rate=600), config(tmp_path))
        wait_until(lambda: all(processed_by(job, s) > 0 for s in job.spus("tally")), 60,
                   message="both tally SPUs counting")
        restore_to = job.checkpoint(timeout=60)
        reconfigure(job, change)
        after = job.spus("tally")
        newest = max(after)
        seen = processed_by(job, newest)
        wait_until(lambda: processed_by(job, newest) > seen, 60, message="the newest tally SPU counting")
        if checkpoint_after:
            restore_to = job.checkpoint(timeout=60)
        instances = CheckpointStore(job.ctx.checkpoint_path).get(restore_to).instances["tally"]
        assert len(instances) == len(set(instances)) == (len(after) if checkpoint_after else 2)
        kill_and_roll_back(cluster, job, newest, restore_to)
        assert len(job.spus("tally")) == len(instances), "the checkpoint's instances came back, no more"
        assert job.wait(120), job.status()
        job.stop()
    assert eo_parts.tally_total(job.data_dir) == eo_parts.words_in(TOTAL)


@pytest.mark.parametrize("change", ["merge", "rescale down"])
def test_a_non_keyed_bolt_retires_an_instance_only_once_every_downstream_spu_has_what_it_closed_with(
        tmp_path, change):
    """The retired instance's close() hands its tally on (as thousands of 1s) from its worker to the sum's; its
    own state is in no later checkpoint, so a checkpoint after the operation must find all of that ahead of
    its barrier. With the sum's worker stopped (SIGSTOP) the operation must not end; once it runs again it
    does, and a checkpoint taken then, rolled back to by a kill -9, gives the exact total."""
    with LocalCluster(workers=3, heartbeat_timeout=60.0) as cluster:
        job = cluster.submit(eo_parts.build_tally("tally-retire", TOTAL, rate=3000, ones=True), config(tmp_path))
        wait_until(lambda: all(processed_by(job, s) > 3000 for s in job.spus("tally")), 60,
                   message="both tally SPUs counting thousands")
        first, second = job.spus("tally")
        (summer,) = job.spus("sum")
        host = {s: w for w, spus in cluster.registry.spus_on.items() for s in spus}
        assert host[summer] != host[second], f"the sum and the retiring tally share a worker: {host}"
        with ThreadPoolExecutor(1) as pool:
            with paused(cluster.registry.pids[host[summer]]):
                operation = pool.submit(reconfigure, job, change)  # retires `second`
                wait_until(lambda: job.spus("tally") == [first], 30, message="the routes switched")
                finished, _ = futures.wait([operation], timeout=3.0)
                assert not finished, "the operation ended before the sum's SPU had what the retired one closed with"
            operation.result(timeout=60)
        restore_to = job.checkpoint(timeout=60)
        assert CheckpointStore(job.ctx.checkpoint_path).get(restore_to).instances["tally"] == [0]
        kill_and_roll_back(cluster, job, first, restore_to)
        assert job.wait(120), job.status()
        job.stop()
    assert eo_parts.tally_total(job.data_dir) == eo_parts.words_in(TOTAL)


@pytest.mark.parametrize("victim", ["retiring", "downstream"])
def test_a_kill9_while_a_retiring_non_keyed_instance_waits_for_its_downstream_rolls_back_exactly(tmp_path, victim):
    """The retiring tally SPU has closed and waits for the sum's SPU (its worker stopped) to answer its marker;
    either worker is killed -9 then. The operation fails, the job rolls back to the checkpoint before it,
    and the total is exact: what the retiring one closed with is neither lost nor counted twice."""
    with LocalCluster(workers=3, heartbeat_timeout=60.0) as cluster:
        job = cluster.submit(eo_parts.build_tally("tally-retire-kill", TOTAL, rate=3000, ones=True),
                             config(tmp_path))
        wait_until(lambda: all(processed_by(job, s) > 3000 for s in job.spus("tally")), 60,
                   message="both tally SPUs counting thousands")
        restore_to = job.checkpoint(timeout=60)
        first, second = job.spus("tally")
        (summer,) = job.spus("sum")
        host = {s: w for w, spus in cluster.registry.spus_on.items() for s in spus}
        assert host[summer] != host[second], f"the sum and the retiring tally share a worker: {host}"
        with ThreadPoolExecutor(1) as pool, paused(cluster.registry.pids[host[summer]]):
            operation = pool.submit(job.rescale, "tally", 1)  # retires `second`
            wait_until(lambda: job.spus("tally") == [first], 30, message="the routes switched")
            wait_until(lambda: emitted_by(job, second) > 0, 30,  # a tally emits only in close()
                       message="the retiring tally SPU closed")
            os.kill(cluster.registry.pids[host[second] if victim == "retiring" else host[summer]], signal.SIGKILL)
            with pytest.raises(ScalingError, match="aborted"):
                operation.result(timeout=60)
        cluster.pool.spawn("fresh")
        wait_until(lambda: len(job.checkpoints.stats.recoveries) >= 1, 60, message="the rollback")
        assert job.checkpoints.stats.recoveries[0].restored_epoch == restore_to
        assert job.wait(120), job.status()
        job.stop()
    assert eo_parts.tally_total(job.data_dir) == eo_parts.words_in(TOTAL)


def test_a_savepoint_holding_more_instance_states_than_the_parallelism_restarts_them_all(tmp_path):
    """Three tally instances in the savepoint, a restart asking for 2: a non-keyed state can be neither split
    nor merged, so all three come back (and a warning says why) rather than one being dropped."""
    with LocalCluster(workers=2) as cluster:
        job = cluster.submit(eo_parts.build_tally("tally-save", TOTAL, rate=1500), config(tmp_path))
        wait_until(lambda: all(processed_by(job, s) > 0 for s in job.spus("tally")), 60,
                   message="both tally SPUs counting")
        job.rescale("tally", 3)
        newest = max(job.spus("tally"))
        wait_until(lambda: processed_by(job, newest) > 0, 60, message="the new tally SPU counting")
        epoch = job.savepoint(stop=True, timeout=60)
        assert job.wait(60), "the spouts ended at the savepoint"
        job.stop()
        assert sorted(CheckpointStore(job.ctx.checkpoint_path).get(epoch).instances["tally"]) == [0, 1, 2]
    job = eo_parts.run_restored(eo_parts.build_tally("tally-save", TOTAL, rate=1500, tally_parallelism=2),
                                config(tmp_path), epoch, "tally", 3)
    assert eo_parts.tally_total(job.data_dir) == eo_parts.words_in(TOTAL)


def test_a_spout_whose_chained_bolt_keeps_states_refuses_to_lose_one_on_a_rescale_down_or_a_restart(tmp_path):
    """A bolt chained into a spout keeps one state per spout instance. After a live rescale 2 -> 3, going
    back to 2 would strand instance 2's state: refused with the way out (chain=False), and the job ends
    exactly; so is a restart from a savepoint of the 3 instances with the declared 2."""
    shards, per_shard = 4, 5000
    with LocalCluster(workers=2) as cluster:
        job = cluster.submit(eo_parts.build_sharded_tally("sharded", 2, per_shard), config(tmp_path))
        job.rescale("shards", 3)
        newest = max(job.spus("shards"))
        wait_until(lambda: sum(s.emitted for s in job.spu_counters() if s.spu == newest) > 100, 60,
                   message="the third spout instance reading")
        with pytest.raises(ScalingError, match=r"bolt 'tally' instance 2.*chain=False.*nothing changed"):
            job.rescale("shards", 2)
        epoch = job.savepoint(timeout=60)
        assert job.wait(120), job.status()
        assert len(job.spus("shards")) == 3
        job.stop()
    assert eo_parts.tally_total(job.data_dir) == shards * per_shard
    with LocalCluster(workers=1) as cluster:
        with pytest.raises(ConfigError, match=r"spout 'shards' on 2 instance\(s\) would lose what checkpoint "
                                              rf"{epoch} holds for bolt 'tally' instance 2"):
            cluster.submit(eo_parts.build_sharded_tally("sharded", 2, per_shard), config(tmp_path, restore_from=epoch))


@pytest.mark.parametrize("changes", [("merge",), ("merge", "checkpoint", "split")])
def test_a_stateful_bolt_behind_a_key_grouped_unit_stays_exact_when_that_unit_merges_or_splits_before_a_kill9(
        tmp_path, changes):
    """Fused into count's SPUs, tally's state of a merged SPU was lost by the rollback (27,243 of 30,000), and
    after a merge, a checkpoint and a split the new SPU read the retired one's older state (32,752)."""
    with LocalCluster(workers=3) as cluster:
        job = cluster.submit(eo_parts.build_keyed_tally("keyed-tally", TOTAL, rate=600), config(tmp_path))
        assert job.topology.unit("count").stages == ()
        wait_until(lambda: all(processed_by(job, s) > 0 for s in job.spus("tally")), 60,
                   message="both tally SPUs counting")
        restore_to = job.checkpoint(timeout=60)
        for change in changes:
            if change == "merge":
                job.merge("count", max(job.spus("count")))
            elif change == "split":
                job.split("count", job.spus("count")[0])
            else:
                restore_to = job.checkpoint(timeout=60)
        newest = max(job.spus("count"))
        counted = sum(s.processed for s in job.spu_counters() if s.unit == "count" and s.spu == newest)
        wait_until(lambda: sum(s.processed for s in job.spu_counters()
                               if s.unit == "count" and s.spu == newest) > counted, 60, message="count going on")
        kill_and_roll_back(cluster, job, newest, restore_to)
        assert job.wait(120), job.status()
        job.stop()
    assert eo_parts.tally_total(job.data_dir) == eo_parts.words_in(TOTAL)


def test_a_restart_from_a_checkpoint_with_fewer_instances_than_the_parallelism_starts_the_others_empty(tmp_path):
    """Instance 1 checkpointed its tally, then a rescale to 1 retired it (its close() handed the tally on) and a
    savepoint followed. Restarted with the declared 2, instance 1 must start empty: its slot still holds its
    older row, which counted again would make the total high."""
    with LocalCluster(workers=2) as cluster:
        job = cluster.submit(eo_parts.build_tally("tally-fewer", TOTAL, rate=1500), config(tmp_path))
        wait_until(lambda: all(processed_by(job, s) > 0 for s in job.spus("tally")), 60,
                   message="both tally SPUs counting")
        job.checkpoint(timeout=60)
        job.rescale("tally", 1)
        epoch = job.savepoint(stop=True, timeout=60)
        assert job.wait(60), "the spouts ended at the savepoint"
        job.stop()
        assert CheckpointStore(job.ctx.checkpoint_path).get(epoch).instances["tally"] == [0]
    job = eo_parts.run_restored(eo_parts.build_tally("tally-fewer", TOTAL, rate=1500), config(tmp_path), epoch,
                                "tally", 2)
    assert eo_parts.tally_total(job.data_dir) == eo_parts.words_in(TOTAL)


@pytest.mark.parametrize("change", ["merge", "rescale down"])
def test_a_non_keyed_instance_retires_when_the_downstream_spu_shares_its_worker(tmp_path, change):
    """The retiring SPU names itself by address in its marker (it may start before its worker's postman
    registered it); a downstream SPU on the same worker gets that marker without a trip through the wire, so
    it must still reach the retiring SPU with its answer (it once logged "'Address' object has no attribute
    'tell'" and the operation timed out after 60 s)."""
    with LocalCluster(workers=1) as cluster:
        job = cluster.submit(eo_parts.build_tally("tally-one-worker", TOTAL, rate=3000, ones=True), config(tmp_path))
        wait_until(lambda: all(processed_by(job, s) > 1000 for s in job.spus("tally")), 60,
                   message="both tally SPUs counting")
        with ThreadPoolExecutor(1) as pool:
            operation = pool.submit(reconfigure, job, change)
            finished, _ = futures.wait([operation], timeout=20.0)
            assert finished, "the retirement did not end: the downstream SPU's answer never reached the retiring one"
            operation.result()
        assert job.wait(120), job.status()
        job.stop()
    assert eo_parts.tally_total(job.data_dir) == eo_parts.words_in(TOTAL)
