"""A real Spark on loopback for the sink's cluster tests: a standalone Master + one Worker, or a Spark
Connect server, all started from the installed pyspark package (bin/spark-class, sbin/start-connect-server.sh).

Each is a context manager that picks free ports, starts the JVMs in their own process group, waits
on a condition (the master's /json lists an ALIVE worker; the Connect server logs that it started and
accepts TCP) with a timeout, and always stops what it started (SIGTERM to its group, then SIGKILL).
The test modules wrap them in module-scoped fixtures, so one cluster serves a whole module.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pyspark

from esault.testing import wait_until

SPARK_HOME = Path(pyspark.__file__).resolve().parent
START_TIMEOUT = 90.0  # two JVMs on a loaded 2-core machine


def free_port() -> int:
    """A port the kernel just handed out on 127.0.0.1 (free now; the JVM binds it a moment later)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spark_env(log_dir: Path) -> dict[str, str]:
    """Environment for Spark's launch scripts: everything on loopback, logs under `log_dir`."""
    return {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_LOG_DIR": str(log_dir), "SPARK_PID_DIR": str(log_dir), "SPARK_NO_DAEMONIZE": "1",
            "SPARK_LOCAL_HOSTNAME": "127.0.0.1"}


def _start(cmd: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    out = open(log, "ab")  # noqa: SIM115 - the child owns the descriptor after Popen
    try:
        return subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    finally:
        out.close()


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the process group this module started (the launcher and its JVM), SIGKILL if it lingers."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(20)


def _alive_or_raise(proc: subprocess.Popen, log: Path, what: str) -> None:
    if proc.poll() is not None:
        raise RuntimeError(f"{what} exited with {proc.returncode} while starting:\n{_tail(log)}")


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


@dataclass
class StandaloneCluster:
    master_url: str  # spark://127.0.0.1:PORT
    ui_url: str  # http://127.0.0.1:PORT (the master's web UI; /json is its state)
    work_dir: Path  # the worker's directory: app-*/<executor>/stderr are the executors' logs
    log_dir: Path

    def state(self) -> dict:
        with urllib.request.urlopen(self.ui_url + "/json", timeout=5) as resp:
            return json.loads(resp.read())

    def executor_logs(self) -> str:
        """Everything the executors this worker ran have logged so far."""
        return "\n".join(p.read_text(errors="replace") for p in sorted(self.work_dir.glob("app-*/*/stderr")))


def _alive_workers(cluster: StandaloneCluster) -> int:
    try:
        return sum(1 for w in cluster.state().get("workers", []) if w.get("state") == "ALIVE")
    except (OSError, ValueError):  # not listening yet, or its web UI answered before it had a page (empty body)
        return 0


@contextmanager
def standalone_cluster(base: Path, cores: int = 2, memory: str = "1g") -> Iterator[StandaloneCluster]:
    """A standalone Master and one Worker on 127.0.0.1; yields once the master lists the worker ALIVE."""
    base.mkdir(parents=True, exist_ok=True)
    log_dir, work_dir = base / "logs", base / "work"
    log_dir.mkdir(exist_ok=True)
    work_dir.mkdir(exist_ok=True)
    env = spark_env(log_dir)
    port, ui = free_port(), free_port()
    cls = str(SPARK_HOME / "bin" / "spark-class")
    cluster = StandaloneCluster(f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{ui}", work_dir, log_dir)
    started: list[subprocess.Popen] = []
    try:
        master = _start([cls, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
                         "--webui-port", str(ui)], env, log_dir / "master.out")
        started.append(master)
        worker = _start([cls, "org.apache.spark.deploy.worker.Worker", cluster.master_url, "--host", "127.0.0.1",
                         "--cores", str(cores), "--memory", memory, "--work-dir", str(work_dir),
                         "--webui-port", str(free_port())], env, log_dir / "worker.out")
        started.append(worker)

        def ready() -> bool:
            _alive_or_raise(master, log_dir / "master.out", "the Spark master")
            _alive_or_raise(worker, log_dir / "worker.out", "the Spark worker")
            return _alive_workers(cluster) >= 1

        wait_until(ready, START_TIMEOUT, interval=0.25, message=f"a worker ALIVE at {cluster.ui_url}/json")
        yield cluster
    finally:
        for proc in reversed(started):
            _stop(proc)


@dataclass
class ConnectServer:
    url: str  # sc://127.0.0.1:PORT
    log: Path


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


@contextmanager
def connect_server(base: Path, master: str = "local[2]") -> Iterator[ConnectServer]:
    """sbin/start-connect-server.sh --wait on 127.0.0.1 (its own Spark on `master`); yields once it serves."""
    base.mkdir(parents=True, exist_ok=True)
    log_dir = base / "logs"
    log_dir.mkdir(exist_ok=True)
    env = spark_env(log_dir)
    port = free_port()
    log = log_dir / "connect.out"
    cmd = [str(SPARK_HOME / "sbin" / "start-connect-server.sh"), "--wait", "--master", master,
           "--conf", f"spark.connect.grpc.binding.port={port}",
           "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
           "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.driver.bindAddress=127.0.0.1",
           "--conf", "spark.ui.enabled=false",
           "--conf", "spark.sql.catalogImplementation=in-memory",
           "--conf", f"spark.sql.warehouse.dir={base / 'spark-warehouse'}"]
    proc = _start(cmd, env, log)
    try:
        def ready() -> bool:
            _alive_or_raise(proc, log, "the Spark Connect server")
            return _accepts(port)

        wait_until(ready, START_TIMEOUT, interval=0.25, message=f"the Spark Connect server on 127.0.0.1:{port}")
        yield ConnectServer(f"sc://127.0.0.1:{port}", log)
    finally:
        _stop(proc)
