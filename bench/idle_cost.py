"""What SPUs cost when almost nothing flows (issue 51): CPU per idle SPU and per worker, by thread.

`python bench/idle_cost.py [--workers 8 --spus 64 --rate 10 --seconds 30]`: real worker processes
(LocalCluster(workers=W)), one spout at `rate` tuples/s into a keyed bolt with `spus` SPUs spread over the
workers; after a warm-up, every thread's CPU (from /proc) over `seconds`, grouped by what the thread does
(its OS name, esault/thread_names.py). Reports millicores per SPU and per worker, and the driver's, beside
the same cluster with no job at all (what a worker costs by itself). Writes docs/results/idle_cost.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from esault import Bolt, JobConfig, LocalCluster, Spout, TopologyBuilder  # noqa: E402
from thread_cpu import thread_cpu  # noqa: E402

RESULTS = HERE.parent / "docs" / "results" / "idle_cost.json"
GROUPS: tuple[tuple[str, Any], ...] = (
    ("bolt SPUs", lambda name: name.startswith("spu-") and name.endswith(" count")),
    ("spout SPU", lambda name: name.startswith("spu-")),
    ("tickers", lambda name: "ticker" in name),
    ("I/O (endpoint, zmq)", lambda name: name.startswith(("endpoint-", "ZMQbg"))),
    ("other threads", lambda name: True),
)


class Paced(Spout):
    """`rate` tuples/s, keys spread over `keys`, for ever (the job is stopped by the bench)."""

    def __init__(self, rate: float = 10.0, keys: int = 1000) -> None:
        self.rate, self.keys = rate, keys
        self.n = 0
        self.started = time.monotonic()

    def next_tuple(self) -> None:
        if self.n < (time.monotonic() - self.started) * self.rate:
            self.emit(f"k{self.n % self.keys}", 1)
            self.n += 1

    def snapshot_position(self) -> int:
        return self.n

    def restore_position(self, position: int) -> None:
        self.n = position
        self.started = time.monotonic() - position / self.rate


class Count(Bolt):
    def open(self, context: Any) -> None:
        self.count = 0

    def process(self, tup: Any) -> None:
        self.count += tup.value


def topology(spus: int, rate: float) -> Any:
    builder = TopologyBuilder("idle_cost")
    builder.set_spout("paced", Paced, 1, params={"rate": rate})
    builder.set_bolt("count", Count, spus, elastic=False, pe_idle_timeout=None).key_grouping("paced")
    return builder.build()


def measure(pids: list[int], seconds: float) -> dict[str, dict[str, float]]:
    """Per process group ("driver", "workers") and thread group: cores used over `seconds`."""
    before = thread_cpu(pids)
    time.sleep(seconds)  # the measuring window itself: nothing to wait on
    after = thread_cpu(pids)
    out: dict[str, dict[str, float]] = {}
    for (pid, tid), (name, used) in after.items():
        side = "driver" if pid == pids[0] else "workers"
        group = next(g for g, matches in GROUPS if matches(name))
        spent = used - before.get((pid, tid), (name, 0.0))[1]
        out.setdefault(side, {}).setdefault(group, 0.0)
        out[side][group] += spent / seconds
    return out


def run(workers: int, spus: int, rate: float, seconds: float, warmup: float) -> dict[str, Any]:
    import os

    with LocalCluster(workers=workers) as cluster:
        pids = [os.getpid(), *cluster.registry.pids.values()]
        time.sleep(warmup)  # let the pool settle (its zygote, first heartbeats): a measuring window, not a wait
        empty = measure(pids, seconds)
        job = cluster.submit(topology(spus, rate), JobConfig(data_dir=Path("/tmp/esault-idle-cost"), elasticity=False,
                                                            fresh_start=True))
        time.sleep(warmup)
        loaded = measure(pids, seconds)
        placed = {w: len(s) for w, s in cluster.registry.spus_on.items()}
        job.stop()
    worker_cores = sum(loaded.get("workers", {}).values())
    empty_cores = sum(empty.get("workers", {}).values())
    return {
        "workers": workers, "spus": spus, "rate": rate, "seconds": seconds, "placed": placed,
        "no_job": empty, "job": loaded,
        "mc_per_worker_no_job": 1000 * empty_cores / workers,
        "mc_per_worker": 1000 * worker_cores / workers,
        "mc_per_spu": 1000 * (worker_cores - empty_cores) / spus,
        "mc_per_spu_bolt_threads": 1000 * loaded.get("workers", {}).get("bolt SPUs", 0.0) / spus,
        "driver_cores": sum(loaded.get("driver", {}).values()),
    }


def report(result: dict[str, Any]) -> None:
    print(f"\n{result['workers']} workers x {result['spus']} SPUs at {result['rate']:g} tuples/s, "
          f"{result['seconds']:g} s windows")
    print("| where | no job (cores) | job (cores) |")
    print("|---|---:|---:|")
    for side in ("workers", "driver"):
        for group, _ in GROUPS:
            a = result["no_job"].get(side, {}).get(group, 0.0)
            b = result["job"].get(side, {}).get(group, 0.0)
            if a or b:
                print(f"| {side}: {group} | {a:.3f} | {b:.3f} |")
    print(f"\nper SPU {result['mc_per_spu']:.2f} mc (its own thread {result['mc_per_spu_bolt_threads']:.2f} mc); "
          f"per worker {result['mc_per_worker']:.2f} mc with the job, {result['mc_per_worker_no_job']:.2f} mc "
          f"without; driver {result['driver_cores']:.3f} cores")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--spus", type=int, default=64)
    parser.add_argument("--rate", type=float, default=10.0)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    result = run(args.workers, args.spus, args.rate, args.seconds, args.warmup)
    result.update(python=platform.python_version(), date=time.strftime("%Y-%m-%d"))
    report(result)
    if not args.no_write:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
