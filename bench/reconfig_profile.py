"""Where a large live move spends its time: py-spy on the worker processes, steady state against 50% moves.

    python bench/reconfig_profile.py [--moves 3] [--fraction 0.5]

The job of bench/reconfiguration.py (a keyed count, 4 SPUs on 2 worker processes, 20,000 tuples/s). py-spy
records both workers for 6 s of steady state, then for 6 s in which `moves` assign_workload operations each
move `fraction` of the key space. Prints, per window, the samples of the SPU threads in the hand-off
(giver: take the PEs, snapshot and encode their state, send it) and in installing it (receiver), against
processing batches; writes the table to docs/results/reconfig_profile.md. Needs py-spy (pip install py-spy).
"""

from __future__ import annotations

import argparse
import collections
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import reconfiguration as rc  # noqa: E402
from esault import JobConfig, LocalCluster  # noqa: E402

RATE_HZ = 200
WINDOW_S = 6
PARTS = {  # label -> frames whose inclusive samples it counts
    "processing batches": ("process_data",),
    "giver: hand-off (take PEs, snapshot, encode, send)": ("give",),
    "receiver: install moved state": ("_on_state",),
}


def record(pids: list[int], out: Path, tag: str) -> list[subprocess.Popen]:
    return [subprocess.Popen(["py-spy", "record", "-p", str(pid), "-d", str(WINDOW_S), "-r", str(RATE_HZ), "-f", "raw",
                              "--nonblocking", "-o", str(out / f"{tag}-{pid}.txt")],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for pid in pids]


def summarise(files: list[Path]) -> dict[str, float]:
    """Seconds of SPU-thread time per part (inclusive), from py-spy's collapsed stacks."""
    seconds: collections.Counter[str] = collections.Counter()
    for path in files:
        for line in path.read_text().splitlines():
            stack, _, n = line.rpartition(" ")
            if "BoltSpuActor" not in stack:
                continue
            funcs = {re.sub(r" \(.*", "", f).split(".")[-1] for f in stack.split(";")}
            seconds["all SPU-thread time"] += int(n) / RATE_HZ
            for label, frames in PARTS.items():
                if funcs & set(frames):
                    seconds[label] += int(n) / RATE_HZ
    return dict(seconds)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--moves", type=int, default=3)
    parser.add_argument("--fraction", type=float, default=0.5)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    if shutil.which("py-spy") is None:
        print("py-spy is needed: pip install py-spy", file=sys.stderr)
        return 2
    out = Path(tempfile.mkdtemp(prefix="esault-reconfig-profile-"))
    name = f"prof-{int(time.time())}"
    config = JobConfig(data_dir=out / "data", elasticity=False, checkpoint_interval=5.0)
    rnd, pause, results = random.Random(3), threading.Event(), []
    with LocalCluster(workers=2) as cluster:
        job = cluster.submit(rc.build(name, 20_000, time.time() + 2.0, 20_000 * 120, 4, 20_000), config)
        pause.wait(8.0)  # warm-up (a duration, not synchronisation)
        pids = [p.pid for p in cluster.pool.processes]
        for p in record(pids, out, "steady"):
            p.wait()
        recorders = record(pids, out, "moves")
        for _ in range(args.moves):
            pause.wait(0.5)
            lo, hi = rc.moved_range(rnd, args.fraction)
            results.append(job.assign_workload("count", rc.hand_to_next(job.workload("count"), lo, hi)))
        for p in recorders:
            p.wait()
        job.stop()
    steady = summarise(sorted(out.glob("steady-*.txt")))
    moves = summarise(sorted(out.glob("moves-*.txt")))
    keys = sum(r.moved_keys for r in results)
    lines = [f"`python bench/reconfig_profile.py --moves {args.moves} --fraction {args.fraction}`: py-spy at "
             f"{RATE_HZ} Hz on both workers, {WINDOW_S} s windows; {args.moves} moves of {args.fraction:.0%} "
             f"({keys:,} keys in all; each {', '.join(f'{r.seconds * 1000:.0f} ms' for r in results)}, moved keys "
             f"paused {', '.join(f'{r.paused_seconds * 1000:.0f} ms' for r in results)}).", "",
             "| SPU-thread seconds in | steady window | window with the moves |", "| --- | ---: | ---: |"]
    for label in ["all SPU-thread time", *PARTS]:
        lines.append(f"| {label} | {steady.get(label, 0):.2f} | {moves.get(label, 0):.2f} |")
    per_key = (moves.get(list(PARTS)[1], 0) + moves.get(list(PARTS)[2], 0)) / max(keys, 1) * 1e6
    lines += ["", f"Hand-off and install together: {per_key:.0f} us of SPU-thread time per moved key."]
    text = "\n".join(lines)
    print(text)
    if not args.no_write:
        target = ROOT / "docs" / "results" / "reconfig_profile.md"
        target.write_text(text + "\n")
        print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
