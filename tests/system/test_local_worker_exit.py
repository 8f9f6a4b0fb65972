"""A local worker process that ends is declared dead the moment it ends, not after heartbeat_timeout of silence
(cluster/exit_watch.py): forked by the zygote or started as a fresh interpreter. The heartbeat timeout here is
600 s, so only the exit can start the recovery within the tests' waits."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from esault import JobConfig, LocalCluster
from esault.cluster.forker import ForkedProcess
from esault.testing import wait_until

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))  # eo_parts imports wordcount
import eo_parts  # noqa: E402

pytestmark = pytest.mark.system

SILENCE = 600.0
"""heartbeat_timeout: far beyond every wait below."""


def test_a_forked_worker_killed_9_mid_job_is_declared_dead_at_once_and_the_job_ends_exact(tmp_path):
    total = 3000
    topology = eo_parts.build("exit-watch", total, rate=1500, sink="pyarrow", count_parallelism=2)
    config = JobConfig(data_dir=tmp_path / "data", elasticity=False, checkpoint_interval=0.3, message_timeout=300.0)
    with LocalCluster(workers=2, heartbeat_timeout=SILENCE) as cluster:
        assert all(isinstance(p, ForkedProcess) for p in cluster.pool.processes)
        job = cluster.submit(topology, config)
        wait_until(lambda: job.checkpoints.stats.completed >= 2, 60, message="two checkpoints")
        victim = next(w for w, spus in sorted(cluster.registry.spus_on.items()) if spus)
        pid = cluster.registry.pids[victim]
        killed = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: victim in cluster.registry.lost, 30, message=f"{victim} declared dead")
        assert time.monotonic() - killed < 30 < SILENCE
        wait_until(lambda: job.checkpoints.stats.recoveries, 60, message="the rollback")
        assert job.wait(120), job.status()
        job.stop()
    assert eo_parts.final_counts(job.data_dir) == eo_parts.oracle(total)


def test_a_worker_started_as_a_fresh_interpreter_is_declared_dead_when_it_ends_too():
    with LocalCluster(workers=1, heartbeat_timeout=SILENCE) as cluster:
        cluster.pool.forker = None  # as when the zygote is unavailable
        process = cluster.pool.spawn("fresh")
        assert not isinstance(process, ForkedProcess)
        cluster.wait_for_workers(2, 120)
        process.send_signal(signal.SIGKILL)
        wait_until(lambda: cluster.registry.lost == ["fresh"], 30, message="the fresh interpreter declared dead")
        assert sorted(cluster.registry.workers) == ["w1"]


def test_workers_told_to_exit_are_not_declared_dead_as_they_end():
    cluster = LocalCluster(workers=2, heartbeat_timeout=SILENCE)
    registry, processes = cluster.registry, list(cluster.pool.processes)
    cluster.shutdown()
    assert all(p.poll() is not None for p in processes)
    assert registry.lost == [], registry.lost
