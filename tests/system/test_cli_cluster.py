"""The cluster commands as real processes: a driver with --listen, a separate worker, status."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
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


def keys(folder: Path, workers: int = 1) -> Path:
    """`esault keys generate`, as an operator would run it."""
    result = subprocess.run([sys.executable, "-m", "esault.cli", "keys", "generate", str(folder), "--workers",
                             str(workers)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return folder


def test_a_static_cluster_runs_with_a_separate_worker_and_answers_status(tmp_path: Path):
    (tmp_path / "paced.py").write_text(TOPOLOGY)
    k = keys(tmp_path / "keys", workers=1)
    stranger = keys(tmp_path / "other", workers=1)  # a valid key pair the driver was never told about
    assert oct((k / "driver.key_secret").stat().st_mode & 0o777) == "0o600"
    driver = esault("run", "paced.py", "--cluster", "static", "--listen", "127.0.0.1:0", "--min-workers", "1",
                    "--data-dir", str(tmp_path / "data"), "--secret-key", str(k / "driver.key_secret"),
                    "--worker-keys", str(k), "--client-keys", str(k / "client-1.key"), cwd=tmp_path)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(driver.stderr), daemon=True)
    reader.start()
    worker = intruder = None
    try:
        found = wait_until(lambda: next((m for line in lines if (m := re.search(r"listening on (\S+)", line))), None),
                           60, message="the driver's address on stderr")
        address = found.group(1)
        intruder = esault("worker", "--driver", address, "--name", "evil", "--secret-key",
                          str(stranger / "worker-1.key_secret"), "--driver-key", str(k / "driver.key"), cwd=tmp_path)
        worker = esault("worker", "--driver", address, "--name", "wx", "--secret-key", str(k / "worker-1.key_secret"),
                        "--driver-key", str(k / "driver.key"), cwd=tmp_path)

        def status(*client: str) -> str:
            result = subprocess.run([sys.executable, "-m", "esault.cli", "status", address, *client],
                                    capture_output=True, text=True, timeout=60)
            return result.stdout if result.returncode == 0 and "job 'paced'" in result.stdout else ""

        client = ("--secret-key", str(k / "client-1.key_secret"), "--driver-key", str(k / "driver.key"))
        report = wait_until(lambda: status(*client), 60, message="esault status showing the running job")
        assert "1 worker(s): wx" in report, "the worker with an unlisted key must not have joined"
        assert re.search(r"up +2 SPU\(s\), processed \d+ \(\d+/s\)", report)
        wrong_client = ("--secret-key", str(stranger / "client-1.key_secret"), "--driver-key", str(k / "driver.key"))
        refused = subprocess.run([sys.executable, "-m", "esault.cli", "status", address, *wrong_client],
                                 capture_output=True, text=True, timeout=60)
        assert refused.returncode == 2 and "no esault driver answered" in refused.stderr, refused.stderr
        out, _ = driver.communicate(timeout=120)
        assert driver.returncode == 0, "".join(lines)
        assert "src          1 SPU(s), emitted 1000, acked 1000, failed 0" in out
        assert "up           2 SPU(s), processed 1000" in out
        assert worker.wait(timeout=60) == 0, "the worker exits when the driver shuts down"
        assert any("failed the Curve handshake (unknown_key" in line for line in lines), "".join(lines)
    finally:
        for process in (driver, worker, intruder):
            if process is not None and process.poll() is None:
                process.kill()


def test_status_of_an_address_with_no_driver_says_so(tmp_path: Path):
    k = keys(tmp_path / "keys")
    result = subprocess.run([sys.executable, "-m", "esault.cli", "status", "127.0.0.1:1", "--timeout", "1",
                             "--secret-key", str(k / "client-1.key_secret"), "--driver-key", str(k / "driver.key")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "no esault driver answered at 127.0.0.1:1" in result.stderr or "could not reach" in result.stderr


def test_status_without_keys_says_where_they_come_from():
    result = subprocess.run([sys.executable, "-m", "esault.cli", "status", "127.0.0.1:1"],
                            capture_output=True, text=True, timeout=60, env={**os.environ, "ESAULT_RUNTIME_DIR": "/nonexistent"})
    assert result.returncode == 2
    assert "no status key for the driver at 127.0.0.1:1" in result.stderr and "esault keys generate" in result.stderr


def test_a_worker_without_keys_is_told_how_to_get_them():
    result = subprocess.run([sys.executable, "-m", "esault.cli", "worker", "--driver", "127.0.0.1:1"],
                            capture_output=True, text=True, timeout=60,
                            env={k: v for k, v in os.environ.items() if not k.startswith("ESAULT_")})
    assert result.returncode == 2
    assert "--secret-key worker-N.key_secret and --driver-key driver.key" in result.stderr


KEYED = TOPOLOGY.replace(
    "b.set_bolt('up', Upper, 2, elastic=False).shuffle_grouping('src')",
    "class Lower(Bolt):\n    def process(self, tup):\n        self.emit(tup.key, tup.value.lower())\n\n"
    "b.set_bolt('up', Upper, 2, elastic=False, versions={'lower': Lower}).key_grouping('src')")


def test_rescale_move_assign_and_swap_commands_reconfigure_a_running_job_over_its_api(tmp_path: Path):
    (tmp_path / "paced.py").write_text(KEYED)
    driver = esault("run", "paced.py", "--workers", "2", "--api-port", "0", "--duration", "120",
                    "--guarantee", "at_least_once", "--data-dir", str(tmp_path / "data"), cwd=tmp_path)
    try:
        url = None
        for line in driver.stderr:
            match = re.search(r"control plane: (http://\S+) \(web page\)", line)
            if match:
                url = match.group(1)
                break
        assert url, "the driver printed its API address"

        def run(*args: str) -> subprocess.CompletedProcess:
            return subprocess.run([sys.executable, "-m", "esault.cli", *args], capture_output=True, text=True,
                                  timeout=120)

        done = wait_until(lambda: (r := run("rescale", url, "paced", "up", "3")).returncode == 0 and r, 60,
                          message="the job is up and rescaled")
        assert "assign_workload of 'up'" in done.stdout and "started [" in done.stdout
        from esault.api.client import call

        spus = call(url, "/api/jobs/paced/units")["units"]["up"]["spus"]
        assert len(spus) == 3
        spu, row = next(iter(spus.items()))
        target = "w2" if row["worker"] == "w1" else "w1"
        moved = run("move", url, "paced", "up", spu, target)
        assert moved.returncode == 0 and f"retired [{spu}]" in moved.stdout, moved.stderr
        swapped = run("swap", url, "paced", "up", "lower")
        assert swapped.returncode == 0 and "assign_logic of 'up'" in swapped.stdout, swapped.stderr
        assert call(url, "/api/jobs/paced/units")["units"]["up"]["version"] == "lower"
        unknown = run("swap", url, "paced", "up", "Upper")  # a class name is not a version: nothing is imported
        assert unknown.returncode == 2 and "has no version 'Upper'; declared: declared, lower" in unknown.stderr, \
            unknown.stderr
        bad = run("assign", url, "paced", "up", "{not json")
        assert bad.returncode == 2 and "the assignment is not JSON" in bad.stderr
        refused = run("rescale", url, "paced", "src", "2")
        assert refused.returncode == 2 and "cannot be rescaled" in refused.stderr \
            and "esault_merge_positions" in refused.stderr and "HTTP 409" in refused.stderr, \
            refused.stderr
        nobody = run("rescale", "http://127.0.0.1:9", "paced", "up", "2")
        assert nobody.returncode == 2 and "no esault API answers at" in nobody.stderr
    finally:
        driver.terminate()
        driver.communicate(timeout=120)


def test_a_worker_whose_driver_never_answers_exits_3_after_its_connect_timeout(tmp_path: Path):
    import socket
    import time

    k = keys(tmp_path / "keys")
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "esault.cli", "worker", "--driver", f"127.0.0.1:{port}",
                             "--connect-timeout", "1", "--secret-key", str(k / "worker-1.key_secret"),
                             "--driver-key", str(k / "driver.key")], capture_output=True, text=True, timeout=60)
    assert result.returncode == 3, result.stderr
    assert time.monotonic() - started < 20, "bounded by --connect-timeout, not the 30 s driver timeout"
    assert f"no esault driver answered at 127.0.0.1:{port} within 1 s (--connect-timeout)" in result.stderr


def test_a_worker_given_a_host_that_does_not_resolve_gets_one_line_not_a_traceback(tmp_path: Path):
    k = keys(tmp_path / "keys")
    result = subprocess.run([sys.executable, "-m", "esault.cli", "worker", "--driver", "nohost.invalid:5555",
                             "--secret-key", str(k / "worker-1.key_secret"), "--driver-key", str(k / "driver.key")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "esault: error: --driver 'nohost.invalid:5555': cannot resolve host 'nohost.invalid'" in result.stderr


def test_ctrl_c_stops_a_job_on_worker_processes_within_seconds_with_its_summary(tmp_path: Path):
    """SIGINT to the driver's process group, as a terminal's Ctrl-C: the spawned workers are in sessions of
    their own, so the driver stops the job in order (draining), prints the counts and exits 130."""
    (tmp_path / "paced.py").write_text(TOPOLOGY)
    driver = subprocess.Popen([sys.executable, "-m", "esault.cli", "run", "paced.py", "--workers", "2",
                               "--guarantee", "at_least_once", "--data-dir", str(tmp_path / "data")],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                              start_new_session=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(driver.stderr), daemon=True)
    reader.start()
    try:
        wait_until(lambda: any("topology 'paced' running" in line for line in lines), 60,
                   message="the job running on its workers")
        os.killpg(driver.pid, signal.SIGINT)
        sent = time.monotonic()
        try:
            driver.wait(30)  # stderr is the reader's; stdout is small enough for the pipe
        except subprocess.TimeoutExpired:  # what it waits on: every thread's stack (faulthandler on SIGUSR1)
            driver.send_signal(signal.SIGUSR1)
            wait_until(lambda: any("Thread 0x" in line for line in lines), 10, message="the driver's stacks")
            pytest.fail("the driver did not exit within 30 s of Ctrl-C; its stderr:\n" + "".join(lines)[-8000:])
        took = time.monotonic() - sent
        out = driver.stdout.read()
    finally:
        if driver.poll() is None:
            driver.kill()
    reader.join(10)
    assert driver.returncode == 130, "".join(lines)
    assert took < 15, f"Ctrl-C took {took:.1f} s"
    assert "interrupted: stopping the job" in "".join(lines) and "was interrupted after" in "".join(lines)
    assert re.search(r"\bup\b", out), f"the per-unit counts are printed: {out!r}"
