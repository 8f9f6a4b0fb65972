"""A static cluster's worker killed with kill -9 and started again under its own name and key (what a restart
policy does) rejoins the running job: the driver retires the old incarnation at once, recovers its SPUs, and
admits the new one, which takes SPUs; the job ends exact.

Its hello used to reach the driver before the killed one was declared dead: the driver refused it ("already
connected"), never answered, and the new worker gave up after its --connect-timeout.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from esault.testing import wait_until

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT / "tests" / "system"))
import eo_parts  # noqa: E402
from cli_processes import start_esault as esault  # noqa: E402

pytestmark = pytest.mark.system

NAME = "rejoin"
TOTAL = 3000
TOPOLOGY = f"""
import eo_parts
topology = eo_parts.build({NAME!r}, {TOTAL}, rate=150, sink="pyarrow")
JOB_DEFAULTS = {{"elasticity": False, "checkpoint_interval": 0.3, "message_timeout": 300.0}}
"""


def test_a_worker_restarted_under_its_own_name_after_kill_9_rejoins_takes_spus_and_the_job_ends_exact(
        tmp_path: Path):
    (tmp_path / "rejoin.py").write_text(TOPOLOGY)
    generated = subprocess.run([sys.executable, "-m", "esault.cli", "keys", "generate", str(tmp_path / "keys"),
                                "--workers", "2"], capture_output=True, text=True, timeout=60)
    assert generated.returncode == 0, generated.stderr
    k = tmp_path / "keys"
    data = tmp_path / "data"
    driver = esault("--log-level", "INFO", "run", "rejoin.py", "--cluster", "static", "--listen", "127.0.0.1:0",
                    "--min-workers", "2", "--api-port", "0", "--data-dir", str(data), "--secret-key",
                    str(k / "driver.key_secret"), "--worker-keys", str(k), "--timeout", "240", cwd=tmp_path, log=tmp_path / "driver.log")

    def found(pattern: str) -> str | None:
        match = re.search(pattern, (tmp_path / "driver.log").read_text())
        return match and match.group(1)

    def worker(name: str, key: str) -> subprocess.Popen:
        return esault("worker", "--driver", address, "--name", name, "--secret-key", str(k / f"{key}.key_secret"),
                      "--driver-key", str(k / "driver.key"), "--connect-timeout", "30", cwd=tmp_path,
                      log=tmp_path / f"{name}.log")

    workers: list[subprocess.Popen] = []
    try:
        address = wait_until(lambda: found(r"listening on (\S+)"), 60, message="the driver's address on stderr")
        url = wait_until(lambda: found(r"control plane: (http://\S+) \(web page\)"), 60,
                         message="the driver's API address on stderr")
        workers += [worker("w1", "worker-1"), worker("w2", "worker-2")]
        from esault.api.client import call

        def spus_in(process: subprocess.Popen) -> list[str]:
            """The count SPUs the job says run on w1 in this very process (by its pid)."""
            try:
                spus = call(url, f"/api/jobs/{NAME}/units")["units"]["count"]["spus"]
            except Exception:  # noqa: BLE001 - the job is not submitted yet
                return []
            return [spu for spu, row in spus.items() if row["worker"] == "w1" and row.get("pid") == process.pid]

        wait_until(lambda: spus_in(workers[0]), 60, message="a count SPU on w1")
        workers[0].send_signal(signal.SIGKILL)
        workers[0].wait(timeout=30)
        workers[0] = worker("w1", "worker-1")  # the same name and key, long before the 10 s heartbeat timeout
        wait_until(lambda: found(r"(came back as a new process)"), 30,
                   message="the driver retiring the killed w1 when the new one says hello")
        wait_until(lambda: spus_in(workers[0]), 60, message="the restarted w1 hosting a count SPU")
        driver.wait(timeout=300)
        out = (tmp_path / "driver.log").read_text()
        assert driver.returncode == 0, out[-5000:]
        assert "1 rollback(s)" in out and "already connected" not in out, out[-5000:]
        expected = eo_parts.oracle(TOTAL)
        assert eo_parts.final_counts(data / NAME) == expected
        assert eo_parts.table_rows(data / NAME / "warehouse", "eo_counts") == eo_parts.exact_rows(expected), \
            "the table has a missing or duplicate row"
        assert workers[0].wait(timeout=60) == 0, "the restarted worker served until the driver's Shutdown"
    finally:
        for process in (driver, *workers):
            if process.poll() is None:
                process.kill()
