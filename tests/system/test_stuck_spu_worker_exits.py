"""A worker whose SPU does not stop (its thread is stuck in user code) exits with code 4 after --stop-timeout,
its log holding every thread's stack, so the driver replaces its SPUs as for a crash instead of waiting on
it: a thread cannot be killed, and an SPU that never answers would stall every checkpoint of its job.

The count bolt holds its tuple while a gate file exists (eo_parts.hold_while): the worker's SPUs are stuck
in process() when the driver's --duration ends the job and stops them.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from esault.testing import wait_until

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "system"))
from cli_processes import ENV, start_esault as esault  # noqa: E402

pytestmark = pytest.mark.system


def test_a_worker_whose_spu_does_not_stop_exits_with_its_stacks_and_the_driver_goes_on(tmp_path: Path):
    gate = tmp_path / "gate"
    (tmp_path / "stuck.py").write_text(f"""
import eo_parts
topology = eo_parts.build("stuck", 400, rate=200, gate={str(gate)!r})
JOB_DEFAULTS = {{"elasticity": False, "checkpoint_interval": 0.5, "checkpoint_timeout": 3.0}}
""")
    generated = subprocess.run([sys.executable, "-m", "esault.cli", "keys", "generate", str(tmp_path / "keys"),
                                "--workers", "1"], capture_output=True, text=True, timeout=60, env=ENV)
    assert generated.returncode == 0, generated.stderr
    keys = tmp_path / "keys"
    driver_log, worker_log = tmp_path / "driver.log", tmp_path / "worker.log"
    driver = esault("run", "stuck.py", "--cluster", "static", "--listen", "127.0.0.1:0", "--min-workers", "1",
                    "--data-dir", str(tmp_path / "data"), "--secret-key", str(keys / "driver.key_secret"),
                    "--worker-keys", str(keys), "--duration", "4", cwd=tmp_path, log=driver_log)
    worker = None
    try:
        address = wait_until(lambda: (m := re.search(r"listening on (\S+)", driver_log.read_text())) and m.group(1),
                             60, message="the driver's address")
        gate.touch()  # every count SPU holds its first tuple (up to a minute), past the job's end
        worker = esault("worker", "--driver", address, "--name", "w1", "--secret-key",
                        str(keys / "worker-1.key_secret"), "--driver-key", str(keys / "driver.key"),
                        "--stop-timeout", "2", cwd=tmp_path, log=worker_log)
        assert worker.wait(timeout=45) == 4, worker_log.read_text()[-3000:]
        log = worker_log.read_text()
        assert re.search(r"SPU \d+ did not stop within 2 s: its thread is stuck", log), log[-3000:]
        assert "in hold_while" in log, "the stuck thread's stack names the user code it waits in"
        # The driver is not left waiting on it: it hears the worker is gone and ends.
        driver.wait(timeout=120)
        assert re.search(r"worker w1 .*declared dead", driver_log.read_text()), driver_log.read_text()[-3000:]
    finally:
        gate.unlink(missing_ok=True)
        for process in (driver, worker):
            if process is not None and process.poll() is None:
                process.kill()
