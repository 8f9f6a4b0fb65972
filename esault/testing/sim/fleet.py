"""SimFleet: one real driver cluster in this process and N simulated workers packed into a few processes.

The driver is the real LocalCluster (listen mode: cluster actor, registry, capacity, postman) with a Traffic
counter on its endpoint; every worker gets a key pair the driver made, handed over on the sim process's stdin.
The last worker may run alone in a process of its own (`victim=True`), so that a worker's loss is a real kill -9.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from esault.cluster.credentials import ClusterKeys, WorkerKeys
from esault.cluster.local import LocalCluster
from esault.transport.keys import KeyPair
from esault.transport.traffic import Traffic

ROOT = Path(__file__).resolve().parents[3]


class SimFleet:
    """`workers` simulated workers in `processes` processes (plus one for the victim), joined to a driver."""

    def __init__(self, workers: int, processes: int, folder: Path, heartbeat_timeout: float = 10.0,
                 state_rows: int = 4, victim: bool = False, join_timeout: float = 300.0) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.rate_file = self.folder / "rate"
        self.rate_file.write_text("0")
        pairs = [KeyPair.generate() for _ in range(workers)]
        driver, client = KeyPair.generate(), KeyPair.generate()
        keys = ClusterKeys(driver, tuple(p.public for p in pairs), (client.public,), client)
        self.cluster = LocalCluster(listen="127.0.0.1:0", keys=keys, heartbeat_timeout=heartbeat_timeout,
                                    join_timeout=join_timeout)
        self.traffic = Traffic()
        self.cluster.postman.endpoint.traffic = self.traffic
        self.names = [f"sim-{i + 1}" for i in range(workers)]
        entries = [{"name": name, "keys": WorkerKeys(pair, driver.public).to_json()}
                   for name, pair in zip(self.names, pairs)]
        groups: list[list[dict[str, Any]]] = [[] for _ in range(max(1, min(processes, workers)))]
        packed = entries[:-1] if victim and workers > 1 else entries
        for i, entry in enumerate(packed):
            groups[i % len(groups)].append(entry)
        groups = [g for g in groups if g]
        if victim and workers > 1:
            groups.append([entries[-1]])
        self.victim = self.names[-1] if victim and workers > 1 else None
        self.processes: list[subprocess.Popen] = []
        try:
            for i, group in enumerate(groups):
                self.processes.append(self._start(group, state_rows, f"sim-{i}.log"))
            self.cluster.wait_for_workers(workers, join_timeout)
        except BaseException:
            self.close()
            raise

    def _start(self, group: list[dict[str, Any]], state_rows: int, log: str) -> subprocess.Popen:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        with open(self.folder / log, "ab") as out:
            process = subprocess.Popen(
                [sys.executable, "-m", "esault.testing.sim.workers", "--driver", self.cluster.address,
                 "--rate-file", str(self.rate_file), "--state-rows", str(state_rows)],
                stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT, env=env, text=True)
        assert process.stdin is not None
        process.stdin.write("".join(json.dumps(e) + "\n" for e in group) + "\n")
        process.stdin.flush()
        return process

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.processes]

    def set_rate(self, tuples_per_second: float) -> None:
        """Each simulated SPU's paced load from now on (the processes read it within a second)."""
        tmp = self.rate_file.with_suffix(".tmp")
        tmp.write_text(str(tuples_per_second))
        os.replace(tmp, self.rate_file)

    def kill_victim(self) -> str:
        """kill -9 the process of the worker that runs alone; its name."""
        if self.victim is None:
            raise RuntimeError("this fleet has no victim process: make it with victim=True and workers > 1")
        os.kill(self.processes[-1].pid, signal.SIGKILL)
        return self.victim

    def close(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.terminate()
        for process in self.processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)
        self.cluster.shutdown()

    def __enter__(self) -> "SimFleet":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
