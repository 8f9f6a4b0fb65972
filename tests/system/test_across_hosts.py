"""A driver and its workers on two "hosts": network namespaces linked by a veth pair, no loopback between them.

Each namespace has its own 127.0.0.1, so an address that only works on one
machine (a loopback reply socket, a worker bound to loopback, a host name that
resolves to 127.0.1.1) fails here as it would between two machines.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from esault.testing import wait_until
from tests.system.test_cli_cluster import TOPOLOGY, keys

pytestmark = pytest.mark.system

DRIVER_PORT, WORKER_PORT = 7411, 7412  # fixed ports: each namespace starts with all ports free


@dataclass(frozen=True)
class Host:
    namespace: str
    ip: str

    def command(self, *args: str) -> list[str]:
        return ["ip", "netns", "exec", self.namespace, *args]


def _ip(*args: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    except FileNotFoundError:  # no iproute2 (.ci/run installs it): reported like any failed ip command
        return subprocess.CompletedProcess(["ip", *args], 127, "", "the `ip` command (iproute2) is not installed")


@pytest.fixture
def two_hosts() -> Iterator[tuple[Host, Host]]:
    """Two namespaces, 10.N.M.1 and .2 on one veth link. Where they cannot be made (no root, no
    CAP_NET_ADMIN) the test fails saying so: the cross-host reply paths would otherwise go untested."""
    tag = f"esa{os.getpid() % 100000}"
    a, b = f"{tag}a", f"{tag}b"
    subnet = f"10.{200 + os.getpid() % 50}.{os.getpid() % 250}"
    made = _ip("netns", "add", a)
    if made.returncode != 0:
        pytest.fail(f"cannot create network namespaces here (needs root / CAP_NET_ADMIN and iproute2, which "
                    f".ci/run installs): {made.stderr.strip()}")
    try:
        steps = [("netns", "add", b), ("link", "add", f"{a}v", "type", "veth", "peer", "name", f"{b}v"),
                 ("link", "set", f"{a}v", "netns", a), ("link", "set", f"{b}v", "netns", b),
                 ("-n", a, "addr", "add", f"{subnet}.1/24", "dev", f"{a}v"),
                 ("-n", b, "addr", "add", f"{subnet}.2/24", "dev", f"{b}v"),
                 ("-n", a, "link", "set", f"{a}v", "up"), ("-n", b, "link", "set", f"{b}v", "up"),
                 ("-n", a, "link", "set", "lo", "up"), ("-n", b, "link", "set", "lo", "up")]
        for step in steps:
            done = _ip(*step)
            assert done.returncode == 0, f"ip {' '.join(step)}: {done.stderr}"
        yield Host(a, f"{subnet}.1"), Host(b, f"{subnet}.2")
    finally:
        _ip("netns", "del", a)
        _ip("netns", "del", b)


def test_driver_workers_and_status_on_two_hosts_reach_each_other_through_their_advertised_addresses(
        tmp_path: Path, two_hosts: tuple[Host, Host]):
    driver_host, worker_host = two_hosts
    (tmp_path / "paced.py").write_text(TOPOLOGY.replace("range(1000)", "range(400)"))
    k = keys(tmp_path / "keys", workers=2)

    def start(host: Host, *args: str) -> subprocess.Popen:
        return subprocess.Popen(host.command(sys.executable, "-m", "esault.cli", *args), cwd=tmp_path,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ})

    driver = start(driver_host, "--log-level", "INFO", "run", "paced.py", "--cluster", "static", "--listen",
                   f"{driver_host.ip}:{DRIVER_PORT}", "--min-workers", "2", "--data-dir", str(tmp_path / "data"),
                   "--secret-key", str(k / "driver.key_secret"), "--worker-keys", str(k),
                   "--client-keys", str(k / "client-1.key"), "--timeout", "120")
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(driver.stderr), daemon=True).start()
    address = f"{driver_host.ip}:{DRIVER_PORT}"
    worker_args = ("--driver", address, "--driver-key", str(k / "driver.key"))
    # One worker on the defaults (it must pick the interface that routes to the driver, not loopback),
    # one on all interfaces at a fixed port, advertising its address explicitly.
    workers = [start(worker_host, "worker", "--name", "wa", "--secret-key", str(k / "worker-1.key_secret"),
                     *worker_args),
               start(worker_host, "worker", "--name", "wb", "--secret-key", str(k / "worker-2.key_secret"),
                     "--bind-host", "0.0.0.0", "--port", str(WORKER_PORT), "--advertise", worker_host.ip,
                     *worker_args)]
    try:
        def status() -> str:
            result = subprocess.run(worker_host.command(
                sys.executable, "-m", "esault.cli", "status", address, "--timeout", "5",
                "--secret-key", str(k / "client-1.key_secret"), "--driver-key", str(k / "driver.key")),
                capture_output=True, text=True, timeout=60)
            return result.stdout if result.returncode == 0 and "job 'paced'" in result.stdout else ""

        report = wait_until(status, 60, message="esault status from the other host showing the running job")
        assert "2 worker(s)" in report, report
        out, _ = driver.communicate(timeout=120)
        assert driver.returncode == 0, "".join(lines)
        assert "src          1 SPU(s), emitted 400, acked 400, failed 0" in out, out
        assert "up           2 SPU(s), processed 400" in out, out
        joined = {m.group(1): m.group(2) for line in lines
                  if (m := re.search(r"worker (\w+) \(pid \d+\) joined from tcp://(\S+)", line))}
        assert joined.keys() == {"wa", "wb"}, "".join(lines)
        assert joined["wa"].rsplit(":", 1)[0] == worker_host.ip, joined  # the route toward the driver
        assert joined["wb"] == f"{worker_host.ip}:{WORKER_PORT}", joined  # as advertised, at the fixed port
        for worker in workers:
            assert worker.wait(timeout=60) == 0, "a worker exits 0 when its driver shuts down"
    finally:
        for process in (driver, *workers):
            if process.poll() is None:
                process.kill()
