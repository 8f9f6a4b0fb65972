"""Nothing shared but the network: a driver and its workers each on a "host" of their own, checkpoints on S3.

Every esault process runs in a network namespace of its own (the hosts, on one bridge) and in a mount
namespace of its own with a private tmpfs over the data dir: a file one writes is invisible to every other.
The checkpoints live on a real S3-compatible server (moto's) and the Kafka sink's topic on a real broker
(Tansu), both on the test's side of the bridge. Spark's warehouse is the one folder the processes share: it
stands for a Spark cluster's own storage. The job, a keyed running count into the Spark sink and the Kafka
sink, goes through kill -9 of a worker (its replacement on a fresh host), a split and a merge mid-stream,
kill -9 of the driver and a rerun on a fresh host, a savepoint and a restore with another parallelism; the
table and the topic must hold every running count exactly once.
"""

from __future__ import annotations

import collections
import json
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from esault.testing import wait_until
from tests.system.netns_hosts import Network, network  # noqa: F401 - the fixture
from tests.system.test_cli_cluster import TOPOLOGY as CLI_TOPOLOGY, keys

pytestmark = pytest.mark.system

ROOT = Path(__file__).resolve().parents[2]
WORDS, TOTAL = 53, 3000
DRIVER_PORT, API_PORT, TOKEN = 7421, 7422, "nothing-shared"

TOPOLOGY = CLI_TOPOLOGY.split("b = TopologyBuilder")[0] + """
import os
from esault.connectors import KafkaSink
from spark_sink import SparkSink

class RunningCount(Bolt):
    def open(self, context):
        self.n = 0
    def process(self, tup):
        self.n += 1
        self.emit(tup.key, self.n)

b = TopologyBuilder('shared')
b.set_spout('src', Paced, params={'items': [[f'w{i %% %(words)d}', 1] for i in range(%(total)d)], 'rate': %(rate)s})
b.set_bolt('count', RunningCount, int(os.environ.get('COUNT_PARALLELISM', '2')), elastic=False).key_grouping('src')
b.set_bolt('table', SparkSink, elastic=False, params={
    'table': 'counts', 'schema': 'word STRING, n BIGINT', 'key_column': 'word', 'value_column': 'n',
    'engine': 'pyarrow', 'warehouse': %(warehouse)r, 'batch_seconds': 0.5}).shuffle_grouping('count')
b.set_bolt('topic', KafkaSink, elastic=False, params={'bootstrap': %(bootstrap)r, 'topic': 'counts',
                                                      'key': 'utf-8', 'value': 'json'}).shuffle_grouping('count')
topology = b.build()
"""


class Process:
    """An esault command on a host of its own, in a mount namespace with a private tmpfs over `data`."""

    def __init__(self, namespace: str, data: Path, args: list[str], cwd: Path, env: dict[str, str]) -> None:
        script = f'mount -t tmpfs esault-private "{data}" && exec "$@"'
        command = ["ip", "netns", "exec", namespace, "unshare", "--mount", "--propagation", "private",
                   "sh", "-c", script, "sh", sys.executable, "-m", "esault.cli", *args]
        self.popen = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=lambda: self.lines.extend(self.popen.stdout), daemon=True)
        self._reader.start()

    @property
    def log(self) -> str:
        return "".join(self.lines)

    def python_pid(self) -> int:
        """The esault process itself (unshare and sh exec into it: the same pid)."""
        return self.popen.pid

    def kill9(self) -> None:
        os.kill(self.popen.pid, signal.SIGKILL)
        self.popen.wait(30)

    def ended(self, timeout: float) -> int:
        code = self.popen.wait(timeout)
        self._reader.join(30)
        return code

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
            self.popen.wait(30)


def expected_counts() -> dict[str, list[int]]:
    seen = collections.Counter(f"w{i % WORDS}" for i in range(TOTAL))
    return {w: list(range(1, n + 1)) for w, n in seen.items()}


