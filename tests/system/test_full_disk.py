"""A full disk under exactly_once: checkpoints that cannot be made durable are a fault with a budget
(tolerable_checkpoint_failures); once it is spent the job stops with exit 2, naming the path, what is
committed and how to resume, never exit 0 with output missing. Resumed with room, the output is exact.

The data dir is a 2 MiB tmpfs (mounted here: the tests run as root). Without mount they fail, saying why.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from esault import JobConfig, LocalCluster
from esault.job.outcome import ExitCode, judge_run
from esault.testing import wait_until

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT / "tests" / "system"))
import eo_parts  # noqa: E402

pytestmark = pytest.mark.system

NAME = "eo-full"
TOTAL = 8000
TOPOLOGY = """
import sys
sys.path[:0] = {paths!r}
import eo_parts
topology = eo_parts.build({name!r}, {total}, rate=1000, sink="pyarrow")
JOB_DEFAULTS = {{"elasticity": False, "checkpoint_interval": 0.3, "message_timeout": 300.0}}
"""


@pytest.fixture
def small_disk(tmp_path):
    """A 2 MiB tmpfs at tmp_path/disk, unmounted afterwards."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(disk)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.fail(f"this test needs a small tmpfs for its data dir and could not mount one (it must run as "
                    f"root, or with CAP_SYS_ADMIN): {mounted.stderr.strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", str(disk)], capture_output=True)
        if subprocess.run(["mountpoint", "-q", str(disk)]).returncode == 0:
            subprocess.run(["umount", "-l", str(disk)], capture_output=True)  # busy: detach it lazily


def run_cli(data: Path, tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    topo = tmp_path / "full_topology.py"
    topo.write_text(TOPOLOGY.format(paths=[str(ROOT), str(ROOT / "examples"), str(ROOT / "tests" / "system")],
                                    name=NAME, total=TOTAL))
    return subprocess.run([sys.executable, "-m", "esault.cli", "run", str(topo), "--data-dir", str(data),
                           "--workers", "2", "--timeout", "180"], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **env})


@pytest.mark.parametrize("min_free", ["1048576", "0"])
def test_a_full_disk_stops_the_job_with_exit_2_naming_the_path_and_a_resume_with_room_ends_exact(
        small_disk, tmp_path, min_free):
    """min_free 1 MiB (the default): checkpoints are not started once the disk is nearly full; 0: they are,
    and their writes fail (SQLite's "database or disk is full", the sink's staging)."""
    data = small_disk / "data"
    run = run_cli(data, tmp_path, ESAULT_CHECKPOINT_MIN_FREE_BYTES=min_free)
    store = data / NAME / "checkpoints.sqlite"
    assert run.returncode == 2, f"exit {run.returncode}: {run.stderr[-3000:]}"
    assert (f"checkpoints in a row failed (tolerable_checkpoint_failures=3)" in run.stderr
            and f"The checkpoint store is {store}" in run.stderr
            and ("committed is everything up to checkpoint" in run.stderr or "nothing is committed" in run.stderr)
            and "run the same command again" in run.stderr), run.stderr[-3000:]
    grown = subprocess.run(["mount", "-o", "remount,size=256m", str(small_disk)], capture_output=True, text=True)
    assert grown.returncode == 0, grown.stderr  # "make room on that disk"
    again = run_cli(data, tmp_path, ESAULT_CHECKPOINT_MIN_FREE_BYTES=min_free)
    assert again.returncode == 0, again.stderr[-3000:]
    expected = eo_parts.oracle(TOTAL)
    assert eo_parts.final_counts(data / NAME) == expected
    assert eo_parts.table_rows(data / NAME / "warehouse", "eo_counts") == eo_parts.exact_rows(expected), \
        "the table has a missing or duplicate row"


def test_too_little_free_space_fails_checkpoints_before_they_start_and_spends_the_budget(small_disk):
    from prometheus_client import REGISTRY

    config = JobConfig(data_dir=small_disk / "data", elasticity=False, checkpoint_interval=0.2,
                       message_timeout=300.0, checkpoint_min_free_bytes=64 << 20, tolerable_checkpoint_failures=2)
    with LocalCluster(workers=1) as cluster:
        job = cluster.submit(eo_parts.build("eo-nospace", 200_000, rate=500), config)
        wait_until(lambda: job.status()["checkpoints"]["failed_in_a_row"] >= 1, 30, message="a failed checkpoint")
        assert REGISTRY.get_sample_value("esault_checkpoint_failures_in_a_row", {"topology": "eo-nospace"}) >= 1
        assert job.wait(60) is False, "the job fails once the budget is spent"
        status = job.status()
        job.stop()
    assert status["checkpoints"]["failed_in_a_row"] == 3 and status["checkpoints"]["completed"] == 0
    assert status["checkpoints"]["last_failure"].startswith(f"a checkpoint was not started: {small_disk / 'data'}")
    assert "free, below checkpoint_min_free_bytes=67108864" in status["checkpoints"]["last_failure"]
    assert status["failures"][0].startswith("3 checkpoints in a row failed (tolerable_checkpoint_failures=2)")
    assert "nothing is committed (no checkpoint completed)" in status["failures"][0]
    outcome = judge_run(job.final_status, False, timeout=None, duration=None, dead_letter_path="-")
    assert outcome.exit_code is ExitCode.NOT_STARTED and outcome.problems[0] == status["failures"][0]
