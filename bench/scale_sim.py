"""What one driver costs as workers grow (issue 51): the real driver steering simulated workers.

`python bench/scale_sim.py [--workers 2 8 32 128 256] [--processes 8] [--seconds 10] [--quick]`

For each N: the real driver (LocalCluster, Job, coordinator, checkpoint coordinator, REST API, metrics) and N
simulated workers of 16 SPUs each (esault/testing/sim: the real wire, CurveZMQ, heartbeats, hand-offs,
checkpoint acks with rows written to the real checkpoint store; no data work) packed into a few processes, the
last worker alone in its own so its loss is a kill -9. Measured: the driver's CPU (cores), RSS and messages in
and out per second at idle and under a paced load (10 tuples/s an SPU); a checkpoint (trigger to complete, and
the driver's CPU during it); a merge, a split, a move, a rescale of one unit by one SPU (decision to done);
job.status(), `esault status`'s query, the REST units route, the web page's load, a metrics scrape; a worker's
loss (kill -9 to detected, to recovered). Prints a table, writes docs/results/scale_sim.json, plots each against
N (log-log, with its slope) into docs/figures/scale_*.png and the table into docs/SCALE.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from _report import write_section  # noqa: E402
from thread_cpu import thread_cpu  # noqa: E402
from esault import JobConfig  # noqa: E402
from esault.api.server import ControlApi  # noqa: E402
from esault.cluster.status import fetch_status  # noqa: E402
from esault.metrics.exporter import start_metrics_server  # noqa: E402
from esault.testing import wait_until  # noqa: E402
from esault.testing.sim import topology  # noqa: E402
from esault.testing.sim.fleet import SimFleet  # noqa: E402

RESULTS = HERE.parent / "docs" / "results" / "scale_sim.json"
FIGURES = HERE.parent / "docs" / "figures"
SCALE_DOC = HERE.parent / "docs" / "SCALE.md"
JOB = "scale"
HEARTBEAT_TIMEOUT = 30.0
"""The driver's heartbeat timeout here: 2 cores run all N simulated workers, and a rescale's SPU-to-SPU markers
(every upstream SPU to every giver) can hold a packed process's heartbeats for seconds; real workers on their
own machines would not be."""


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return math.nan


def timed(action: Callable[[], Any]) -> tuple[float, float, Any]:
    """(wall seconds, driver CPU seconds, result) of `action`."""
    cpu, wall = cpu_seconds(), time.perf_counter()
    result = action()
    return time.perf_counter() - wall, cpu_seconds() - cpu, result


BACKGROUND_THREADS = ("esault-endpoint", "ClusterActor", "ZMQbg")
"""The driver's threads that run whatever an operation does: the transport's I/O thread (every frame in and
out, heartbeats among them), libzmq's I/O thread (CurveZMQ's encryption) and the cluster actor (heartbeats,
liveness). Their CPU during a long operation is mostly the workers' heartbeats over its wall time, not the
operation's own work."""


def driver_threads() -> dict[int, tuple[str, float]]:
    """tid -> (its Python thread name, or the OS's for threads Python did not start; its CPU seconds so far)
    for this process's threads (thread_cpu.py reads /proc; the pykka actors' OS names are all "python3")."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    return {tid: (names.get(tid, os_name), cpu) for (_, tid), (os_name, cpu) in thread_cpu([os.getpid()]).items()}


def timed_work(action: Callable[[], Any]) -> tuple[float, float, float]:
    """(wall seconds, driver CPU seconds, the CPU seconds of its threads but BACKGROUND_THREADS) of `action`:
    the last is the operation's own work in the driver (the control thread, the units' and checkpoint actors)."""
    before = driver_threads()
    wall, cpu, _ = timed(action)
    work = sum(seconds - before.get(tid, ("", 0.0))[1] for tid, (name, seconds) in driver_threads().items()
               if not name.startswith(BACKGROUND_THREADS))
    return wall, cpu, max(0.0, work)


def window(fleet: SimFleet, seconds: float) -> dict[str, float]:
    """The driver's cores, RSS and messages a second over `seconds`."""
    (inn0, out0), cpu, wall = fleet.traffic.totals(), cpu_seconds(), time.perf_counter()
    time.sleep(seconds)  # a measurement window, not a synchronisation
    (inn1, out1), elapsed = fleet.traffic.totals(), time.perf_counter() - wall
    return {"cores": (cpu_seconds() - cpu) / elapsed, "rss_mb": rss_mb(), "in_per_s": (inn1 - inn0) / elapsed,
            "out_per_s": (out1 - out0) / elapsed}


