"""After `esault run` ends, however it ends, none of its processes is left: zygote, workers, Spark's JVM.

The run is the README's main job (examples/wordcount.py into a Spark table, on local worker processes). Its
processes are found by what they carry: the zygote and the JVM inherit a marker variable of the test's (a
worker's environment area is overwritten by its process title, so workers are found by their command line,
which names the driver's address). Bounds (docs/DEPLOYMENT.md, "When a run ends"): a run that exits (0, 2 or
130) leaves nothing after DRIVER_EXIT_GRACE; a driver killed with kill -9 leaves its workers until their
driver timeout (heartbeat_timeout, 10 s) plus the worker's SHUTDOWN_GRACE.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from esault.cluster.worker import SHUTDOWN_GRACE
from esault.testing import wait_until

pytestmark = pytest.mark.system

ROOT = Path(__file__).resolve().parents[2]
DRIVER_EXIT_GRACE = SHUTDOWN_GRACE + 3.0
"""Seconds after the driver's exit within which its zygote, workers and JVM are gone: they end on its word (a
worker's actors get SHUTDOWN_GRACE), or as their pipe or socket to it closes."""
WORKER_DRIVER_TIMEOUT = 10.0
"""A local worker's driver timeout: the pool gives it the cluster's heartbeat_timeout (default 10 s)."""


def processes_of(tag: str, address: str | None) -> dict[int, str]:
    """pid -> command line of every live process that carries `tag` in its environment or names `address`."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            environ = Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:
            continue
        if state == "Z":
            continue
        if f"OUTLIVES_TEST_RUN={tag}".encode() in environ.split(b"\0") or (address and f"--driver {address}" in cmdline):
            found[int(entry)] = cmdline[:160]
    return found


def start_run(tmp_path: Path, tag: str, **env: str) -> tuple[subprocess.Popen, list[str]]:
    driver = subprocess.Popen([sys.executable, "-m", "esault.cli", "run", str(ROOT / "examples" / "wordcount.py"),
                               "--data-dir", str(tmp_path / "data")], cwd=tmp_path, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "OUTLIVES_TEST_RUN": tag, **env})
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(driver.stderr), daemon=True).start()
    return driver, lines


def address_of(lines: list[str]) -> str:
    found = wait_until(lambda: next((m for line in lines if (m := re.search(r"listening on (\S+)", line))), None),
                       120, message="the driver's address")
    return found.group(1).replace("tcp://", "")


@pytest.mark.parametrize("ending", ["completes", "fails", "interrupted", "killed"])
def test_no_zygote_worker_or_spark_jvm_of_a_run_outlives_it(tmp_path, ending):
    tag = uuid.uuid4().hex
    env = {"WORDCOUNT_RATE": "1500"} if ending in ("interrupted", "killed") else {}
    if ending == "fails":  # no checkpoint can complete in time, and none may fail: exit 2 mid-run
        env.update(ESAULT_CHECKPOINT_TIMEOUT="0.001", ESAULT_TOLERABLE_CHECKPOINT_FAILURES="0")
    driver, lines = start_run(tmp_path, tag, **env)
    try:
        address = address_of(lines)
        wait_until(lambda: sum("esault worker" in c for c in processes_of(tag, address).values()) >= 2, 120,
                   message="the run's two workers")
        if ending in ("interrupted", "killed"):
            # mid-run, with the Spark sink's JVM up: its output appears once the first checkpoint published
            wait_until(lambda: any("java" in c for c in processes_of(tag, address).values()), 120,
                       message="Spark's JVM started")
            driver.send_signal(signal.SIGINT if ending == "interrupted" else signal.SIGKILL)
        code = driver.wait(300)
        exited = time.monotonic()
        expected = {"completes": 0, "fails": 2, "interrupted": 130, "killed": -signal.SIGKILL}[ending]
        assert code == expected, "".join(lines)[-4000:]
        bound = DRIVER_EXIT_GRACE + (WORKER_DRIVER_TIMEOUT + SHUTDOWN_GRACE if ending == "killed" else 0.0)
        wait_until(lambda: not processes_of(tag, address), bound - (time.monotonic() - exited), interval=0.2,
                   message=f"every process of the run gone within {bound:g} s of the driver's exit")
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait(30)
        for pid in processes_of(tag, None):  # nothing of this test's run may stay for the next test
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