def test_a_job_with_nothing_shared_but_the_network_is_exact_through_kills_rescales_and_restarts(
        tmp_path: Path, network: Network):
    from esault.checkpoint.object_store import ObjectCheckpointStore
    from esault.storage import ObjectStore, StorageLocation
    from esault.testing.kafka import KafkaBroker
    from esault.testing.s3 import S3Server

    data = tmp_path / "data"  # every process mounts its own tmpfs here
    data.mkdir()
    warehouse = tmp_path / "warehouse"  # the Spark cluster's storage: the one shared folder
    k = keys(tmp_path / "keys", workers=8)
    with S3Server(host=network.services) as s3, KafkaBroker(host=network.services) as broker:
        broker.create_topic("counts", 2)
        (tmp_path / "shared.py").write_text(TOPOLOGY % {"words": WORDS, "total": TOTAL, "rate": 120.0,
                                                        "warehouse": str(warehouse), "bootstrap": broker.bootstrap})
        storage = f"s3://{s3.bucket}/nothing-shared"
        env = {**os.environ, **s3.env(), "PYTHONPATH": str(ROOT)}
        # the test's own view of the store: the server's address and credentials in the URL (this process's
        # environment has none; the esault processes get them from theirs)
        ours = (f"{storage}?endpoint_override={s3.endpoint}&scheme=http&region=us-east-1"
                f"&access_key={s3.env()['AWS_ACCESS_KEY_ID']}&secret_key={s3.env()['AWS_SECRET_ACCESS_KEY']}")
        store = ObjectCheckpointStore(ObjectStore(StorageLocation.parse(ours).child("shared")))
        running: list[Process] = []
        workers_used = iter(range(1, 9))

        def driver(**extra_env: str) -> tuple[Process, str]:
            namespace, ip = network.host()
            args = ["--log-level", "INFO", "run", "shared.py", "--cluster", "static", "--listen",
                    f"{ip}:{DRIVER_PORT}", "--min-workers", "2", "--data-dir", str(data),
                    "--checkpoint-storage", storage, "--checkpoint-interval", "0.5",
                    "--secret-key", str(k / "driver.key_secret"), "--worker-keys", str(k),
                    "--client-keys", str(k / "client-1.key"), "--api-port", str(API_PORT), "--api-host", ip,
                    "--api-token", TOKEN, "--timeout", "300"]
            process = Process(namespace, data, args, tmp_path, {**env, **extra_env})
            running.append(process)
            return process, ip

        def worker(driver_ip: str) -> Process:
            namespace, _ = network.host()
            n = next(workers_used)
            process = Process(namespace, data, ["worker", "--driver", f"{driver_ip}:{DRIVER_PORT}", "--name", f"w{n}",
                                                "--secret-key", str(k / f"worker-{n}.key_secret"),
                                                "--driver-key", str(k / "driver.key"), "--driver-timeout", "5"],
                              tmp_path, env)
            running.append(process)
            return process

        def checkpoints_past(epoch: int) -> int:
            return wait_until(lambda: (p := store.latest()) is not None and p.epoch > epoch and p.epoch, 120,
                              message=f"a checkpoint after {epoch} on the object store")

        def api(*args: str, ip: str) -> None:
            namespace = network.hosts[-1]
            done = subprocess.run(["ip", "netns", "exec", namespace, sys.executable, "-m", "esault.cli", *args[:1],
                                   f"http://{ip}:{API_PORT}", *args[1:], "--token", TOKEN], capture_output=True,
                                  text=True, timeout=120, env=env, cwd=tmp_path)
            assert done.returncode == 0, done.stdout + done.stderr

        try:
            first, ip = driver()
            w1, _ = worker(ip), worker(ip)
            epoch = checkpoints_past(0)
            epoch = checkpoints_past(epoch)
            w1.kill9()  # its replacement starts on a fresh host
            worker(ip)
            wait_until(lambda: "rolling back to checkpoint" in first.log, 120, message="the rollback")
            epoch = checkpoints_past(epoch)
            api("rescale", "shared", "count", "3", ip=ip)  # a split
            epoch = checkpoints_past(epoch)
            api("rescale", "shared", "count", "2", ip=ip)  # a merge
            epoch = checkpoints_past(epoch)
            # The Kafka sink stages each epoch on the object store, not on its worker's disk: with the broker
            # stopped, completed epochs wait there to be published (and are, once it answers again).
            staged = ObjectStore(StorageLocation.parse(ours).child("shared", "kafka_sink"))
            broker.pause()
            try:
                wait_until(lambda: staged.list(), 60, message="the Kafka sink's staged epochs on the object store")
            finally:
                broker.resume()
            epoch = checkpoints_past(epoch)
            first.kill9()  # the driver; its workers exit after their driver timeout
            for process in running[1:]:
                if process.popen.poll() is None:
                    assert process.ended(60) is not None

            second, ip = driver()  # a fresh host with an empty disk, the same storage URL
            worker(ip), worker(ip)
            wait_until(lambda: f"resuming from checkpoint {epoch}" in second.log
                       or re.search(r"resuming from checkpoint \d+", second.log), 120, message="the resume")
            epoch = checkpoints_past(epoch)
            savepoint = subprocess.run(
                ["ip", "netns", "exec", network.hosts[-1], sys.executable, "-m", "esault.cli", "savepoint",
                 f"{ip}:{DRIVER_PORT}", "shared", "--stop", "--secret-key", str(k / "client-1.key_secret"),
                 "--driver-key", str(k / "driver.key")], capture_output=True, text=True, timeout=120, env=env,
                cwd=tmp_path)
            assert savepoint.returncode == 0, savepoint.stdout + savepoint.stderr + second.log
            second.ended(120)

            third, ip = driver(COUNT_PARALLELISM="3")  # the savepoint, restored with another parallelism
            worker(ip), worker(ip)
            assert third.ended(300) == 0, third.log
            # savepoint --stop records a final checkpoint: the rerun resumes from it, with 3 count SPUs
            assert re.search(r"resuming from checkpoint \d+ \(final\)", third.log), third.log
            assert "count  bolt, 3 SPUs" in third.log, third.log
        finally:
            for process in running:
                process.stop()

        expected = expected_counts()
        rows = table_rows(warehouse / "counts")
        assert rows == expected, "the table has a missing or duplicate row"
        records = collections.defaultdict(list)
        for r in broker.read("counts"):
            records[r["key"].decode()].append(json.loads(r["value"]))
        assert {w: sorted(ns) for w, ns in records.items()} == expected, "the topic has a missing or duplicate record"


def table_rows(root: Path) -> dict[str, list[int]]:
    import pyarrow.dataset as ds

    files = [str(p) for p in root.rglob("*.parquet") if "_esault" not in p.parts]
    data = ds.dataset(files, format="parquet").to_table(columns=["word", "n"]).to_pydict() if files else \
        {"word": [], "n": []}
    rows: dict[str, list[int]] = collections.defaultdict(list)
    for word, n in zip(data["word"], data["n"]):
        rows[word].append(n)
    return {w: sorted(ns) for w, ns in rows.items()}
