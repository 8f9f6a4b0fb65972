"""The cluster commands as real processes: a driver with --listen, a separate worker, status."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from esault.testing import wait_until

pytestmark = pytest.mark.system

TOPOLOGY = """
from esault import Bolt, TopologyBuilder
from esault.testing import ListSpout

class Paced(ListSpout):
    '''Emits one tuple per next_tuple call, at most `rate` per second, so the job runs a while.'''
    def __init__(self, items, rate):
        super().__init__(items, per_call=1)
        import time
        self.rate, self.t0, self.clock = rate, None, time.monotonic
    def limit(self):
        now = self.clock()
        self.t0 = self.t0 or now
        return min(len(self.items), int((now - self.t0) * self.rate) + 1)

class Upper(Bolt):
    def process(self, tup):
        self.emit(tup.key, tup.value.upper())

b = TopologyBuilder('paced')
b.set_spout('src', Paced, params={'items': [[i, 'x'] for i in range(1000)], 'rate': 100.0})
b.set_bolt('up', Upper, 2, elastic=False).shuffle_grouping('src')
topology = b.build()
"""


def esault(*args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "esault.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ}, **kw)


def test_a_static_cluster_runs_with_a_separate_worker_and_answers_status(tmp_path: Path):
    (tmp_path / "paced.py").write_text(TOPOLOGY)
    driver = esault("run", "paced.py", "--cluster", "static", "--listen", "127.0.0.1:0", "--min-workers", "1",
                    "--data-dir", str(tmp_path / "data"), cwd=tmp_path)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(driver.stderr), daemon=True)
    reader.start()
    worker = None
    try:
        found = wait_until(lambda: next((m for line in lines if (m := re.search(r"listening on (\S+)", line))), None),
                           60, message="the driver's address on stderr")
        address = found.group(1)
        worker = esault("worker", "--driver", address, "--name", "wx", cwd=tmp_path)

        def status() -> str:
            result = subprocess.run([sys.executable, "-m", "esault.cli", "status", address],
                                    capture_output=True, text=True, timeout=60)
            return result.stdout if result.returncode == 0 and "job 'paced'" in result.stdout else ""

        report = wait_until(status, 60, message="esault status showing the running job")
        assert "1 worker(s): wx" in report
        assert re.search(r"up +2 SPU\(s\), processed \d+ \(\d+/s\)", report)
        out, _ = driver.communicate(timeout=120)
        assert driver.returncode == 0, "".join(lines)
        assert "src          1 SPU(s), emitted 1000, acked 1000, failed 0" in out
        assert "up           2 SPU(s), processed 1000" in out
        assert worker.wait(timeout=60) == 0, "the worker exits when the driver shuts down"
    finally:
        for process in (driver, worker):
            if process is not None and process.poll() is None:
                process.kill()


def test_status_of_an_address_with_no_driver_says_so():
    result = subprocess.run([sys.executable, "-m", "esault.cli", "status", "127.0.0.1:1"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "no esault driver answered at 127.0.0.1:1" in result.stderr or "could not reach" in result.stderr
