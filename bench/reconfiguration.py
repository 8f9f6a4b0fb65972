"""What a live reconfiguration costs, against stop-with-savepoint-and-restart (Trisk's comparison).

    python bench/reconfiguration.py [--rate 20000 | --load 0.7] [--reps 8] [--no-write]

A keyed count on 2 worker processes (4 SPUs) fed at a fixed rate; every tuple's latency is recorded in
the driver (bench/reconfig_parts.py). Then:

1. assign_workload moving 1%, 10% and 50% of the key space (a contiguous hash range handed from its
   owners to the next SPU), `reps` times each, 1.5 s apart: the operation's time, the pause of the
   moved keys (the longest a held tuple waited), and the latency (p50/p99) during each operation of
   tuples whose key moved and of tuples whose key did not, against the steady state.
2. The same job rescaled by the other means: a savepoint that stops it, then a restart from the
   savepoint with 5 count SPUs instead of 4. The output gap and the latency of the tuples that were
   due while it was down.
Prints tables and writes docs/PERFORMANCE.md's "reconfiguration" section and
docs/results/reconfiguration.json.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "bench"), str(ROOT)]

import reconfig_parts  # noqa: E402
from _report import write_section  # noqa: E402

from esault import KEY_SPACE_MAX, JobConfig, LocalCluster, TopologyBuilder  # noqa: E402
from esault.routing import IntervalTable  # noqa: E402

FRACTIONS = (0.01, 0.10, 0.50)


def build(name: str, rate: float, t0: float, total: int, spus: int, keys: int):
    b = TopologyBuilder(name)
    b.set_spout("src", reconfig_parts.DueSpout, params={"keys": keys, "rate": rate, "t0": t0, "total": total},
                max_pending=4000)
    b.set_bolt("count", reconfig_parts.CountBolt, spus, elastic=False, pe_idle_timeout=None).key_grouping("src")
    b.set_bolt("sink", reconfig_parts.LatencySink, params={"name": name, "rate": rate, "t0": t0},
               elastic=False).global_grouping("count")
    return b.build()


def moved_range(rnd: random.Random, fraction: float) -> tuple[int, int]:
    width = int(fraction * (KEY_SPACE_MAX + 1))
    lo = rnd.randrange(0, KEY_SPACE_MAX + 1 - width)
    return lo, lo + width - 1


def hand_to_next(workload: dict[int, list[tuple[int, int]]], lo: int, hi: int) -> dict[int, list]:
    """The workload with hashes [lo, hi] given to the SPU after their owner (in SPU id order)."""
    spus = sorted(workload)
    following = {s: spus[(i + 1) % len(spus)] for i, s in enumerate(spus)}
    table = IntervalTable.from_assignment(workload)
    out: dict[int, list] = {}
    for start, end, spu in table.intervals():
        pieces = [(start, min(end, lo - 1), spu), (max(start, lo), min(end, hi), following[spu]),
                  (max(start, hi + 1), end, spu)]
        for a, b, owner in pieces:
            if a <= b:
                out.setdefault(owner, []).append((a, b))
    return out


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def sustainable_rate(keys: int, total: int = 300_000) -> float:
    """Tuples/s this job carries with its source unpaced (every tuple due at once): what --load scales."""
    name = f"reconf-max-{int(time.time())}"
    config = JobConfig(data_dir=Path(tempfile.mkdtemp(prefix="esault-reconf-")), elasticity=False,
                       checkpoint_interval=5.0)
    with LocalCluster(workers=2) as cluster:
        started = time.time()
        job = cluster.submit(build(name, 1e12, started, total, 4, keys), config)
        if not job.wait(300):
            raise RuntimeError(f"the unpaced run did not finish: {job.status()}")
        took = time.time() - started
        job.stop()
    return total / took


def run(rate: float, reps: int, keys: int) -> dict:
    name = f"reconf-{int(time.time())}"
    data = Path(tempfile.mkdtemp(prefix="esault-reconf-"))
    t0 = time.time() + 2.0
    total = int(rate * 600)
    rnd = random.Random(7)
    ops: list[dict] = []
    config = JobConfig(data_dir=data, elasticity=False, checkpoint_interval=5.0)
    with LocalCluster(workers=2) as cluster:
        job = cluster.submit(build(name, rate, t0, total, 4, keys), config)
        pause = threading.Event()
        pause.wait(8.0)  # warm-up: a steady state to compare with (a duration, not synchronisation)
        steady_from = time.time() - 4.0
        for fraction in FRACTIONS:
            for _ in range(reps):
                pause.wait(1.5)
                lo, hi = moved_range(rnd, fraction)
                began = time.time()
                result = job.assign_workload("count", hand_to_next(job.workload("count"), lo, hi))
                ops.append({"fraction": fraction, "lo": lo, "hi": hi, "began": began, "ended": time.time(),
                            "ms": result.seconds * 1000, "pause_ms": result.paused_seconds * 1000,
                            "moved_keys": result.moved_keys})
        pause.wait(1.5)
        before_restart = time.time()
        epoch = job.savepoint(stop=True, timeout=120)
        job.stop()
        stopped = time.time()
        job2 = cluster.submit(build(name, rate, t0, total, 5, keys),
                              config.replace(restore_from=epoch))
        submitted = time.time()
        pause.wait(8.0)
        records = reconfig_parts.records(name)
        job2.stop()
    return analyse(records, ops, steady_from, before_restart, stopped, submitted, epoch)


def analyse(records, ops, steady_from, before_restart, stopped, submitted, epoch) -> dict:
    windows = [(op["began"], op["ended"] + 0.3) for op in ops]
    steady = [lat for at, lat, _ in records if steady_from <= at < ops[0]["began"]]
    steady += [lat for at, lat, _ in records
               if ops[0]["began"] <= at < before_restart and not any(a <= at <= b for a, b in windows)]
    by_fraction: dict[float, dict] = {}
    for fraction in FRACTIONS:
        mine = [op for op in ops if op["fraction"] == fraction]
        moved, still = [], []
        for op in mine:
            for at, lat, h in records:
                if op["began"] <= at <= op["ended"] + 0.3:
                    (moved if op["lo"] <= h <= op["hi"] else still).append(lat)
        by_fraction[fraction] = {
            "ms_p50": pct([o["ms"] for o in mine], 0.5), "ms_p99": pct([o["ms"] for o in mine], 0.99),
            "pause_ms_p50": pct([o["pause_ms"] for o in mine], 0.5),
            "pause_ms_p99": pct([o["pause_ms"] for o in mine], 0.99),
            "moved_keys": statistics.median(o["moved_keys"] for o in mine),
            "moved_lat_ms": (pct(moved, 0.5) * 1000, pct(moved, 0.99) * 1000) if moved else None,
            "still_lat_ms": (pct(still, 0.5) * 1000, pct(still, 0.99) * 1000) if still else None,
        }
    last_before = max((at for at, _, _ in records if at < stopped), default=None)
    first_after = min((at for at, _, _ in records if at > stopped), default=None)
    after = [lat for at, lat, _ in records if first_after is not None and first_after <= at <= first_after + 5]
    return {
        "steady_lat_ms": (pct(steady, 0.5) * 1000, pct(steady, 0.99) * 1000),
        "ops": by_fraction,
        "restart": {"savepoint_epoch": epoch, "stop_ms": (stopped - before_restart) * 1000,
                    "output_gap_ms": (first_after - last_before) * 1000 if first_after and last_before else None,
                    "submit_ms": (submitted - stopped) * 1000,
                    "lat_ms_after": (pct(after, 0.5) * 1000, pct(after, 0.99) * 1000, max(after) * 1000)
                    if after else None},
    }


def fmt(pair) -> str:
    return "-" if pair is None else " / ".join(f"{v:,.1f}" for v in pair)


def report(result: dict, rate: float, reps: int, note: str = "") -> str:
    steady = result["steady_lat_ms"]
    lines = [
        f"Measured with `python bench/reconfiguration.py` on this 2-core machine: a keyed count (4 SPUs on 2 "
        f"worker processes) fed {rate:,.0f} tuples/s{note}, latency = arrival at a sink in the driver - the tuple's "
        f"due time. Steady-state latency p50 / p99: {fmt(steady)} ms.",
        "",
        f"assign_workload moving a contiguous hash range ({reps} times per size, 1.5 s apart):",
        "",
        "| key space moved | keys moved (median) | operation p50 / p99 | pause of moved keys p50 / p99 | "
        "latency of moved keys p50 / p99 | latency of other keys p50 / p99 |",
        "| ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for fraction, row in result["ops"].items():
        lines.append(f"| {fraction:.0%} | {row['moved_keys']:,.0f} | {fmt((row['ms_p50'], row['ms_p99']))} ms | "
                     f"{fmt((row['pause_ms_p50'], row['pause_ms_p99']))} ms | {fmt(row['moved_lat_ms'])} ms | "
                     f"{fmt(row['still_lat_ms'])} ms |")
    r = result["restart"]
    lines += [
        "",
        "The same rescale by stop-with-savepoint and restart (4 -> 5 count SPUs, restored from the savepoint):",
        "",
        "| savepoint and stop | submit and restore | output gap | latency after restart p50 / p99 / max |",
        "| ---: | ---: | ---: | ---: |",
        f"| {r['stop_ms']:,.0f} ms | {r['submit_ms']:,.0f} ms | "
        f"{'-' if r['output_gap_ms'] is None else format(r['output_gap_ms'], ',.0f')} ms | "
        f"{fmt(r['lat_ms_after'])} ms |",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=20_000, help="tuples/s (ignored with --load)")
    parser.add_argument("--load", type=float, default=None,
                        help="feed this fraction of the rate the job sustains unpaced (measured first), e.g. 0.7")
    parser.add_argument("--reps", type=int, default=8)
    parser.add_argument("--keys", type=int, default=20_000)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    rate, note = args.rate, ""
    if args.load is not None:
        most = sustainable_rate(args.keys)
        rate = args.load * most
        note = f" ({args.load:.0%} of the {most:,.0f} tuples/s it sustained unpaced in the same run)"
    result = run(rate, args.reps, args.keys)
    text = report(result, rate, args.reps, note)
    print(text)
    if not args.no_write:
        (ROOT / "docs" / "results").mkdir(parents=True, exist_ok=True)
        (ROOT / "docs" / "results" / "reconfiguration.json").write_text(json.dumps(result, indent=2, default=str))
        write_section(ROOT / "docs" / "PERFORMANCE.md", "reconfiguration",
                      "## Live reconfiguration against savepoint and restart\n\n" + text)


if __name__ == "__main__":
    main()
