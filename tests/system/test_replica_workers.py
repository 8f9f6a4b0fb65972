"""Replica workers: processes started from one shared enrollment key, each named and keyed by the driver.

Real `esault worker --enroll-key` processes join a driver that admits only the enrollment key: each gets a
name and a key pair of its own, the job runs on them exactly, a replica killed with SIGKILL is recovered
from and its restarted container (a new process from the same credential) joins under a new name.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

from esault import JobConfig, LocalCluster
from esault.cluster.credentials import ClusterKeys, WorkerKeys
from esault.cluster.enrollment import enroll
from esault.errors import ConfigError
from esault.testing import wait_until
from esault.transport.keys import generate_key_files

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT / "tests" / "system"))
import eo_parts  # noqa: E402
from cli_processes import start_esault  # noqa: E402

pytestmark = pytest.mark.system

TOTAL = 3000


def replica(keys: Path, address: str, tmp_path: Path, log: str):
    return start_esault("worker", "--driver", address, "--enroll-key", str(keys / "enroll.key_secret"),
                        "--driver-key", str(keys / "driver.key"), "--driver-timeout", "20",
                        cwd=tmp_path, log=tmp_path / log)


def test_replicas_sharing_one_enrollment_key_join_under_names_the_driver_gives_and_run_a_job_exactly(tmp_path):
    keys = tmp_path / "keys"
    generate_key_files(keys, workers=0, clients=0, enroll=True)
    cluster_keys = ClusterKeys.from_files(keys / "driver.key_secret", None, enroll_keys=keys / "enroll.key")
    processes = []
    try:
        with LocalCluster(listen="127.0.0.1:0", keys=cluster_keys, heartbeat_timeout=5.0) as cluster:
            processes = [replica(keys, cluster.address, tmp_path, f"replica-{i}.log") for i in range(3)]
            cluster.wait_for_workers(3, 60)
            assert sorted(cluster.registry.workers) == ["replica-1", "replica-2", "replica-3"]
            job = cluster.submit(eo_parts.build("replicas", TOTAL, rate=1500),
                                 JobConfig(data_dir=tmp_path / "data", elasticity=False, checkpoint_interval=1.0))
            wait_until(lambda: job.checkpoints.stats.completed >= 2, 60, message="checkpoints on the replicas")
            victim = next(w for w, spus in cluster.registry.spus_on.items() if spus)
            os.kill(cluster.registry.pids[victim], signal.SIGKILL)  # its container restarts it: a new process
            processes.append(replica(keys, cluster.address, tmp_path, "restarted.log"))
            wait_until(lambda: "replica-4" in cluster.registry.workers, 60, message="the restarted replica joined")
            wait_until(lambda: victim in cluster.registry.lost, 30, message="the killed replica declared dead")
            assert job.wait(180), job.status()
            job.stop()
        assert eo_parts.final_counts(job.data_dir) == eo_parts.oracle(TOTAL)
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
            process.wait(30)


def test_the_enrollment_key_is_no_worker_key_and_the_limit_bounds_what_a_leaked_one_can_mint(tmp_path):
    keys = tmp_path / "keys"
    generate_key_files(keys, workers=0, clients=0, enroll=True)
    cluster_keys = ClusterKeys.from_files(keys / "driver.key_secret", None, enroll_keys=keys / "enroll.key")
    shared = WorkerKeys.from_files(keys / "enroll.key_secret", keys / "driver.key")
    with LocalCluster(listen="127.0.0.1:0", keys=cluster_keys) as cluster:
        cluster._cluster_actor.proxy().enrollments.get().limit = 2
        names = [enroll(cluster.address, shared, timeout=20)[0] for _ in range(2)]
        assert names == ["replica-1", "replica-2"]
        with pytest.raises(ConfigError, match="refused the enrollment: this driver handed out its 2 enrollments"):
            enroll(cluster.address, shared, timeout=20)
        # The shared key itself cannot join as a worker: its hello is refused, nobody joins.
        refused_before = cluster.postman.refused.get("not_permitted", 0)
        from esault.cluster.worker import run_worker  # noqa: F401 - the worker code path the hello comes from
        hello = start_esault("worker", "--driver", cluster.address, "--secret-key", str(keys / "enroll.key_secret"),
                             "--driver-key", str(keys / "driver.key"), "--connect-timeout", "5",
                             cwd=tmp_path, log=tmp_path / "hello.log")
        try:
            wait_until(lambda: cluster.postman.refused.get("not_permitted", 0) > refused_before, 30,
                       message="the enrollment key's hello refused")
            assert cluster.registry.workers == {}
        finally:
            hello.kill()
            hello.wait(30)
