"""Benchmark: capacity that follows the splits on a real Ray autoscaling cluster (issue 50's figures).

    python bench/ray_elastic.py            # ~6 minutes: the timings (3 of each), then a 120 s step load
    python bench/ray_elastic.py --quick    # ~3 minutes smoke run (figures to a temp folder, no doc update)

Ray's own local autoscaling cluster (esault.testing.ray_cluster: a head with no CPU, 0..3 nodes of 1 CPU,
idle nodes removed after 6 s), and a driver whose only source of workers is Ray (LocalCluster(ray=...), one
counter SPU a worker unless said otherwise). The workload is bench/elastic.py's: a Zipf word stream into a
keyed counter whose per-tuple lookup releases the GIL, the spout and the latency meter in the driver.

1. Timings, each `--reps` times: a split that needs a new node (decision to the split done, and to the new
   SPU's first processed tuple), the same split onto an existing worker that has room (2 SPUs a worker),
   and a merge's giving back (merge to the worker released, and to Ray's autoscaler removing its node).
2. A step load under the built-in LatencyController (elasticity on): p99 latency, the counter's SPU count and
   the Ray nodes alive, per second, plotted.

Writes docs/figures/ray_elastic.csv, docs/figures/ray_elastic.png, docs/results/ray_elastic.json and the
section between <!-- bench:ray-elastic:start --> and <!-- bench:ray-elastic:end --> of docs/ELASTICITY.md.
The counter runs at_least_once, as in bench/elastic.py (its profile spout cannot rewind).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from esault.testing.ray_cluster import ray_cluster, use_loopback  # noqa: E402

use_loopback()  # before anything imports ray

import elastic_common as ec  # noqa: E402
from _report import write_section  # noqa: E402

from esault import JobConfig, LocalCluster  # noqa: E402
from esault.testing import wait_until  # noqa: E402

SECTION = "ray-elastic"
MAX_NODES = 3
RESULTS = ROOT / "docs" / "results" / "ray_elastic.json"


def on_ray(address: str, spus_per_worker: int, **kwargs: Any) -> LocalCluster:
    return LocalCluster(ray=address, spus_per_worker=spus_per_worker, heartbeat_timeout=10.0,
                        worker_wait=120.0, release_after=2.0, **kwargs)


def host_of(cluster: LocalCluster, spu: int) -> str:
    return next(w for w, spus in cluster.registry.spus_on.items() if spu in spus)


def processed(job: Any, spu: int) -> int:
    return job.status()["units"][ec.COUNTER]["spus"].get(spu, {}).get("processed", 0)


def timings(address: str, ray_nodes: Any, workload: ec.Workload, reps: int, log: Callable[[str], None]
            ) -> dict[str, list[float]]:
    """Each rep: a split onto a new node and its merge giving the node back; then splits onto a worker with
    room. Seconds from the call to each milestone."""
    out: dict[str, list[float]] = {"split_new_node_done": [], "split_new_node_processing": [],
                                   "merge_worker_released": [], "merge_node_removed": [],
                                   "split_existing_done": [], "split_existing_processing": []}
    profile = ec.Profile(cycle_seconds=1.0, cycles=1, peak_rate=400.0, trough_rate=400.0, steps=1,
                         warmup_seconds=3600.0)  # a constant 400/s for as long as the timings take
    for spus_per_worker, kind in ((1, "new_node"), (2, "existing")):
        run = f"timings-{kind}-{time.monotonic_ns()}"
        state = ec.RunState(profile, ec.zipf_words(workload))
        ec.RUNS[run] = state
        topology = ec.build_topology(run, workload, 1, elastic=False)
        with tempfile.TemporaryDirectory(prefix="esault-ray-elastic-") as data_dir, \
                on_ray(address, spus_per_worker) as cluster:
            state.t0 = time.monotonic()
            job = cluster.submit(topology, JobConfig(data_dir=Path(data_dir), elasticity=False,
                                                     guarantee="at_least_once", tick_interval=workload.tick_interval))
            (first,) = job.spus(ec.COUNTER)
            wait_until(lambda: processed(job, first) > 0, 120, message="the counter processing")
            for rep in range(reps):
                nodes = ray_nodes.alive_nodes()
                started = time.monotonic()
                (new,) = job.split(ec.COUNTER, first, timeout=150).started
                done = time.monotonic()
                wait_until(lambda: processed(job, new) > 0, 60, interval=0.01, message="the new SPU processing")
                working = time.monotonic()
                out[f"split_{kind}_done"].append(done - started)
                out[f"split_{kind}_processing"].append(working - started)
                worker = host_of(cluster, new)
                log(f"  {kind}: split {rep + 1} onto {worker} done {done - started:.2f} s, processing "
                    f"{working - started:.2f} s")
                merged = time.monotonic()
                job.merge(ec.COUNTER, new)
                if kind == "new_node":
                    wait_until(lambda: worker not in cluster.registry.workers, 60, interval=0.05,
                               message="the idle worker given back")
                    released = time.monotonic()
                    wait_until(lambda: ray_nodes.alive_nodes() <= nodes,
                               120, interval=0.2, message="its node removed by Ray's autoscaler")
                    removed = time.monotonic()
                    out["merge_worker_released"].append(released - merged)
                    out["merge_node_removed"].append(removed - merged)
                    log(f"  {kind}: merge {rep + 1}: worker released {released - merged:.2f} s, node removed "
                        f"{removed - merged:.2f} s")
            job.stop()
        ec.RUNS.pop(run, None)
    return out


def step_load(address: str, ray_nodes: Any, profile: ec.Profile, workload: ec.Workload) -> ec.RunResult:
    return ec.run_profile("ray", profile, workload, parallelism=1, elastic=True,
                          cluster=lambda: on_ray(address, 1), sample=lambda: {"nodes": ray_nodes.alive_nodes()})


def plot(result: ec.RunResult, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result.rows
    t = [r["t"] for r in rows]
    fig, (top, mid, low) = plt.subplots(3, 1, figsize=(9, 7.5), sharex=True)
    top.plot(t, [r["offered_rate"] for r in rows], label="offered", color="grey")
    top.plot(t, [r["processed_rate"] for r in rows], label="processed", color="tab:blue")
    top.set_ylabel("tuples/s")
    top.legend(loc="upper right")
    mid.plot(t, [r["latency_p99_ms"] if r["latency_p99_ms"] != "" else float("nan") for r in rows],
             color="tab:red", label="p99")
    mid.set_yscale("log")
    mid.set_ylabel("p99 latency (ms)")
    mid.axhline(workload_max_ms(result), color="tab:red", linestyle=":", linewidth=1, label="max_latency")
    mid.legend(loc="upper right")
    low.step(t, [r["spus"] for r in rows], where="post", label="counter SPUs", color="tab:green")
    low.step(t, [r.get("nodes", 0) for r in rows], where="post", label="Ray nodes alive", color="tab:purple",
             linestyle="--")
    low.set_ylabel("count")
    low.set_xlabel("seconds")
    low.legend(loc="upper right")
    for ax in (top, mid, low):
        ec.shade_phases(ax, result.profile)
    fig.suptitle("Step load on a Ray autoscaling cluster: splits ask Ray for nodes, merges give them back")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def workload_max_ms(result: ec.RunResult) -> float:
    return float(result.workload.elasticity["max_latency"]) * 1000


def summary(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def report(times: dict[str, list[float]], result: ec.RunResult, cmd: str, figure: str) -> str:
    rows = result.rows
    lat = ec.latency_summary(result.latencies)
    peak_nodes = max((r.get("nodes", 0) for r in rows), default=0)
    end_nodes = rows[-1].get("nodes", 0) if rows else 0
    splits = sum(1 for e in result.events if e.action == "split")
    merges = sum(1 for e in result.events if e.action == "merge")
    peak_done = statistics.median([r["processed_rate"] for r in rows if r["phase"].startswith("peak")] or [0])
    max_lag = max((r["lag_s"] for r in rows), default=0.0)
    lines = [
        "### On a Ray autoscaling cluster (issue 50)",
        "",
        f"`{cmd}` on {ec.machine_line()}. Ray's local autoscaling cluster: a head with no CPU, 0..{MAX_NODES} "
        "nodes of 1 CPU added for pending actors and removed after 6 s idle; the driver's only workers are Ray "
        "actors (`LocalCluster(ray=...)`, `release_after=2`).",
        "",
        "| seconds from the call (median, min-max) | |",
        "|---|---:|",
        f"| split onto a new node: done | {summary(times['split_new_node_done'])} |",
        f"| split onto a new node: the new SPU processing | {summary(times['split_new_node_processing'])} |",
        f"| split onto an existing worker with room: done | {summary(times['split_existing_done'])} |",
        f"| split onto an existing worker: the new SPU processing | {summary(times['split_existing_processing'])} |",
        f"| merge: its idle worker given back (release_after 2 s) | {summary(times['merge_worker_released'])} |",
        f"| merge: Ray's autoscaler removed the node | {summary(times['merge_node_removed'])} |",
        "",
        "\"Processing\" is when the driver sees the new SPU's first tuple counted: from the worker's heartbeat, "
        "one every 0.2 s, so it is up to 0.2 s late.",
        "",
        f"Step load ({result.profile.describe()}), the LatencyController on (max_latency "
        f"{workload_max_ms(result):.0f} ms, one SPU a worker): {splits} split(s), {merges} merge(s); Ray nodes "
        f"alive at most {peak_nodes}, at the end {end_nodes}; p50 {lat['p50_ms']:.1f} ms, p99 "
        f"{lat['p99_ms']:.1f} ms, max {lat['max_ms']:.0f} ms over {len(result.latencies):,} tuples.",
        "",
        f"![ray_elastic.png]({figure})",
        "",
        "A split that needs a node waits for Ray to place its actor (the autoscaler starts a raylet, the actor's "
        "process imports esault and joins the driver over CurveZMQ); the split onto a worker with room is the "
        f"hand-off alone. At the peak the counter processed {peak_done:,.0f} tuples/s of the "
        f"{result.profile.peak_rate:,.0f} offered (the median over the hold), its backlog up to {max_lag:.1f} s "
        "of input: its SPUs run on Ray nodes that share this machine's 2 cores with the head, the autoscaler and "
        "the driver, so p99 stays above max_latency until the backlog drains in the fall.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ec.add_common_args(parser, cycle_seconds=120.0, cycles=1, quick_cycle=40.0, quick_cycles=1, quick_warmup=3.0)
    parser.add_argument("--reps", type=int, default=3, help="timings of each kind (default 3; --quick: 1)")
    parser.set_defaults(peak_rate=2000.0, el_max_spus=MAX_NODES)
    args = parser.parse_args(argv)
    profile, workload, out, write = ec.resolve_args(args)
    reps = 1 if args.quick and "--reps" not in argv else args.reps
    print(profile.describe())
    with ray_cluster(max_nodes=MAX_NODES) as ray_nodes:
        import ray

        ray.init(address=ray_nodes.address, namespace="esault")  # this process's: each cluster below shares it
        print(f"Ray cluster at {ray_nodes.address}")
        times = timings(ray_nodes.address, ray_nodes, workload, reps, print)
        wait_until(lambda: ray_nodes.alive_nodes() == 0, 120, interval=0.5, message="every node removed")
        result = step_load(ray_nodes.address, ray_nodes, profile, workload)
        wait_until(lambda: ray_nodes.alive_nodes() == 0, 120, interval=0.5, message="every node removed at the end")
    csv_path, png = out / "ray_elastic.csv", out / "ray_elastic.png"
    ec.write_csv(csv_path, result.rows, ec.ROW_FIELDS + ["nodes"])
    plot(result, png)
    print(f"\n{'timing':<30} {'median s':>9} {'min':>6} {'max':>6}")
    for name, values in times.items():
        if values:
            print(f"{name:<30} {statistics.median(values):>9.2f} {min(values):>6.2f} {max(values):>6.2f}")
    ec_summary = ec.latency_summary(result.latencies)
    print(f"step load: p99 {ec_summary['p99_ms']:.1f} ms, SPUs at most {max(r['spus'] for r in result.rows)}, "
          f"nodes at most {max(r.get('nodes', 0) for r in result.rows)}, at the end {result.rows[-1].get('nodes')}")
    print(f"wrote {csv_path}, {png}")
    if write:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps({"timings": times, "step_load": {
            "latency": ec_summary, "events": [ec.as_dict(e) for e in result.events],
            "final": result.final}}, indent=1, default=str) + "\n")
        figure = str(png.resolve().relative_to(ec.DOC.parent.resolve()))
        write_section(ec.DOC, SECTION, report(times, result, ec.command_line(argv, "ray_elastic.py"), figure))
        print(f"updated {ec.DOC} section {SECTION!r} and {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
