"""The Ray head lost under a running job (issue 50): the job fails loudly, before Ray ends its driver.

A real local Ray autoscaling cluster of its own (the kill ends it: it shares no fixture), and the driver as a
user runs it, `esault run topo.py --cluster ray://auto` in a process of its own (without its GCS, Ray's core
worker ends the process it lives in after 60 s: it must not be pytest's). Mid-stream the head's GCS is killed
with SIGKILL. The driver must fail the job within its head timeout (here 10 s, `--ray-head-timeout`), name the head and what to do, and exit 2
before Ray's own 60 s would end it without a word; its completed checkpoints stay for a run that resumes.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from esault.testing import wait_until
from esault.testing.ray_cluster import LOOPBACK_ENV, ray_cluster

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import eo_parts  # noqa: E402
from cli_processes import ENV  # noqa: E402

pytestmark = [pytest.mark.system, pytest.mark.ray, pytest.mark.timeout(300)]

TOPOLOGY = """
import eo_parts
topology = eo_parts.build("ray-head", TOTAL, rate=300, count_parallelism=1)
"""
TOTAL = 15000

HEAD_TIMEOUT = 10.0
"""The driver's --ray-head-timeout here (30 s by default): shorter, so the test spends less time waiting."""
RAY_ENDS_THE_DRIVER = 60.0
"""Ray's gcs_rpc_server_reconnect_timeout_s: after it, Ray's core worker ends the driver's process itself."""


def _gcs_pids(cluster) -> list[int]:
    found = []
    for pid in cluster.pids():
        try:
            argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0", 1)[0]
        except OSError:
            continue
        if argv0.endswith(b"gcs_server"):
            found.append(pid)
    return found


def test_the_ray_heads_loss_fails_the_job_loudly_naming_it_and_the_driver_exits_2_before_ray_ends_it(tmp_path):
    (tmp_path / "topo.py").write_text(TOPOLOGY.replace("TOTAL", str(TOTAL)))
    log_path = tmp_path / "driver.log"
    with ray_cluster(max_nodes=2) as ray_nodes:
        driver = _run(tmp_path, ray_nodes.address, log_path)
        try:
            wait_until(lambda: re.search(r"checkpoint 2 \(\w+\) complete", log_path.read_text())
                       or driver.poll() is not None, 120, interval=0.2,
                       message="two checkpoints of the job on the Ray workers")
            assert driver.poll() is None, log_path.read_text()[-3000:]
            (gcs,) = _gcs_pids(ray_nodes)
            os.kill(gcs, signal.SIGKILL)
            killed = time.monotonic()
            code = driver.wait(RAY_ENDS_THE_DRIVER + 30)
            took = time.monotonic() - killed
        finally:
            if driver.poll() is None:
                os.killpg(driver.pid, signal.SIGKILL)
                driver.wait(30)
    text = log_path.read_text()
    assert code == 2, (code, text[-4000:])
    assert took < RAY_ENDS_THE_DRIVER, f"the driver ended {took:.0f} s after the head's loss: Ray's doing, not ours"
    assert took >= HEAD_TIMEOUT - 2.5, f"the job failed {took:.1f} s after the kill: before its head timeout"
    assert f"head_timeout={HEAD_TIMEOUT:g}s" in text, text[-4000:]
    assert f"the Ray head at {ray_nodes.address} has not answered for" in text, text[-4000:]
    assert "failed (exit code 2)" in text and "resumes from its last completed checkpoint" in text, text[-4000:]
    # What the message says to do: a Ray cluster again, the same command; it resumes and ends exact.
    with ray_cluster(max_nodes=2) as ray_nodes:
        again = _run(tmp_path, ray_nodes.address, tmp_path / "again.log")
        try:
            assert again.wait(240) == 0, (tmp_path / "again.log").read_text()[-4000:]
        finally:
            if again.poll() is None:
                os.killpg(again.pid, signal.SIGKILL)
                again.wait(30)
    assert "resuming from checkpoint" in (tmp_path / "again.log").read_text(), "it resumed, not started afresh"
    assert eo_parts.final_counts(tmp_path / "data" / "ray-head") == eo_parts.oracle(TOTAL)


def _run(tmp_path: Path, ray_address: str, log_path: Path) -> subprocess.Popen:
    """`esault run topo.py --cluster ray://auto` on the Ray cluster at `ray_address`, its output to `log_path`."""
    env = {**ENV, "RAY_ADDRESS": ray_address, LOOPBACK_ENV: "0", "RAY_USAGE_STATS_ENABLED": "0"}
    with log_path.open("w") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "esault.cli", "--log-level", "INFO", "run", str(tmp_path / "topo.py"),
             "--cluster", "ray://auto", "--ray-head-timeout", str(HEAD_TIMEOUT),
             "--data-dir", str(tmp_path / "data"), "--checkpoint-interval", "1"],
            stdout=log, stderr=subprocess.STDOUT, text=True, env=env, cwd=tmp_path, start_new_session=True)
