"""What the driver's operations take with real worker processes (issue 51: no real-worker figure may get worse).

    python bench/real_driver.py [--workers 8 16] [--checkpoints 5] [--label NAME]

For each N: a local pool of N real worker processes, the simulation's topology on them (a paced source, one SPU
a worker, into key-grouped counts: 4 SPUs a worker here, so 5 SPUs a worker in all at 10 tuples/s each), and the
driver's operations timed from the call to done: `--checkpoints` checkpoints (the median), a rescale of one unit
by one SPU, a split, and a worker killed with SIGKILL (to detected, to recovered). Prints a table and writes its
figures to docs/results/real_driver[-LABEL].json. Run it on two checkouts one right after the other
(PYTHONPATH=that checkout) to compare them: the machine's speed drifts between sessions.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from esault import JobConfig, LocalCluster  # noqa: E402
from esault.testing import wait_until  # noqa: E402
from esault.testing.sim import topology  # noqa: E402

RESULTS = HERE.parent / "docs" / "results"
HEARTBEAT_TIMEOUT = 5.0


def recovering(job: Any) -> bool:
    """Job.recovering (a checkout from before it was public: its counter)."""
    return bool(getattr(job, "recovering", None) if hasattr(type(job), "recovering") else job._recovering)


def run_one(workers: int, checkpoints: int, folder: Path) -> dict[str, Any]:
    row: dict[str, Any] = {"workers": workers}
    with LocalCluster(workers=workers, heartbeat_timeout=HEARTBEAT_TIMEOUT) as cluster:
        config = JobConfig(data_dir=folder / f"n{workers}", elasticity=False, checkpoint_interval=3600.0)
        started = time.perf_counter()
        job = cluster.submit(topology.build("real", workers, counts_per_worker=4), config)
        wait_until(lambda: all(u.get("spus") for u in job.status()["units"].values()), 120,
                   message="every unit's SPUs started")
        row["submit_s"] = time.perf_counter() - started
        times = []
        for _ in range(checkpoints):
            started = time.perf_counter()
            assert job.checkpoint(timeout=60) is not None, "a checkpoint failed"
            times.append(time.perf_counter() - started)
        row["checkpoint_s"] = statistics.median(times)
        unit = topology.COUNT_UNITS[0]
        started = time.perf_counter()
        job.rescale(unit, len(job.spus(unit)) + 1, timeout=120)
        row["rescale_s"] = time.perf_counter() - started
        started = time.perf_counter()
        job.split(unit, job.spus(unit)[0], timeout=120)
        row["split_s"] = time.perf_counter() - started
        victim = next(w for w, spus in cluster.registry.spus_on.items() if spus)
        recoveries = len(job.checkpoints.stats.recoveries)
        os.kill(cluster.registry.pids[victim], signal.SIGKILL)
        killed = time.perf_counter()
        wait_until(lambda: victim in cluster.registry.lost, 60, interval=0.01, message="the loss detected")
        row["loss_detect_s"] = time.perf_counter() - killed
        wait_until(lambda: len(job.checkpoints.stats.recoveries) > recoveries and not recovering(job), 120,
                   interval=0.01, message="the job recovered")
        row["loss_recovered_s"] = time.perf_counter() - killed
        job.stop()
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[8, 16])
    parser.add_argument("--checkpoints", type=int, default=5)
    parser.add_argument("--label", default="")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="esault-real-driver-") as tmp:
        for n in args.workers:
            rows.append(run_one(n, args.checkpoints, Path(tmp)))
            print(json.dumps(rows[-1]), flush=True)
    columns = ("submit_s", "checkpoint_s", "rescale_s", "split_s", "loss_detect_s", "loss_recovered_s")
    print("| workers | " + " | ".join(columns) + " |")
    print("|---" * (len(columns) + 1) + "|")
    for row in rows:
        print(f"| {row['workers']} | " + " | ".join(f"{row[c]:.3f}" for c in columns) + " |")
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"real_driver{'-' + args.label if args.label else ''}.json"
    out.write_text(json.dumps({"heartbeat_timeout": HEARTBEAT_TIMEOUT, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
