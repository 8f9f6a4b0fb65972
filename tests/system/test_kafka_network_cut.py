"""A broker unreachable from one worker only (issue 52, "Broker faults"): a network namespace cut.

The driver, the broker and one worker run on this host; the other worker runs in a network namespace of its
own on a bridge linked to this host (tests/system/netns_hosts.py), and reaches the driver, its peer and the broker through it. Mid-stream
an iptables rule in that namespace drops every packet it sends to the broker's port (a firewall or a broken
route: no reset, no error, the packets are gone), and is removed CUT seconds later. Its source instance must
stall loudly (its row of job.status(), `esault status` and its worker's log say it waits for the broker), the
other instance must go on reading and checkpoints go on completing (the sink publishes what they cover), and
once the cut heals the job must end with every record's count once in the output topic.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from esault import JobConfig, LocalCluster
from esault.cluster.credentials import ClusterKeys
from esault.testing import wait_until
from esault.testing.kafka import KafkaBroker
from esault.transport.keys import generate_key_files
from tests.system.netns_hosts import Network, network  # noqa: F401 - the fixture

sys.path.insert(0, str(Path(__file__).resolve().parent))
import kafka_parts  # noqa: E402
from cli_processes import ENV, start_esault  # noqa: E402

pytestmark = pytest.mark.system

CUT = 10.0
"""Seconds the worker stays cut off from the broker (the paused-broker tests' outage)."""


@dataclass(frozen=True)
class CutOffHost:
    """A host of its own on the test network (netns_hosts): `ip` its address, `gateway` this host's."""

    namespace: str
    ip: str
    gateway: str

    def command(self, *args: str) -> list[str]:
        return ["ip", "netns", "exec", self.namespace, *args]

    def _rule(self, action: str, port: int) -> None:
        done = subprocess.run(self.command("iptables", action, "OUTPUT", "-p", "tcp", "-d", self.gateway,
                                           "--dport", str(port), "-j", "DROP"),
                              capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, f"iptables {action} in {self.namespace}: {done.stderr}"

    def cut(self, port: int) -> None:
        """Drop every packet this host sends to `port` on the gateway (no reset: a silent partition)."""
        self._rule("-A", port)

    def heal(self, port: int) -> None:
        self._rule("-D", port)


@pytest.fixture
def other_host(network: Network) -> CutOffHost:
    if shutil.which("iptables") is None:
        pytest.fail("iptables is not installed (.ci/run installs it): the cut cannot be made")
    namespace, ip = network.host()
    return CutOffHost(namespace, ip, network.services)


def _replica(keys: Path, address: str, tmp_path: Path, log: str, host: CutOffHost | None = None) -> subprocess.Popen:
    args = ("worker", "--driver", address, "--enroll-key", str(keys / "enroll.key_secret"),
            "--driver-key", str(keys / "driver.key"), "--driver-timeout", "20")
    if host is None:
        return start_esault(*args, cwd=tmp_path, log=tmp_path / log)
    with (tmp_path / log).open("a") as out:
        return subprocess.Popen(host.command(sys.executable, "-m", "esault.cli", *args), stdout=out,
                                stderr=subprocess.STDOUT, text=True, env=ENV, cwd=tmp_path)


def _status(keys: Path, address: str) -> str:
    """What `esault status` prints, run as an operator of this static cluster runs it (a client key)."""
    done = subprocess.run([sys.executable, "-m", "esault.cli", "status", address, "--timeout", "10", "--secret-key",
                           str(keys / "client-1.key_secret"), "--driver-key", str(keys / "driver.key")],
                          capture_output=True, text=True, timeout=60, env=ENV)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _source_rows(job) -> dict[int, dict]:
    return job.status()["units"]["words"]["spus"]


def test_a_worker_cut_off_from_the_broker_stalls_loudly_the_other_goes_on_and_the_job_ends_exact_once_healed(
        other_host, tmp_path):
    host = other_host
    keys = tmp_path / "keys"
    generate_key_files(keys, workers=0, clients=1, enroll=True)
    cluster_keys = ClusterKeys.from_files(keys / "driver.key_secret", None, client_keys=keys / "client-1.key",
                                          enroll_keys=keys / "enroll.key")
    records = kafka_parts.words(6000)
    processes: list[subprocess.Popen] = []
    with KafkaBroker(host=host.gateway) as broker:
        broker.create_topic("words", 4)
        broker.create_topic("counts", 1)
        broker.produce("words", records)
        port = int(broker.bootstrap.rsplit(":", 1)[1])
        try:
            with LocalCluster(listen=f"{host.gateway}:0", keys=cluster_keys, heartbeat_timeout=10.0) as cluster:
                processes.append(_replica(keys, cluster.address, tmp_path, "here.log"))
                cluster.wait_for_workers(1, 60)
                processes.append(_replica(keys, cluster.address, tmp_path, "there.log", host))
                cluster.wait_for_workers(2, 60)
                there = next(w for w, address in cluster.registry.workers.items() if f"//{host.ip}:" in address)
                # Two source instances, one a worker (the fewest-SPUs placement), each reading 2 of the 4
                # partitions; ~6 s of counting each, so the cut lands mid-stream. The sink in the driver.
                topology = kafka_parts.build("kafka-cut", broker.bootstrap, "words", "counts", pace=0.004,
                                             max_records=50, max_pending=100, spout_placement="worker",
                                             sink_placement="driver", refresh_interval=0.5)
                config = JobConfig(data_dir=tmp_path / "data", elasticity=False, checkpoint_interval=0.5,
                                   message_timeout=300.0)
                job = cluster.submit(topology, config)
                try:
                    rows = _source_rows(job)
                    hosts = {spu: row.get("worker") for spu, row in rows.items()}
                    assert sorted(hosts.values()) == sorted(cluster.registry.workers), \
                        f"one source instance a worker: {hosts}"
                    cut_spu = next(spu for spu, process in hosts.items() if process == there)
                    free_spu = next(spu for spu in hosts if spu != cut_spu)
                    wait_until(lambda: all(r.get("emitted", 0) > 0 for r in _source_rows(job).values()), 60,
                               message="both source instances reading")
                    host.cut(port)
                    cut_at = time.monotonic()
                    completed_at_cut = job.checkpoints.stats.completed
                    try:
                        wanted = f"waiting for broker {broker.bootstrap} since "
                        waiting = wait_until(lambda: _source_rows(job)[cut_spu].get("waiting"), CUT, interval=0.1,
                                             message="the cut-off source instance's row saying it waits")
                        assert waiting.startswith(wanted), waiting
                        assert waiting in _status(keys, cluster.address)
                        assert "waiting" not in _source_rows(job)[free_spu], _source_rows(job)[free_spu]
                        before = _source_rows(job)[free_spu].get("emitted", 0)
                        wait_until(lambda: _source_rows(job)[free_spu].get("emitted", 0) > before, CUT,
                                   message="the other source instance reading on through the cut")
                        # the cut itself, not synchronisation: it lasts CUT seconds
                        threading.Event().wait(max(0.0, CUT - (time.monotonic() - cut_at)))
                    finally:
                        host.heal(port)
                    during = job.checkpoints.stats.completed - completed_at_cut
                    assert during >= 2, f"{during} checkpoint(s) completed during the {CUT} s cut: the rest stalled"
                    assert job.wait(180), job.status()
                    wait_until(lambda: "waiting" not in _source_rows(job).get(cut_spu, {}), 30,
                               message="the wait cleared once the broker answers the worker again")
                finally:
                    job.stop()
        finally:
            for process in processes:
                if process.poll() is None:
                    process.kill()
                process.wait(30)
        kafka_parts.assert_counts_exact(broker, "counts", records)
    assert f"waiting for broker {broker.bootstrap}" in (tmp_path / "there.log").read_text()  # its log says so too
