"""Where a benchmark's CPU goes, by thread: each thread's CPU read from /proc, summed per group of OS names.

The threads are named for what they do (esault/thread_names.py), so a run's CPU splits into the count SPUs,
the spouts, the snapshot writers, the I/O threads and the driver's control thread, and a mode's cost shows
where it is paid, measured inside the run (the machine's drift between runs does not enter it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from throughput import stat_cpu_seconds

THREAD_GROUPS: tuple[tuple[str, Callable[[str], bool]], ...] = (
    ("count SPUs", lambda name: name.startswith("spu-") and name.endswith(" count")),
    ("spout SPUs (the split chained in)", lambda name: name.startswith("spu-") and name.endswith(" lines")),
    ("snapshot writers", lambda name: name.startswith("snapshots-")),
    ("I/O threads (endpoints, zmq)", lambda name: name.startswith(("endpoint-", "ZMQbg"))),
    ("the driver's control thread (coordinator, compaction)", lambda name: name == "control"),
    ("every other thread", lambda name: True),
)
"""How the threads' OS names (esault/thread_names.py) sort their CPU: the first group that matches."""


def thread_cpu(pids: list[int]) -> dict[tuple[int, int], tuple[str, float]]:
    """(pid, tid) -> (the thread's OS name, its CPU seconds so far) for every thread of these processes."""
    out = {}
    for pid in pids:
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                out[(pid, int(task.name))] = ((task / "comm").read_text().strip(), stat_cpu_seconds(task / "stat"))
            except OSError:  # a thread that ended meanwhile
                continue
    return out


def cpu_by_group(before: dict, after: dict, words: int) -> dict[str, float]:
    """Each THREAD_GROUPS group's CPU over the run, in ns per word (threads new in the run count whole)."""
    groups = {group: 0.0 for group, _ in THREAD_GROUPS}
    for key, (name, seconds) in after.items():
        used = seconds - before.get(key, (name, 0.0))[1]
        group = next(group for group, matches in THREAD_GROUPS if matches(name))
        groups[group] += used / words * 1e9
    return groups


def checkpoint_work_share(threads: dict[str, float], snapshot_us: int, words: int) -> float:
    """What the run's checkpoints cost measured inside the run, immune to the machine's speed between runs:
    the SPU threads' time encoding snapshots (stats.snapshot_us) plus the snapshot writers' CPU, as a share of
    every thread's CPU (ns per word, from cpu_by_group)."""
    encoding = snapshot_us * 1000 / words
    return (encoding + threads["snapshot writers"]) / sum(threads.values())
