"""A text file shared by its spout's instances (blocks leased from the driver as each becomes free), under
exactly_once on real worker processes: kill -9 of the worker of an instance held at each step of the lease
protocol, and at random moments; the word counts equal the oracle exactly, and the faster instance reads
more. The pure protocol, with every order of messages and any checkpoint cut: tests/unit/test_shared_ranges.py.
"""

from __future__ import annotations

import os
import random
import signal
import sys
import threading
from pathlib import Path

import pytest

from esault import JobConfig, LocalCluster
from esault.testing import collected, reset_collected, wait_until

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT / "tests" / "system"))
import eo_parts  # noqa: E402
import file_source_parts as parts  # noqa: E402

pytestmark = pytest.mark.system


def config(tmp_path: Path, **changes) -> JobConfig:
    return JobConfig(data_dir=tmp_path / "data", elasticity=False, checkpoint_interval=0.3, message_timeout=300.0,
                     **changes)


@pytest.mark.parametrize("step", parts.STEPS)
def test_a_worker_killed_with_its_instance_at_each_step_of_a_lease_leaves_the_counts_exact(tmp_path, step):
    path = tmp_path / "words.txt"
    expected = parts.write_words(path, 4000)
    gate = str(tmp_path / "gate")
    Path(gate).touch()
    topology = parts.build(f"shared-{step}", path, gate=gate, step=step)
    with LocalCluster(workers=3, heartbeat_timeout=1.0) as cluster:
        job = cluster.submit(topology, config(tmp_path))
        wait_until(lambda: os.path.exists(gate + ".reached"), 60, message=f"instance 0 held at {step!r}")
        wait_until(lambda: job.checkpoints.stats.completed >= 1, 60, message="a checkpoint before the kill")
        os.kill(int(Path(gate + ".reached").read_text()), signal.SIGKILL)
        os.remove(gate)
        cluster.pool.spawn("fresh")
        wait_until(lambda: len(job.checkpoints.stats.recoveries) >= 1, 60, message="the rollback")
        assert job.wait(120), job.status()
        job.stop()
    assert eo_parts.final_counts(job.data_dir) == expected


def test_kill9s_of_random_workers_at_random_moments_leave_a_shared_file_read_exactly_once(tmp_path):
    rnd = random.Random(int.from_bytes(os.urandom(4), "little"))
    path = tmp_path / "words.txt"
    expected = parts.write_words(path, 6000)
    with LocalCluster(workers=3, heartbeat_timeout=1.0) as cluster:
        job = cluster.submit(parts.build("shared-random", path, rate=500.0), config(tmp_path))
        for kill in range(1, 4):
            wait_until(lambda: job.checkpoints.stats.completed >= kill + rnd.randrange(2), 60,
                       message="checkpoints between kills")
            threading.Event().wait(rnd.uniform(0, 0.3))  # the moment itself, not synchronisation
            victim = rnd.choice([w for w, spus in cluster.registry.spus_on.items() if spus])
            os.kill(cluster.registry.pids[victim], signal.SIGKILL)
            cluster.pool.spawn(f"r{kill}")
            wait_until(lambda: len(job.checkpoints.stats.recoveries) >= kill, 60, message=f"rollback {kill}")
            # joined before the next kill: a job whose every worker died fails, which is not this test's case
            cluster.wait_for_workers(3, 60)
        assert job.wait(120), job.status()
        job.stop()
    assert eo_parts.final_counts(job.data_dir) == expected


def test_the_instance_on_the_busier_worker_reads_less_of_a_shared_file(tmp_path):
    """Instance 0 reads at 1/4 of instance 1's pace: with static halves it would read half the file; leasing
    blocks as it becomes free, it reads about a fifth, and the job ends when the faster one is done."""
    path = tmp_path / "words.txt"
    expected = parts.write_words(path, 4000)
    topology = parts.build("shared-uneven", path, rate=2000.0, rate0=500.0)
    with LocalCluster(workers=2) as cluster:
        job = cluster.submit(topology, config(tmp_path))
        assert job.wait(120), job.status()
        job.stop()
    assert eo_parts.final_counts(job.data_dir) == expected
    read = [int((job.data_dir / f"lines-read-{i}.txt").read_text()) for i in (0, 1)]
    assert read[0] < 0.35 * sum(read), read


@pytest.mark.parametrize("step", ["granted", "reading"])
def test_at_least_once_a_spout_lost_with_its_worker_is_replaced_and_its_blocks_are_read_again(tmp_path, step):
    """No checkpoint to roll back to: the replacement's first request names the lost SPU, whose blocks (the
    one it held half read, or the one granted it) go back to the pool. Every line reaches the collector in the
    driver at least once (the lost blocks' lines may come twice). Bolt state on a lost worker is gone under
    at_least_once, so the lines go straight to the driver."""
    path = tmp_path / "words.txt"
    parts.write_words(path, 4000)
    lines = path.read_text().splitlines()
    gate = str(tmp_path / "gate")
    Path(gate).touch()
    name = f"shared-alo-{step}"
    reset_collected()
    with LocalCluster(workers=3, heartbeat_timeout=1.0) as cluster:
        job = cluster.submit(parts.build_collected(name, path, gate=gate, step=step),
                             config(tmp_path, guarantee="at_least_once"))
        wait_until(lambda: os.path.exists(gate + ".reached"), 60, message=f"instance 0 held at {step!r}")
        os.kill(int(Path(gate + ".reached").read_text()), signal.SIGKILL)
        os.remove(gate)
        cluster.pool.spawn("fresh")
        assert job.wait(120), job.status()
        job.stop()
    got = {value for _, value in collected(name)}
    assert got == set(lines), f"lines never read: {sorted(set(lines) - got)[:5]}"


def test_a_shared_file_spout_rescaled_on_a_running_job_reads_every_line_exactly_once(tmp_path):
    """The merge hook makes TextFileSpout rescalable: a checkpoint, a rollback to it with 3 instances that
    restore the union of the ranges read, then 1; the counts are exact."""
    path = tmp_path / "words.txt"
    expected = parts.write_words(path, 5000)
    with LocalCluster(workers=2) as cluster:
        job = cluster.submit(parts.build("shared-rescale", path, rate=400.0), config(tmp_path))
        wait_until(lambda: job.checkpoints.stats.completed >= 2, 60, message="checkpoints before the rescale")
        assert job.rescale("lines", 3, timeout=120).action == "rescale"
        assert len(job.spus("lines")) == 3
        wait_until(lambda: job.checkpoints.stats.completed >= 5, 60, message="checkpoints with 3 instances")
        job.rescale("lines", 1, timeout=120)
        assert job.wait(120), job.status()
        job.stop()
    assert eo_parts.final_counts(job.data_dir) == expected