def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=60) as response:
        return response.read()


def run_one(workers: int, processes: int, seconds: float, folder: Path) -> dict[str, Any]:
    row: dict[str, Any] = {"workers": workers, "spus": workers * 16}
    started = time.perf_counter()
    with SimFleet(workers, processes, folder / f"n{workers}", heartbeat_timeout=HEARTBEAT_TIMEOUT,
                  victim=True) as fleet:
        row["join_s"] = time.perf_counter() - started
        cluster = fleet.cluster
        config = JobConfig(data_dir=folder / f"n{workers}" / "data", elasticity=False, checkpoint_interval=3600.0)
        wall, _, job = timed(lambda: cluster.submit(topology.build(JOB, workers), config))
        wait_until(lambda: len(job.status()["units"]) == 1 + len(topology.COUNT_UNITS) and job.workers(), 300, message="the job started")
        row["submit_s"] = wall
        api = ControlApi(lambda: dict(cluster.jobs)).start()
        metrics = start_metrics_server("127.0.0.1", 0)
        try:
            time.sleep(min(5.0, seconds))  # settle: the start's heartbeats and acks drain
            row["idle"] = window(fleet, seconds)
            fleet.set_rate(10.0)
            time.sleep(2.0)
            row["loaded"] = window(fleet, seconds)
            row["checkpoint_s"], row["checkpoint_cpu_s"], _ = timed(lambda: job.checkpoint(timeout=120))
            row["checkpoint2_s"], row["checkpoint2_cpu_s"], row["checkpoint2_work_s"] = timed_work(
                lambda: job.checkpoint(timeout=120))
            unit = topology.COUNT_UNITS[0]
            spus = job.spus(unit)
            row["merge_s"] = timed(lambda: job.merge(unit, spus[-1], timeout=120))[0]
            row["split_s"], row["split_cpu_s"], _ = timed(lambda: job.split(unit, job.spus(unit)[0], timeout=120))
            spu = job.spus(unit)[1]
            target = next(w for w in fleet.names if w != job.worker_of(spu) and w != fleet.victim)
            row["move_s"] = timed(lambda: job.assign_resource(unit, spu, target, timeout=120))[0]
            count = len(job.spus(unit))
            row["rescale_s"], row["rescale_cpu_s"], row["rescale_work_s"] = timed_work(
                lambda: job.rescale(unit, count - 1, timeout=300))
            row["status_s"] = timed(job.status)[0]
            row["esault_status_s"] = timed(lambda: fetch_status(cluster.address, 60))[0]
            row["rest_units_s"] = timed(lambda: get(f"{api.url}/api/jobs/{JOB}/units"))[0]
            row["web_page_s"] = timed(lambda: [get(f"{api.url}{path}") for path in
                                               ("/", f"/api/jobs/{JOB}", f"/api/jobs/{JOB}/units",
                                                f"/api/jobs/{JOB}/history")])[0]
            row["scrape_s"] = timed(lambda: get(f"{metrics.url}/metrics"))[0]
            recoveries = len(job.checkpoints.stats.recoveries)
            victim = fleet.kill_victim()
            killed = time.perf_counter()
            wait_until(lambda: victim in cluster.registry.lost, 120, interval=0.01, message="the loss detected")
            row["loss_detect_s"] = time.perf_counter() - killed
            wait_until(lambda: len(job.checkpoints.stats.recoveries) > recoveries and not job.recovering,
                       300, interval=0.01, message="the job recovered")
            row["loss_recovered_s"] = time.perf_counter() - killed
            row["traffic"] = {f"{way} {kind}": n for (way, kind), n in sorted(fleet.traffic.snapshot().items())}
            job.stop()
        finally:
            api.stop()
            metrics.stop()
    return row


def slope(xs: list[float], ys: list[float]) -> float:
    """The least-squares slope of log y on log x: 1 is linear, 2 quadratic."""
    points = [(math.log(x), math.log(y)) for x, y in zip(xs, ys) if x > 0 and y > 0]
    if len(points) < 2:
        return math.nan
    mx = sum(p[0] for p in points) / len(points)
    my = sum(p[1] for p in points) / len(points)
    var = sum((p[0] - mx) ** 2 for p in points)
    return sum((p[0] - mx) * (p[1] - my) for p in points) / var if var else math.nan


