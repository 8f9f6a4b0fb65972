"""A real Ray autoscaling cluster on this machine, for the Ray provider's tests (`with ray_cluster() as ray:`).

Ray's own AutoscalingCluster builds the fake-multinode config from an example.yaml the wheel does not ship,
and starts and stops through Ray's own forced stop, which ends every Ray process of every user on the machine. This
one passes the whole config, starts the head with `ray start --block` as its child, and stops exactly the
processes it started: the head's process tree, the worker nodes the autoscaler forked included, by pid.
Everything binds 127.0.0.1, every port is a free one, and the session lives in its own temp dir.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
"""Set to 0, Ray's get_node_ip_address() answers 127.0.0.1 (it would pick the host's routed address): every node
and the test's own ray.init then stay on loopback. Ray reads it once, when it is first imported."""

HEAD_TYPE = "ray.head.default"
WORKER_TYPE = "esault.worker.cpu1"


def free_port() -> int:
    """A TCP port nothing listens on now on 127.0.0.1 (the OS picks it)."""
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """`count` distinct free ports: each probe is held until all are picked, so none is picked twice."""
    probes = [socket.socket() for _ in range(count)]
    try:
        for probe in probes:
            probe.bind(("127.0.0.1", 0))
        return [probe.getsockname()[1] for probe in probes]
    finally:
        for probe in probes:
            probe.close()


def autoscaling_config(max_nodes: int, gcs_address: str, node_cpus: int = 1,
                       object_store_bytes: int = 100 * 2**20, idle_timeout_minutes: float = 0.1) -> dict[str, Any]:
    """The fake-multinode autoscaler's whole config: a head with no CPU (nothing of esault lands there) and
    one node type of `node_cpus` CPUs, 0 to `max_nodes` of them, each joining the GCS at `gcs_address`."""
    return {
        "cluster_name": "esault-test",
        "max_workers": max_nodes,
        "provider": {"type": "fake_multinode", "use_node_id_as_ip": True, "disable_node_updaters": True,
                     "disable_launch_config_check": True, "gcs_address": gcs_address},
        "available_node_types": {
            HEAD_TYPE: {"resources": {"CPU": 0}, "node_config": {}, "max_workers": 0},
            WORKER_TYPE: {"resources": {"CPU": node_cpus, "object_store_memory": object_store_bytes},
                          "node_config": {}, "min_workers": 0, "max_workers": max_nodes},
        },
        "head_node_type": HEAD_TYPE,
        "auth": {}, "upscaling_speed": 1.0, "idle_timeout_minutes": idle_timeout_minutes, "docker": {},
        "initialization_commands": [], "setup_commands": [], "head_setup_commands": [],
        "worker_setup_commands": [], "head_start_ray_commands": [], "worker_start_ray_commands": [],
        "file_mounts": {}, "cluster_synced_files": [], "file_mounts_sync_continuously": False,
        "rsync_exclude": [], "rsync_filter": [],
    }


def _checked_config(config: dict[str, Any]) -> dict[str, Any]:
    """`config` as Ray's AutoscalingCluster generates it, given whole (it would read example.yaml)."""
    from ray.cluster_utils import AutoscalingCluster

    class WholeConfig(AutoscalingCluster):
        def _generate_config(self, head_resources: dict, worker_node_types: dict, autoscaler_v2: bool = False,
                             **config_kwargs: Any) -> dict[str, Any]:
            return copy.deepcopy(config)

    return WholeConfig(head_resources={"CPU": 0}, worker_node_types=config["available_node_types"])._config


def use_loopback() -> None:
    """Make this process's Ray answer 127.0.0.1 for its node address (before `import ray`, or it is too late:
    the test's ray.init would then connect to the host's routed address, where nothing listens)."""
    os.environ[LOOPBACK_ENV] = "0"
    constants = sys.modules.get("ray._private.ray_constants")
    if constants is not None and constants.ENABLE_RAY_CLUSTER:
        raise RuntimeError(f"ray was imported before {LOOPBACK_ENV}=0 was set: call use_loopback() (or set it in "
                           "the environment) before anything imports ray")


def descendants(pid: int) -> list[int]:
    """Every living process below `pid`, read from /proc (children before their children)."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        parents.setdefault(ppid, []).append(int(entry))
    found: list[int] = []
    todo = [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _start_time(pid: int) -> int:
    """When `pid` started, in clock ticks since boot (/proc/PID/stat field 22): -1 once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return -1
    return int(stat[stat.rindex(")") + 2:].split()[19])


