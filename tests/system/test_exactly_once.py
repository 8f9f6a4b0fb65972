"""Exactly-once on real worker processes: kill -9 of workers (at random moments, and at each step of a
split and a merge) and of the driver; the counts and the sink's table equal the oracle exactly.

Each test would fail with barrier alignment switched off (a held channel's next-epoch tuples would
enter the snapshot and count twice after a rollback) or with the sink publishing before completion
(rows of a rolled-back epoch would stay in the table): see docs/GUARANTEES.md, "Mutation checks".
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from esault import JobConfig, LocalCluster
from esault.checkpoint.backends import open_checkpoint_store
from esault.errors import ScalingError
from esault.testing import wait_until

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT / "tests" / "system"))
import eo_parts  # noqa: E402
from cpu_load import busy_cores  # noqa: E402

pytestmark = pytest.mark.system


def eo_config(tmp_path: Path, storage: str | None = None, **changes) -> JobConfig:
    return JobConfig(data_dir=tmp_path / "data", elasticity=False, checkpoint_interval=0.3,
                     message_timeout=300.0, checkpoint_storage=storage, **changes)


@pytest.fixture
def storage(request, tmp_path, monkeypatch):
    """Where the test's checkpoints live: None (the SQLite file in the data dir, the default) or, for
    "s3", a real S3-compatible server (moto's) whose credentials the workers inherit. Tests parametrize it
    indirectly: every kill -9 test that runs on both shows the object store keeps today's guarantees.
    EO_STORAGE=s3 runs every test of this file on the object store (docs/TESTING.md)."""
    if os.environ.get("EO_STORAGE", getattr(request, "param", "sqlite")) == "sqlite":
        yield None
        return
    from esault.testing.s3 import S3Server

    with S3Server() as server:
        for name, value in server.env().items():
            monkeypatch.setenv(name, value)
        yield server.url(f"checkpoints-{tmp_path.name}")


def worker_of(cluster: LocalCluster, spu: int) -> str:
    """The worker process hosting SPU `spu`."""
    return next(w for w, spus in cluster.registry.spus_on.items() if spu in spus)


def kill_worker_of(cluster: LocalCluster, spu: int) -> str:
    """kill -9 the worker process hosting SPU `spu`; returns its name."""
    worker = worker_of(cluster, spu)
    os.kill(cluster.registry.pids[worker], signal.SIGKILL)
    return worker


def completed_checkpoints(job) -> int:
    return job.checkpoints.stats.completed


def assert_exact(job, total: int, table: str | None = None, spouts: int = 1) -> None:
    expected = eo_parts.oracle(total, spouts)
    assert eo_parts.final_counts(job.data_dir) == expected
    if table is not None:
        rows = eo_parts.table_rows(job.data_dir / "warehouse", table)
        assert rows == eo_parts.exact_rows(expected), "the table has a missing or duplicate row"


@pytest.mark.parametrize("slice_keys,busy,storage", [
    (1024, False, "sqlite"), (1, False, "sqlite"), (1024, False, "s3"),
    pytest.param(1024, True, "sqlite", marks=pytest.mark.busy), pytest.param(1024, True, "s3", marks=pytest.mark.busy)],
    ids=["default-slices", "snapshots-in-slices-of-one", "object-store", "default-slices-busy-cores",
         "object-store-busy-cores"], indirect=["storage"])
def test_five_kill9s_of_random_workers_at_random_moments_leave_counts_and_table_exact(tmp_path, slice_keys, busy,
                                                                                      storage):
    """slice_keys=1: every keyed snapshot is encoded in slices over ~40% of the interval after its barrier
    (datapath/pending_snapshot.py), so kills land while snapshots are pending too. busy: every core is kept
    busy by CPU hogs meanwhile (a load above the core count, as on a loaded host)."""
    rnd = random.Random(int.from_bytes(os.urandom(4), "little"))
    total = 5000
    topology = eo_parts.build("eo-kill5", total, rate=600, sink="pyarrow", count_parallelism=3, spouts=2)
    with (busy_cores(600) if busy else contextlib.nullcontext()), \
            LocalCluster(workers=3, heartbeat_timeout=2.0 if busy else 1.0) as cluster:
        job = cluster.submit(topology, eo_config(tmp_path, storage, snapshot_slice_keys=slice_keys))
        for kill in range(1, 6):
            # a random moment: after a random number of checkpoints, then a random extra delay
            wait_until(lambda: completed_checkpoints(job) >= kill + rnd.randrange(2), 60,
                       message="checkpoints between kills")
            threading.Event().wait(rnd.uniform(0, 0.3))  # the moment itself, not synchronisation
            victim = rnd.choice([w for w, spus in cluster.registry.spus_on.items() if spus])
            os.kill(cluster.registry.pids[victim], signal.SIGKILL)
            cluster.pool.spawn(f"r{kill}")  # a fresh worker keeps the cluster at three
            wait_until(lambda: len(job.checkpoints.stats.recoveries) >= kill, 60, message=f"rollback {kill}")
            # ...once it has joined: on a loaded machine its imports alone can outlast the next two kills,
            # and a job whose every worker died fails (as it must), which is not what this test is about
            cluster.wait_for_workers(3, 60)
        assert job.wait(120), job.status()
        job.stop()
        assert_exact(job, total, "eo_counts", spouts=2)
        recoveries = job.checkpoints.stats.recoveries
        assert len(recoveries) == 5 and all(r.restored_epoch is not None for r in recoveries[1:])


STEPS = {
    # step: which gate holds the operation there
    "prepare": "the giver is held mid-tuple, so PrepareGive waits",
    "switch": "the spout is held, so its route switch and EpochMarker wait (giver and receiver are prepared)",
    "handoff": "the receiver is held installing the first key of the giver's state (routes switched, the "
               "state sent, not all installed): the hand-off cannot finish. A split's (or move's) receiver is "
               "new, so its gate file holds every SPU installing state",
}


def three_way_assignment(workload: dict[int, list[tuple[int, int]]], giver: int, other: int) -> dict[int, list]:
    """One atomic assign_workload with three moves: the upper half of `giver`'s range to a new SPU (-1), the
    last quarter of `other`'s to `giver` (so it gives and receives at once)."""
    (a, b), (c, d) = workload[giver][0], workload[other][0]
    assert b + 1 == c, "giver's range comes first"
    mid, cut = a + (b - a + 1) // 2, c + 3 * (d - c + 1) // 4
    return {giver: [(a, mid - 1), (cut, d)], -1: [(mid, b)], other: [(c, cut - 1)]}


OPERATION_STEPS = [(action, step) for action in ("split", "merge", "assign", "move", "logic")
                   for step in ("prepare", "switch", "handoff")]
OBJECT_STORE_STEPS = {("split", "handoff", "giver"), ("merge", "switch", "receiver")}
"""On the object store too (CI time: the rest with EO_STORAGE=s3): a split's giver killed mid-hand-off, a merge's
receiver once routes switched."""


@pytest.mark.parametrize(("action", "step", "victim", "storage"), [
    (action, step, victim, storage) for action, step in OPERATION_STEPS for victim in ("giver", "receiver")
    for storage in ("sqlite", "s3") if storage == "sqlite" or (action, step, victim) in OBJECT_STORE_STEPS],
    indirect=["storage"])
def test_a_worker_killed_at_each_step_of_a_split_or_merge_aborts_it_cleanly_and_the_result_is_exact(
        tmp_path, action, step, victim, storage):
    """A gate file holds the operation at `step` (STEPS); then the giver's or the receiver's worker dies.
    The operation fails with ScalingError, the job rolls back, the unit splits again afterwards, and the
    counts are exact. "assign" is an assign_workload of three moves (three_way_assignment); its giver is the
    first SPU, its receiver the new one; it is held like a split. "move" is an assign_resource of the first
    SPU to a worker that does not host it (the new SPU there is the receiver). "logic" is an assign_logic to
    GatedCountBoltV2: every SPU gives, each new one receives."""
    total = 2500
    gate = tmp_path / "gate-{spu}"
    spout_gate = tmp_path / "spout-gate"
    handoff_gate = tmp_path / "handoff-{spu}"
    # Few sentences in flight: a held SPU's backlog stays small, so control messages to its worker (the
    # receiver's StartSpu, when it is placed there) are not stuck behind data on the shared connection.
    topology = eo_parts.build(f"eo-{action}-{step}-{victim}", total, rate=1500, gate=str(gate),
                              spout_gate=str(spout_gate), count_parallelism=2, max_pending=300,
                              handoff_gate=str(handoff_gate))
    with LocalCluster(workers=3, heartbeat_timeout=1.0) as cluster:
        job = cluster.submit(topology, eo_config(tmp_path, storage))
        wait_until(lambda: completed_checkpoints(job) >= 2, 60, message="two checkpoints")
        giver, other = job.spus("count")
        before = set().union(*cluster.registry.spus_on.values())
        gates = []
        if step == "prepare":
            gates.append(Path(str(gate).format(spu=giver)))
        elif step == "switch":
            gates.append(spout_gate)
        elif step == "handoff":
            gates.append(Path(str(handoff_gate).format(spu=other if action == "merge" else "all")))
        for g in gates:
            g.touch()
        if action == "assign":
            pending = job.assign_workload_async("count", three_way_assignment(job.workload("count"), giver, other))
        elif action == "logic":
            pending = job.assign_logic_async("count", eo_parts.GatedCountBoltV2,
                                             {"gate": str(gate), "handoff_gate": str(handoff_gate)})
        elif action == "move":
            elsewhere = next(w for w, spus in sorted(cluster.registry.spus_on.items()) if giver not in spus)
            pending = job.assign_resource_async("count", giver, elsewhere)
        elif action == "split":
            pending = job.split_async("count", giver)
        else:
            pending = job.merge_async("count", giver, other)
        receiver = other
        if action in ("split", "assign", "move", "logic"):
            receiver = next(iter(wait_until(lambda: set().union(*cluster.registry.spus_on.values()) - before, 30,
                                            message="the receiver launched")))
        if step == "prepare":  # the unit runs it, held at its first step: a death before that would fail the
            # command itself (its SPU is gone after the rollback), not abort the operation
            wait_until(lambda: job.reconfiguring("count"), 30, message="the unit running the operation")
        if step == "handoff":
            wait_until(lambda: Path(str(gates[0]) + ".reached").exists(), 30,
                       message="the receiver installing the giver's state")
        if step in ("switch", "handoff"):
            switched = (lambda: receiver in job.spus("count")) if action in ("split", "assign", "move", "logic") else \
                (lambda: giver not in job.spus("count"))
            wait_until(switched, 30, message="routes switched to the new layout")
        kill_worker_of(cluster, giver if victim == "giver" else receiver)
        cluster.pool.spawn("r1")
        with pytest.raises(ScalingError, match="aborted"):
            pending.result(60)
        for g in gates:
            g.unlink()
        wait_until(lambda: job.checkpoints.stats.recoveries, 60, message="the rollback")
        again = job.split("count", job.spus("count")[0])  # scalable again
        assert again.action == "split"
        assert job.wait(120), job.status()
        job.stop()
        assert_exact(job, total)


@pytest.mark.parametrize(("action", "victim"), [("split", "receiver"), ("split", "giver"), ("merge", "receiver")])
def test_a_worker_killed_after_a_move_while_moved_keys_wait_as_bytes_leaves_the_result_exact(tmp_path, action,
                                                                                               victim, storage):
    """A count with Bolt's own state methods keeps moved-in keys as their encoded states until their first
    tuple, a tick or a checkpoint (PeManager.arrived; a worker's ticks make 256 a tick). After each move and
    the next checkpoint the receiver's (or the giver's) worker dies: the rollback restores that checkpoint,
    which must hold every moved key the giver changed since its own last one. Three moves per run, every
    count exact. (A merge's giver has stopped by then: its worker may host nothing left to kill. That a
    checkpoint makes the PEs of keys still waiting as bytes is tests/unit/test_pe_manager.py's.)"""
    total = 12000  # 8 s of input: every move lands mid-stream
    topology = eo_parts.build(f"eo-lazy-{action}-{victim}", total, rate=1500, count_parallelism=2,
                              max_pending=300, plain_count=True)
    with LocalCluster(workers=3, heartbeat_timeout=1.0) as cluster:
        job = cluster.submit(topology, eo_config(tmp_path, storage))
        for round_ in range(1, 4):
            wait_until(lambda: completed_checkpoints(job) >= 2 * round_, 60, message="checkpoints before the move")
            spus = job.spus("count")
            if action == "split":
                result = job.split("count", spus[0])
                giver, receiver = spus[0], result.started[0]
            else:
                result = job.merge("count", spus[0], spus[1])
                giver, receiver = spus[0], spus[1]
            assert result.moved_keys > 0
            after_move = completed_checkpoints(job)
            wait_until(lambda: completed_checkpoints(job) > after_move, 60, message="a checkpoint after the move")
            kill_worker_of(cluster, receiver if victim == "receiver" else giver)
            cluster.pool.spawn(f"r{round_}")
            wait_until(lambda: len(job.checkpoints.stats.recoveries) >= round_, 60, message=f"rollback {round_}")
            cluster.wait_for_workers(3, 60)  # the fresh one joined before the next kill
            if action == "merge" and len(job.spus("count")) < 2:
                job.split("count", job.spus("count")[0])  # two SPUs again, to merge again
        assert job.wait(120), job.status()
        job.stop()
        assert_exact(job, total)


@pytest.mark.parametrize("step", ["prepare", "commit"])
def test_a_worker_killed_during_an_atomic_group_fails_the_whole_group_and_the_result_is_exact(tmp_path, step,
                                                                                             storage):
    """A group: the splitter rescaled to 2 SPUs and the counter given a three-way assignment, atomically.
    "prepare": the counter's giver is held before it prepares (the splitter already holds); "commit": every
    member prepared, the counter (downstream, first to commit) is held installing state while the splitter
    waits. Then the giver's worker dies: the group fails, the held member is called off, the job rolls back
    (at "commit" the counter had switched, so it keeps its new layout, as the error says), both units
    reconfigure again afterwards, and the counts are exact."""
    from esault.control import AssignWorkload, Rescale

    total = 2500
    gate, handoff_gate = tmp_path / "gate-{spu}", tmp_path / "handoff-{spu}"
    topology = eo_parts.build(f"eo-group-{step}", total, rate=1500, gate=str(gate), count_parallelism=2,
                              max_pending=300, handoff_gate=str(handoff_gate), split_unit=True)
    with LocalCluster(workers=3, heartbeat_timeout=1.0) as cluster:
        job = cluster.submit(topology, eo_config(tmp_path, storage))
        wait_until(lambda: completed_checkpoints(job) >= 2, 60, message="two checkpoints")
        giver, other = job.spus("count")
        held = Path(str(gate).format(spu=giver)) if step == "prepare" else Path(str(handoff_gate).format(spu="all"))
        held.touch()
        before = set().union(*cluster.registry.spus_on.values())
        pending = job.apply_async([Rescale("split", 2),
                                   AssignWorkload("count", three_way_assignment(job.workload("count"), giver, other))])
        if step == "prepare":
            wait_until(lambda: len(set().union(*cluster.registry.spus_on.values()) - before) == 2, 30,
                       message="the splitter's and the counter's new SPUs started: the counter is preparing")
            assert len(job.spus("split")) == 1, "the splitter holds"
        else:
            wait_until(lambda: Path(str(held) + ".reached").exists(), 30, message="the counter installing state")
            assert len(job.spus("split")) == 1, "the splitter waits for the counter to finish"
        kill_worker_of(cluster, giver)
        cluster.pool.spawn("r1")
        expected = (r"atomic group of 2 operations refused: assign_workload of 'count'.*nothing changed"
                    if step == "prepare" else
                    r"assign_workload of 'count' had switched its routes: its unit keeps its new layout\. "
                    r"Called off: rescale of 'split'")
        with pytest.raises(ScalingError, match=expected):
            pending.result(90)
        held.unlink()
        wait_until(lambda: job.checkpoints.stats.recoveries, 60, message="the rollback")
        assert len(job.spus("split")) == 1, "the splitter's part was called off"
        assert len(job.spus("count")) == (2 if step == "prepare" else 3)
        again = job.apply([Rescale("split", 2), Rescale("count", 4)])  # both free again
        assert [len(r.started) for r in again] == [1, 2 if step == "prepare" else 1]
        assert job.wait(120), job.status()
        job.stop()
        assert_exact(job, total)


@pytest.mark.parametrize("storage", ["sqlite", "s3"], indirect=True)
def test_stop_and_restart_on_the_same_data_dir_resumes_without_duplicates(tmp_path, storage):
    total = 4000
    topology = eo_parts.build("eo-restart", total, rate=1500, sink="pyarrow")
    with LocalCluster(workers=2) as cluster:
        job = cluster.submit(topology, eo_config(tmp_path, storage))
        wait_until(lambda: completed_checkpoints(job) >= 2, 60, message="two checkpoints")
        job.stop()  # what Ctrl-C does: a final checkpoint ends the spouts at its barrier
        assert not eo_parts.final_counts(job.data_dir) == eo_parts.oracle(total), "stopped mid-run"
    with LocalCluster(workers=2) as cluster:
        job = cluster.submit(topology, eo_config(tmp_path, storage))
        assert job.restored_from is not None and job.restored_from.kind == "final"
        assert job.wait(120), job.status()
        job.stop()
        assert_exact(job, total, "eo_counts")


DRIVER = """
import sys
sys.path[:0] = {paths!r}
import eo_parts
from esault import JobConfig, LocalCluster
with LocalCluster(workers=2, heartbeat_timeout=2.0) as cluster:
    job = cluster.submit(eo_parts.build("eo-driver", {total}, rate=1000, sink="pyarrow"),
                         JobConfig(data_dir={data!r}, elasticity=False, checkpoint_interval=0.3,
                                   checkpoint_storage={storage!r}))
    print(" ".join(str(p.pid) for p in cluster.pool.processes), flush=True)
    job.wait()
    job.stop()
"""


@pytest.mark.parametrize("storage", ["sqlite", "s3"], indirect=True)
def test_a_driver_killed_mid_run_is_restarted_and_resumes_exactly(tmp_path, storage):
    total = 4000
    data = tmp_path / "data"
    script = DRIVER.format(paths=[str(ROOT), str(ROOT / "examples"), str(ROOT / "tests" / "system")],
                           total=total, data=str(data), storage=storage)
    eo_parts.kill_driver_after_checkpoints(script, data / "eo-driver" / "checkpoints.sqlite", storage=storage)
    topology = eo_parts.build("eo-driver", total, rate=1000, sink="pyarrow")
    with LocalCluster(workers=2) as cluster:
        job = cluster.submit(topology, JobConfig(data_dir=data, elasticity=False, checkpoint_interval=0.3,
                                                 checkpoint_storage=storage))
        assert job.restored_from is not None and job.restored_from.kind == "checkpoint"
        assert job.wait(120), job.status()
        job.stop()
        assert_exact(job, total, "eo_counts")


def test_a_key_idle_longer_than_pe_idle_timeout_keeps_its_state_across_a_checkpoint_and_a_rollback(tmp_path, storage):
    from esault import TopologyBuilder

    items = [("a", 1), ("b", 1)] * 3
    builder = TopologyBuilder("eo-idle")
    builder.set_spout("src", eo_parts.HoldingListSpout, params={"items": items, "gate": str(tmp_path / "go")})
    builder.set_bolt("count", eo_parts.GatedCountBolt, 2, pe_idle_timeout=0.3, elastic=False).key_grouping("src")
    builder.set_bolt("latest", eo_parts.LatestBolt, elastic=False).global_grouping("count")
    with LocalCluster(workers=2, heartbeat_timeout=1.0) as cluster:
        job = cluster.submit(builder.build(), eo_config(tmp_path, storage))
        wait_until(lambda: job.status()["units"]["count"]["processed"] == 2, 30, message="first tuples")
        wait_until(lambda: job.status()["units"]["count"]["pes"] == 0, 30, message="both PEs expired")
        first = completed_checkpoints(job)
        wait_until(lambda: completed_checkpoints(job) >= first + 2, 30, message="checkpoints with parked keys")
        kill_worker_of(cluster, job.spus("count")[0])
        cluster.pool.spawn("r1")
        wait_until(lambda: job.checkpoints.stats.recoveries, 30, message="the rollback")
        (tmp_path / "go").touch()
        assert job.wait(60), job.status()
        job.stop()
        assert eo_parts.final_counts(job.data_dir) == {"a": 3, "b": 3}


def test_a_savepoint_taken_with_the_cli_restarts_the_job_with_another_parallelism_exactly(tmp_path, storage):
    total = 4000
    with LocalCluster(workers=2, listen="127.0.0.1:0") as cluster:
        job = cluster.submit(eo_parts.build("eo-save", total, rate=1500, count_parallelism=2), eo_config(tmp_path, storage))
        wait_until(lambda: completed_checkpoints(job) >= 2, 60, message="two checkpoints")
        cli = subprocess.run([sys.executable, "-m", "esault.cli", "savepoint", cluster.address, "eo-save", "--stop"],
                             capture_output=True, text=True, timeout=120)
        assert cli.returncode == 0, cli.stderr
        epoch = int(cli.stdout.split()[1])
        assert job.wait(60), "the spouts ended at the savepoint"
        job.stop()
        assert open_checkpoint_store(job.ctx).get(epoch).kind == "savepoint"
    job = eo_parts.run_restored(eo_parts.build("eo-save", total, rate=1500, count_parallelism=3),
                                eo_config(tmp_path, storage), epoch, "count", 3)
    assert_exact(job, total)


def test_a_savepoint_request_for_an_unknown_job_gets_a_clear_error(tmp_path):
    with LocalCluster(workers=1, listen="127.0.0.1:0") as cluster:
        cli = subprocess.run([sys.executable, "-m", "esault.cli", "savepoint", cluster.address, "nope"],
                             capture_output=True, text=True, timeout=60)
        assert cli.returncode == 1 and "no running job 'nope'" in cli.stderr


def test_a_worker_killed_while_the_job_stops_rolls_back_completes_and_keeps_the_other_workers(tmp_path, storage):
    """The final checkpoint is in flight when a worker dies: it is aborted, the job rolls back, completes
    again and only then stops; the survivors keep hearing the driver (they used to exit)."""
    total = 2000
    topology = eo_parts.build("eo-stopkill", total, rate=4000, sink="pyarrow", count_parallelism=2)
    with LocalCluster(workers=3, heartbeat_timeout=1.0) as cluster:
        job = cluster.submit(topology, eo_config(tmp_path, storage))
        assert job.wait(120), job.status()
        victim = kill_worker_of(cluster, job.spus("count")[0])
        job.stop()
        assert job.checkpoints.stats.recoveries, "the death was noticed during the stop"
        assert_exact(job, total, "eo_counts")
        survivors = [w for w in ("w1", "w2", "w3") if w != victim]
        assert all(cluster.pool.processes[int(w[1:]) - 1].poll() is None for w in survivors)


def complete_after_a_mid_stream_checkpoint(cluster: LocalCluster, name: str, total: int, tmp_path: Path):
    """A job run to completion with one checkpoint taken mid-stream (and no periodic ones): a rollback
    restores that checkpoint, so the spout must replay."""
    topology = eo_parts.build(name, total, rate=400, count_parallelism=2)
    config = JobConfig(data_dir=tmp_path / "data", elasticity=False, checkpoint_interval=3600.0,
                       message_timeout=300.0)
    job = cluster.submit(topology, config)
    wait_until(lambda: job.status()["units"]["count"]["processed"] > 0, 30, message="first words counted")
    restored = job.checkpoint(30)
    assert restored is not None and job.checkpoints.store.get(restored).positions["sentences"][0] < total
    assert job.wait(60), job.status()
    return job


def test_a_stop_queued_behind_a_checkpoint_a_dead_worker_holds_lets_the_rolled_back_job_complete_first(tmp_path):
    """A checkpoint waits for the acks of a worker that was just killed; stop() queues its final checkpoint
    behind it. The death aborts that checkpoint and the rollback (urgent) runs before the queued final one:
    the spouts resume mid-stream, so the final checkpoint must wait for the job to complete again (it used
    to end the spouts at once, and the counts were those of the restored checkpoint)."""
    total = 400
    # The worker is first stopped (SIGSTOP: silent, not dead; heartbeat_timeout outlasts the test), so the
    # checkpoint starts and waits for its acks and stop() queues behind it; only then is it killed, and a
    # local worker's death is seen at once.
    with LocalCluster(workers=2, heartbeat_timeout=120.0) as cluster:
        job = complete_after_a_mid_stream_checkpoint(cluster, "eo-stopqueued", total, tmp_path)
        pid = cluster.registry.pids[worker_of(cluster, job.spus("count")[0])]
        os.kill(pid, signal.SIGSTOP)
        try:
            held = threading.Thread(target=job.checkpoint, daemon=True)  # waits for the stopped worker's acks
            held.start()
            wait_until(lambda: job.checkpoints.collector.epoch is not None, 30, message="a checkpoint in flight")
            stopping = threading.Thread(target=job.stop, daemon=True)
            stopping.start()
            wait_until(lambda: job.coordinator.queued(), 30, message="stop()'s final checkpoint queued")
        finally:
            os.kill(pid, signal.SIGKILL)
        stopping.join(120)
        assert not stopping.is_alive(), "stop() returned"
        held.join(30)
        assert job.checkpoints.stats.recoveries, "the death was noticed during the stop"
        assert_exact(job, total)


def test_a_checkpoint_started_after_a_worker_was_declared_dead_is_aborted_not_raised(tmp_path, storage):
    """The control thread lists the SPUs, a worker's death is declared, then the checkpoint's first messages
    go out: the send to the dead worker's SPU fails (its connection is gone). The checkpoint fails as aborted
    (the death's rollback follows) instead of raising the transport's LookupError out of checkpoint(), which
    failed a spout rescale that checkpoints on its own (test_kafka_spout_rescale, step "relaunched")."""
    total = 1500
    topology = eo_parts.build("eo-deadsend", total, rate=1500, count_parallelism=2)
    with LocalCluster(workers=2, heartbeat_timeout=120.0) as cluster:
        job = cluster.submit(topology, eo_config(tmp_path, storage))
        wait_until(lambda: completed_checkpoints(job) >= 1, 60, message="a first checkpoint")
        entered, gate = threading.Event(), threading.Event()

        def held_checkpoint():
            entered.set()
            assert gate.wait(60)
            return job.checkpoints.checkpoint()

        taken = job.coordinator.run_task(held_checkpoint)  # the control thread: the rollback queues behind it
        assert entered.wait(30)
        failed = job.checkpoints.stats.failed
        victim = kill_worker_of(cluster, job.spus("count")[0])
        wait_until(lambda: victim not in cluster.registry.workers, 30, message="the worker declared dead")
        gate.set()
        assert taken.result(60) is None, "the checkpoint did not complete"
        assert job.checkpoints.stats.failed == failed + 1
        wait_until(lambda: job.checkpoints.stats.recoveries, 60, message="the death's rollback")
        assert job.wait(120), job.status()
        job.stop()
        assert_exact(job, total)


def test_a_stop_after_a_worker_died_once_the_job_was_complete_lets_it_complete_again(tmp_path):
    """The job completed, then a worker died and the job rolled back to a mid-stream checkpoint before
    stop() was called: stop() lets it complete again before the final checkpoint (it used to end the
    spouts at once, mid-replay, as for a job stopped while running)."""
    total = 400
    with LocalCluster(workers=2, heartbeat_timeout=1.0) as cluster:
        job = complete_after_a_mid_stream_checkpoint(cluster, "eo-stopafter", total, tmp_path)
        kill_worker_of(cluster, job.spus("count")[0])
        wait_until(lambda: job.checkpoints.stats.recoveries, 30, message="the rollback")
        job.stop()
        assert_exact(job, total)