METRICS: tuple[tuple[str, str, Callable[[dict], float]], ...] = (
    ("idle cores", "cores", lambda r: r["idle"]["cores"]),
    ("loaded cores", "cores", lambda r: r["loaded"]["cores"]),
    ("RSS (loaded)", "MB", lambda r: r["loaded"]["rss_mb"]),
    ("messages in/s (loaded)", "/s", lambda r: r["loaded"]["in_per_s"]),
    ("messages out/s (loaded)", "/s", lambda r: r["loaded"]["out_per_s"]),
    ("checkpoint", "s", lambda r: r["checkpoint2_s"]),
    ("checkpoint driver CPU", "s", lambda r: r["checkpoint2_cpu_s"]),
    ("checkpoint driver work", "s", lambda r: r.get("checkpoint2_work_s", math.nan)),
    ("merge", "s", lambda r: r["merge_s"]),
    ("split", "s", lambda r: r["split_s"]),
    ("move", "s", lambda r: r["move_s"]),
    ("rescale by one", "s", lambda r: r["rescale_s"]),
    ("split driver CPU", "s", lambda r: r["split_cpu_s"]),
    ("rescale driver CPU", "s", lambda r: r["rescale_cpu_s"]),
    ("rescale driver work", "s", lambda r: r.get("rescale_work_s", math.nan)),
    ("job.status()", "s", lambda r: r["status_s"]),
    ("esault status", "s", lambda r: r["esault_status_s"]),
    ("REST units", "s", lambda r: r["rest_units_s"]),
    ("web page", "s", lambda r: r["web_page_s"]),
    ("metrics scrape", "s", lambda r: r["scrape_s"]),
    ("loss detected", "s", lambda r: r["loss_detect_s"]),
    ("loss recovered", "s", lambda r: r["loss_recovered_s"]),
)


def table(rows: list[dict[str, Any]]) -> str:
    ns = [r["workers"] for r in rows]
    head = "| measure | " + " | ".join(f"{n} w / {n * 16} SPUs" for n in ns) + " | slope |"
    lines = [head, "|" + "---|" * (len(ns) + 2)]
    for name, unit, pick in METRICS:
        values = [pick(r) for r in rows]
        cells = " | ".join(f"{v:.3g}" for v in values)
        lines.append(f"| {name} ({unit}) | {cells} | {slope(ns, values):.2f} |")
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]]) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ns = [r["workers"] for r in rows]
    groups = {"scale_driver_cost.png": METRICS[:5], "scale_operations.png": METRICS[5:15],
              "scale_views.png": METRICS[15:]}
    written = []
    FIGURES.mkdir(parents=True, exist_ok=True)
    for name, metrics in groups.items():
        figure, axes = plt.subplots(figsize=(7, 4.5))
        for label, unit, pick in metrics:
            values = [pick(r) for r in rows]
            axes.loglog(ns, values, marker="o", label=f"{label} ({unit}), slope {slope(ns, values):.2f}")
        axes.set_xlabel("workers (16 SPUs each)")
        axes.legend(fontsize=7)
        axes.grid(True, which="both", alpha=0.3)
        figure.tight_layout()
        figure.savefig(FIGURES / name, dpi=110)
        plt.close(figure)
        written.append(name)
    return written


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=None, help="default 2 8 32 128 256")
    parser.add_argument("--processes", type=int, default=8, help="processes the simulated workers share")
    parser.add_argument("--seconds", type=float, default=10.0, help="each idle / loaded measurement window")
    parser.add_argument("--quick", action="store_true", help="3 s windows (2 and 8 workers unless given); "
                                                              "writes nothing")
    args = parser.parse_args()
    if args.quick:
        args.workers, args.seconds = args.workers or [2, 8], 3.0
    args.workers = args.workers or [2, 8, 32, 128, 256]
    rows = []
    with tempfile.TemporaryDirectory(prefix="esault-scale-") as tmp:
        for n in args.workers:
            print(f"--- {n} workers", flush=True)
            rows.append(run_one(n, args.processes, args.seconds, Path(tmp)))
            print(json.dumps({k: v for k, v in rows[-1].items() if k != "traffic"}, default=str), flush=True)
    markdown = table(rows)
    print(markdown)
    if args.quick:
        return 0
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"host": platform.node(), "cpus": os.cpu_count(), "rows": rows,
                                   "load_before": os.getloadavg()}, indent=1, default=str))
    figures = plot(rows)
    write_section(SCALE_DOC, "scale-sim", markdown + "\n\n" + "\n".join(
        f"![{f}](figures/{f})" for f in figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