def alive(pid: int) -> bool:
    """Whether `pid` runs (not gone, not a zombie)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return state[state.rindex(")") + 2] != "Z"


@dataclass
class RayTestCluster:
    """A running test cluster: where it listens and what it started."""

    address: str
    """The GCS, HOST:PORT: what ray.init(address=...) and RayProvider take."""
    head: subprocess.Popen
    temp_dir: Path
    client_address: str = ""
    """ray://127.0.0.1:PORT, the head's Ray client server."""
    started: dict[int, int] = field(default_factory=dict)
    """Every process of it seen so far (the head's tree, worker nodes included), pid -> its start time: what
    stop() ends, and only while that pid is still that process (a killed node's orphans are remembered too)."""

    def pids(self) -> list[int]:
        """The head and its process tree now, remembered for stop()."""
        now = [self.head.pid, *descendants(self.head.pid)]
        for pid in now:
            if pid not in self.started:
                self.started[pid] = _start_time(pid)
        return now

    def _same(self, pid: int) -> bool:
        return _start_time(pid) == self.started.get(pid)

    def raylet_pids(self) -> dict[str, int]:
        """Each worker node's raylet pid by its node id (the fake provider names node ids itself)."""
        found: dict[str, int] = {}
        for pid in self.pids():
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if not argv or not argv[0].endswith(b"raylet"):
                continue
            for arg in argv:
                if arg.startswith(b"--node_id="):
                    found[arg.split(b"=", 1)[1].decode()] = pid
        return found

    def autoscaler_said(self, *words: str, last: int = 20) -> list[str]:
        """The autoscaler's log lines (monitor.log/.out of this cluster's session) holding any of `words`, the
        `last` of them: what a failed test shows of nodes added and removed (e.g. "Terminating", "Adding")."""
        lines: list[str] = []
        for path in sorted(self.temp_dir.glob("session_2*/logs/monitor.log")):  # not session_latest: its link
            try:
                lines += [line.rstrip() for line in path.read_text(errors="replace").splitlines()
                          if any(word in line for word in words)]
            except OSError:
                continue
        return lines[-last:]

    def alive_nodes(self) -> int:
        """Worker nodes (not the head) the GCS counts as alive; this process must be ray.init-ed to it."""
        import ray

        return sum(1 for n in ray.nodes() if n["Alive"] and n["Resources"].get("CPU", 0) > 0)

    def stop(self) -> None:
        """SIGSTOP the whole tree first (the autoscaler forks no node while it is killed), then SIGKILL each
        process by pid; nothing by name, nothing of another cluster."""
        for _ in range(5):  # freeze until no new process appears
            before = set(self.started)
            for pid in self.pids():
                _signal(pid, signal.SIGSTOP)
            if set(self.started) == before:
                break
        for pid in self.started:
            if self._same(pid):
                _signal(pid, signal.SIGKILL)
        try:
            self.head.wait(10)
        except subprocess.TimeoutExpired:
            pass
        deadline = time.monotonic() + 10
        while any(alive(p) and self._same(p) for p in self.started) and time.monotonic() < deadline:
            time.sleep(0.05)  # the kernel ending SIGKILLed processes: no event to wait on from here
        shutil.rmtree(self.temp_dir, ignore_errors=True)


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


@contextmanager
def ray_cluster(max_nodes: int = 2, start_timeout: float = 90.0,
                idle_timeout_minutes: float = 0.1) -> Iterator[RayTestCluster]:
    """Start a local Ray autoscaling cluster (head with 0 CPUs, 0..max_nodes nodes of 1 CPU), yield it, and end
    every process it started. Nodes are added when actors ask for CPUs, and removed once idle for
    `idle_timeout_minutes` (6 s by default)."""
    use_loopback()
    port, client_port, autoscaler_metrics, dashboard_metrics, metrics, agent, runtime_env = free_ports(7)
    address = f"127.0.0.1:{port}"
    temp_dir = Path(tempfile.mkdtemp(prefix="esray-", dir="/tmp"))  # short: Ray's socket paths have a limit
    config = _checked_config(autoscaling_config(max_nodes, address, idle_timeout_minutes=idle_timeout_minutes))
    config_file = temp_dir / "autoscaling.json"
    config_file.write_text(json.dumps(config))
    env = {**os.environ, "AUTOSCALER_UPDATE_INTERVAL_S": "1", "RAY_FAKE_CLUSTER": "1",
           LOOPBACK_ENV: "0",  # then every node's get_node_ip_address() is 127.0.0.1
           "RAY_USAGE_STATS_ENABLED": "0",
           "AUTOSCALER_METRIC_PORT": str(autoscaler_metrics), "DASHBOARD_METRIC_PORT": str(dashboard_metrics)}
    ray_cli = str(Path(sys.executable).with_name("ray"))
    command = [ray_cli if os.path.exists(ray_cli) else "ray", "start", "--head", "--block",
               f"--autoscaling-config={config_file}", f"--port={port}", "--node-ip-address=127.0.0.1",
               "--num-cpus=0", "--object-store-memory=100000000", "--include-dashboard=false",
               "--disable-usage-stats", f"--temp-dir={temp_dir}",
               f"--ray-client-server-port={client_port}", f"--metrics-export-port={metrics}",
               f"--dashboard-agent-listen-port={agent}", f"--runtime-env-agent-port={runtime_env}"]
    log = open(temp_dir / "head.log", "w")
    head = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    cluster = RayTestCluster(address, head, temp_dir, f"ray://127.0.0.1:{client_port}")
    try:
        _wait_for_gcs(cluster, start_timeout, temp_dir / "head.log")
        yield cluster
    finally:
        log.close()
        cluster.stop()


def _wait_for_gcs(cluster: RayTestCluster, timeout: float, log: Path) -> None:
    """Until the head's GCS accepts connections, its raylet is up and the autoscaler runs."""
    deadline = time.monotonic() + timeout
    host, port = cluster.address.rsplit(":", 1)
    while time.monotonic() < deadline:
        cluster.pids()
        if cluster.head.poll() is not None:
            raise RuntimeError(f"ray start --head exited with code {cluster.head.returncode}; its output "
                               f"({log}):\n{log.read_text()[-3000:]}")
        names = {_name(p) for p in cluster.started if alive(p)}
        if any("/raylet " in n for n in names) and any("monitor.py" in n for n in names):
            try:
                socket.create_connection((host, int(port)), timeout=1).close()
                return
            except OSError:
                pass
        time.sleep(0.2)  # polling processes that give no event of their start
    raise RuntimeError(f"the Ray head did not come up within {timeout:g} s; its output ({log}):\n"
                       f"{log.read_text()[-3000:]}")


def _name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
