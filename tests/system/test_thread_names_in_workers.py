"""A job's threads carry their names at the OS level in the process that runs them: each SPU's as
"spu-<id> <unit>" (cut to the kernel's 15 bytes), each endpoint's I/O thread as "endpoint-<process>", so
`top -H -p <pid>` shows which SPU keeps a core busy. Workers are real processes."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from esault import JobConfig, LocalCluster
from esault.testing import wait_until
from esault.thread_names import os_thread_name

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))
import wordcount  # noqa: E402

pytestmark = [pytest.mark.system,
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/<pid>/task/*/comm is Linux's")]


def thread_names(pid: int) -> set[str]:
    names = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            names.add((task / "comm").read_text().strip())
        except OSError:  # a thread that ended meanwhile
            pass
    return names


def test_each_spu_thread_is_named_after_its_spu_and_unit_where_it_runs(tmp_path):
    topology = wordcount.build_topology(total=10**9, rate=200, sink=None)  # runs until stopped
    with LocalCluster(workers=2) as cluster:
        job = cluster.submit(topology, JobConfig(data_dir=tmp_path / "data", elasticity=False))
        try:
            expected: dict[int, set[str]] = {}
            for unit in ("sentences", "count", "latest"):
                for spu in job.spus(unit):
                    worker = job.worker_of(spu)
                    pid = os.getpid() if worker is None else cluster.registry.pids[worker]
                    expected.setdefault(pid, set()).add(os_thread_name(f"spu-{spu} {unit}"))
            for worker, pid in cluster.registry.pids.items():
                expected.setdefault(pid, set()).add(os_thread_name(f"endpoint-{worker}"))
            assert len([pid for pid in expected if pid != os.getpid()]) == 2, "both workers run threads of the job"
            assert any(name.startswith("spu-") for pid, names in expected.items() if pid != os.getpid()
                       for name in names), "SPUs run in the workers"
            for pid, names in expected.items():
                wait_until(lambda: names <= thread_names(pid), timeout=30,
                           message=f"threads named {sorted(names)} in process {pid}")
        finally:
            job.stop()
