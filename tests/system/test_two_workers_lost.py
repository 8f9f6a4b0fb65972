"""Two workers lost within one heartbeat timeout, under exactly_once: the second kill -9 lands at each step
of the recovery the first one started (its SPUs told to stop, the new SPUs restoring, the replay), and the
job recovers within the heartbeat timeout plus the restore, the counts and the sink's table exact.

The recovery used to wait out the stop confirmation of an SPU whose worker had died meanwhile ("worker w2
did not confirm stopping SPU 3 within 60.0s"), and a relaunch whose worker died left that SPU's place
empty for good.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from esault import JobConfig, LocalCluster
from esault.testing import wait_until

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT / "tests" / "system"))
import eo_parts  # noqa: E402

pytestmark = pytest.mark.system

HEARTBEAT_TIMEOUT = 2.0
RESTORE_BOUND = 20.0
"""Seconds a rollback may take beyond the heartbeat timeout here (restores run in well under that); the
stall it guards against is the 60 s stop timeout."""


def worker_hosting(cluster: LocalCluster, spu: int) -> str:
    return next(w for w, spus in cluster.registry.spus_on.items() if spu in spus)


def kill(cluster: LocalCluster, worker: str) -> None:
    os.kill(cluster.registry.pids[worker], signal.SIGKILL)


@pytest.mark.parametrize("step", ["stopping", "restoring", "replaying"])
def test_a_second_worker_killed_at_each_step_of_a_recovery_is_recovered_within_the_heartbeat_timeout_exactly(
        tmp_path, step):
    total = 3000
    gate, restore_gate = tmp_path / "gate-{spu}", tmp_path / "restore-{spu}"
    topology = eo_parts.build(f"eo-two-{step}", total, rate=800, sink="pyarrow", count_parallelism=3,
                              gate=str(gate), handoff_gate=str(restore_gate))
    config = JobConfig(data_dir=tmp_path / "data", elasticity=False, checkpoint_interval=0.3, message_timeout=300.0)
    with LocalCluster(workers=3, heartbeat_timeout=HEARTBEAT_TIMEOUT) as cluster:
        job = cluster.submit(topology, config)
        wait_until(lambda: job.checkpoints.stats.completed >= 2, 60, message="two checkpoints")
        counts = job.spus("count")
        first = max(cluster.registry.spus_on, key=lambda w: len(cluster.registry.spus_on[w] & set(counts)))
        held = next(s for s in counts if worker_hosting(cluster, s) != first)
        second = worker_hosting(cluster, held)
        gates: list[Path] = []
        if step == "stopping":  # the other worker's count SPU holds mid-tuple: it cannot confirm its stop
            gates.append(Path(str(gate).format(spu=held)))
        elif step == "restoring":  # every relaunched SPU holds while it restores its keys
            gates.append(Path(str(restore_gate).format(spu="all")))
        for g in gates:
            g.touch()
        placed_before = set().union(*cluster.registry.spus_on.values())
        kill(cluster, first)
        cluster.pool.spawn("r1")
        if step == "stopping":
            wait_until(lambda: cluster.registry._stopped and held not in cluster.registry.spus_on[second], 30,
                       message="the recovery waiting for the held SPU to stop")
        elif step == "restoring":
            reached = Path(str(gates[0]) + ".reached")
            wait_until(reached.exists, 30, message="a relaunched SPU restoring")
            newest = max(set().union(*cluster.registry.spus_on.values()) - placed_before)
            second = worker_hosting(cluster, newest)  # the worker of the SPU that holds in its restore
        else:
            wait_until(lambda: job.checkpoints.stats.recoveries, HEARTBEAT_TIMEOUT + RESTORE_BOUND,
                       message="the first recovery")
            second = next(w for w, spus in cluster.registry.spus_on.items()
                          if w != "r1" and spus & set(job.spus("count")))  # a worker of the relaunched SPUs
        killed_at = time.monotonic()
        kill(cluster, second)
        cluster.pool.spawn("r2")
        for g in gates:
            g.unlink()
        recoveries = 2 if step == "replaying" else 1
        wait_until(lambda: len(job.checkpoints.stats.recoveries) >= recoveries
                   and not job.recovering, HEARTBEAT_TIMEOUT + RESTORE_BOUND,
                   message=f"recovered from the second kill within {HEARTBEAT_TIMEOUT} s + {RESTORE_BOUND} s")
        took = time.monotonic() - killed_at
        assert job.wait(120), job.status()
        job.stop()
    expected = eo_parts.oracle(total)
    assert eo_parts.final_counts(job.data_dir) == expected
    rows = eo_parts.table_rows(job.data_dir / "warehouse", "eo_counts")
    assert rows == eo_parts.exact_rows(expected), "the table has a missing or duplicate row"
    assert took < HEARTBEAT_TIMEOUT + RESTORE_BOUND
