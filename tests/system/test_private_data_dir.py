"""A static cluster whose worker does not see the driver's data dir: the exactly-once job fails loudly, never exact-looking.

Until checkpoints live on an object store, every worker writes its checkpoint state into the driver's
<data_dir>/<job>/checkpoints.sqlite itself. A worker with a disk of its own at that path (here: its own mount
namespace with a tmpfs over the data dir, as a container without the shared volume) would write where the driver
never reads, and a rollback restarted its keys from 0 (issue 48: exit 0 with 2,761 of 9,000 table rows wrong).
Now the worker refuses to start the job's SPUs (the driver marks its store, the worker checks it sees the mark),
and a store that changes under a running worker fails the next checkpoint: the driver counts the state rows each
SPU acked against its own file.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from esault.testing import wait_until
from tests.system.test_cli_cluster import TOPOLOGY as CLI_TOPOLOGY, esault, keys

pytestmark = pytest.mark.system

TOPOLOGY = CLI_TOPOLOGY.split("b = TopologyBuilder")[0] + """
class Count(Bolt):
    def open(self, context):
        self.n = 0
    def process(self, tup):
        self.n += 1

b = TopologyBuilder('private')
b.set_spout('src', Paced, params={'items': [[f'w{i %% 97}', 1] for i in range(%(items)d)], 'rate': 100.0})
b.set_bolt('count', Count, 2, elastic=False).key_grouping('src')
topology = b.build()
"""


def unshared(*command: str, tmpfs_over: Path | None = None) -> list[str]:
    """`command` in a mount namespace of its own; with `tmpfs_over`, a private tmpfs is mounted there first."""
    if shutil.which("unshare") is None:
        pytest.fail("`unshare` (util-linux) is needed to give a worker a disk of its own")
    script = 'exec "$@"' if tmpfs_over is None else f'mount -t tmpfs esault-private "{tmpfs_over}" && exec "$@"'
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", *command]


def start_driver(tmp_path: Path, items: int, *extra: str) -> tuple[subprocess.Popen, list[str], Path]:
    """`esault run` of the keyed count on a static cluster; its stderr lines collect in the list as they come."""
    (tmp_path / "private.py").write_text(TOPOLOGY % {"items": items})
    k = keys(tmp_path / "keys", workers=1)
    driver = esault("run", "private.py", "--cluster", "static", "--listen", "127.0.0.1:0", "--min-workers", "1",
                    "--data-dir", str(tmp_path / "data"), "--secret-key", str(k / "driver.key_secret"),
                    "--worker-keys", str(k), "--client-keys", str(k / "client-1.key"), *extra, cwd=tmp_path)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(driver.stderr), daemon=True)
    reader.start()
    driver.reader = reader  # type: ignore[attr-defined]
    return driver, lines, k


def ended(driver: subprocess.Popen, lines: list[str], timeout: float = 120) -> tuple[int, str]:
    """The driver's exit code and everything it wrote (stderr, then stdout), once it exited."""
    code = driver.wait(timeout)
    out = driver.stdout.read()
    driver.reader.join(30)  # type: ignore[attr-defined]
    return code, "".join(lines) + out


def driver_address(lines: list[str]) -> str:
    found = wait_until(lambda: next((m for line in lines if (m := re.search(r"listening on (\S+)", line))), None),
                       60, message="the driver's address on stderr")
    return found.group(1)


def worker_command(address: str, k: Path) -> list[str]:
    return [sys.executable, "-m", "esault.cli", "worker", "--driver", address, "--name", "wx",
            "--secret-key", str(k / "worker-1.key_secret"), "--driver-key", str(k / "driver.key")]


def test_a_worker_that_does_not_see_the_drivers_data_dir_fails_the_job_at_start_naming_the_path_and_the_fix(
        tmp_path: Path):
    (tmp_path / "data").mkdir()
    driver, lines, k = start_driver(tmp_path, 300)
    worker = None
    try:
        address = driver_address(lines)
        worker = subprocess.Popen(unshared(*worker_command(address, k), tmpfs_over=tmp_path / "data"),
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path)
        code, log = ended(driver, lines)
        assert code == 2, log
        store = tmp_path / "data" / "private" / "checkpoints.sqlite"
        assert f"worker wx does not see the driver's checkpoint store at {store}: it holds no store of a driver" in log
        assert "point --data-dir (JobConfig.data_dir) of the driver and of every worker at one shared directory" in log
    finally:
        for process in (driver, worker):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait(30)


def test_a_store_that_changes_under_a_running_worker_fails_the_next_checkpoint_and_the_job(tmp_path: Path):
    """The worker saw the driver's store when its SPUs started; then its data dir is covered by a disk of its
    own (a remount). Its next snapshot goes there: the driver finds the acked rows missing from its file, fails
    that checkpoint and the job (exit 2) instead of recording states it could not restore."""
    (tmp_path / "data").mkdir()
    driver, lines, k = start_driver(tmp_path, 3000, "--checkpoint-interval", "3600")
    worker = None
    try:
        address = driver_address(lines)
        worker = subprocess.Popen(unshared(*worker_command(address, k)), stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, cwd=tmp_path)
        client = ("--secret-key", str(k / "client-1.key_secret"), "--driver-key", str(k / "driver.key"))

        def counting() -> bool:
            result = subprocess.run([sys.executable, "-m", "esault.cli", "status", address, *client],
                                    capture_output=True, text=True, timeout=60)
            return result.returncode == 0 and re.search(r"count +2 SPU\(s\), processed [1-9]", result.stdout)

        wait_until(counting, 60, message="the count SPUs processing on the worker")
        mounted = subprocess.run(["nsenter", "-t", str(worker.pid), "-m", "mount", "-t", "tmpfs", "esault-private",
                                  str(tmp_path / "data")], capture_output=True, text=True, timeout=30)
        assert mounted.returncode == 0, mounted.stderr
        savepoint = subprocess.run([sys.executable, "-m", "esault.cli", "savepoint", address, "private", *client],
                                   capture_output=True, text=True, timeout=120)
        assert savepoint.returncode == 1, savepoint.stdout
        code, log = ended(driver, lines)
        assert code == 2, log
        assert "are missing from the driver's checkpoint store" in log and "worker(s) wx wrote them into another " \
               "file at that path" in log, log
    finally:
        for process in (driver, worker):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait(30)
