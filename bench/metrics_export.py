"""What exporting the workers' SPUs from the driver's /metrics costs, and how old the values are.

With worker processes the driver is the one scrape target: each worker's heartbeat carries its
SPUs' counters and gauges, the driver keeps the last row per SPU (WorkerRegistry) and its
SpuStatsCollector exports the rows of live SPUs at each scrape (docs/OBSERVABILITY.md). Measured in
one run:

* scrape cost against the number of SPUs: generate_latest() over the collector when the N SPUs are
  this process's own (StatsRegistry, as in --cluster threads) and when they come from heartbeats
  (WorkerRegistry.live_stats, 4 workers), as a ratio;
* what the heartbeat costs: encoded bytes per SPU row and the driver's time to take one beat in;
* staleness: the gaps between heartbeat arrivals at a real driver with 2 spawned workers running a
  topology (a scraped value is as old as the time since its worker's last beat, plus transit).

Writes docs/results/metrics.md between <!-- bench:metrics:start --> and <!-- bench:metrics:end -->
(--no-write to skip).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's esault, not an installed one
from _report import write_section  # noqa: E402

from esault.cluster.processes import WorkerRegistry  # noqa: E402
from esault.cluster.worker import HEARTBEAT_INTERVAL  # noqa: E402
from esault.metrics.collector import SpuStatsCollector  # noqa: E402
from esault.metrics.stats import SpuStats, StatsRegistry  # noqa: E402
from esault.messages.cluster import WorkerHeartbeat  # noqa: E402
from esault.transport.wire import encode_frame  # noqa: E402

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results" / "metrics.md"
WORKERS = 4
UNITS = 8


def _spu(i: int) -> SpuStats:
    stats = SpuStats("bench", f"unit{i % UNITS}", i)
    stats.emitted, stats.processed, stats.acked, stats.busy_us = 1000 * i, 1000 * i, 10 * i, 123_456 * i
    stats.pes, stats.backlog = i % 50, i % 7
    return stats


def _rows(spus: list[SpuStats]) -> list[tuple[str, str, int, dict[str, int]]]:
    return [(s.topology, s.unit, s.spu, s.as_dict()) for s in spus]


def local_registry(n: int) -> CollectorRegistry:
    """N SPUs of this process, as with --cluster threads."""
    stats = StatsRegistry()
    for i in range(n):
        stats.register(_spu(i))
    registry = CollectorRegistry()
    registry.register(SpuStatsCollector(stats))
    return registry


def heartbeat_registry(n: int) -> tuple[CollectorRegistry, SpuStatsCollector, WorkerRegistry, list[WorkerHeartbeat]]:
    """N SPUs spread over WORKERS workers, known to the driver from one heartbeat each."""
    workers = WorkerRegistry()
    beats = []
    for w in range(WORKERS):
        name = f"worker-{w}"
        workers.joined(name, f"tcp://127.0.0.1:{7000 + w}")
        mine = [_spu(i) for i in range(w, n, WORKERS)]
        for s in mine:
            workers.placed(name, s.spu)
        beat = WorkerHeartbeat(name, _rows(mine))
        workers.heartbeat(beat)
        beats.append(beat)
    collector = SpuStatsCollector(StatsRegistry())  # the driver's own registry: no SPUs of its own here
    collector.add_source(workers.live_stats)
    registry = CollectorRegistry()
    registry.register(collector)
    return registry, collector, workers, beats


def _median_seconds(fn, min_time: float = 0.2, min_reps: int = 5) -> float:
    times = []
    started = time.perf_counter()
    while len(times) < min_reps or time.perf_counter() - started < min_time:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _interleaved(a, b, rounds: int) -> tuple[float, float, float]:
    """Median seconds of a() and b(), and the median of their per-round ratio b/a: run alternately, so
    load from other processes on the machine falls on both alike."""
    ta, tb = [], []
    for _ in range(rounds):
        for fn, times in ((a, ta), (b, tb)):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return statistics.median(ta), statistics.median(tb), statistics.median(y / x for x, y in zip(ta, tb))


def scrape_costs(sizes: list[int], rounds: int) -> list[dict[str, float]]:
    out = []
    for n in sizes:
        local = local_registry(n)
        remote, collector, workers, beats = heartbeat_registry(n)
        generate_latest(local), generate_latest(remote)  # warm-up
        local_s, remote_s, ratio = _interleaved(lambda: generate_latest(local), lambda: generate_latest(remote),
                                                rounds)
        collect_s = _median_seconds(lambda: list(collector.collect()))
        beat = beats[0]
        ingest_s = _median_seconds(lambda: workers.heartbeat(beat))
        out.append({
            "spus": n, "local_ms": local_s * 1e3, "heartbeat_ms": remote_s * 1e3, "ratio": ratio,
            "collect_ms": collect_s * 1e3,
            "us_per_spu": remote_s / n * 1e6, "bytes": len(generate_latest(remote)),
            "beat_bytes_per_spu": len(encode_frame(beat)) / max(1, len(beat.stats)),
            "ingest_us": ingest_s * 1e6, "rows_per_beat": len(beat.stats),
        })
    return out


def forwarded_bytes() -> tuple[int, int]:
    """Rows and encoded bytes a worker's heartbeat adds when its own metrics changed (esault.metrics.forwarded):
    the zero series an Endpoint, a Postman and a bolt SPU create, as in a worker."""
    from esault.metrics.forwarded import process_samples
    from esault.metrics.registry import (init_auth_rejected_series, init_frame_drop_series,
                                         init_unknown_message_series)
    from esault.transport.endpoint import ENDPOINT_DROP_REASONS
    from esault.transport.wire import FRAME_ERROR_REASONS

    init_frame_drop_series(FRAME_ERROR_REASONS + ENDPOINT_DROP_REASONS + ("held_full",))
    init_auth_rejected_series(("handshake", "no_curve", "unknown_key", "not_permitted"))
    init_unknown_message_series("BoltSpuActor")
    rows = process_samples()
    extra = len(encode_frame(WorkerHeartbeat("w", [], rows))) - len(encode_frame(WorkerHeartbeat("w", [], [])))
    return len(rows), extra


def heartbeat_gaps(seconds: float) -> dict[str, float]:
    """Run a paced topology on 2 spawned workers; time the gaps between heartbeats at the driver."""
    from esault import JobConfig, LocalCluster

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
    import wordcount

    arrivals: dict[str, list[float]] = {}
    original = WorkerRegistry.heartbeat

    def record(self: WorkerRegistry, beat: WorkerHeartbeat) -> None:
        arrivals.setdefault(beat.process, []).append(time.monotonic())
        original(self, beat)

    topology = wordcount.build_topology(total=10_000_000, rate=2000.0, sink=None)
    WorkerRegistry.heartbeat = record  # type: ignore[method-assign]
    try:
        with tempfile.TemporaryDirectory() as data, LocalCluster(workers=2) as cluster:
            job = cluster.submit(topology, JobConfig(data_dir=Path(data), elasticity=False))
            threading.Event().wait(0.5)  # let the first heartbeats settle: startup is not steady state
            arrivals.clear()
            threading.Event().wait(seconds)  # the measurement window
            snapshot = {w: list(t) for w, t in arrivals.items()}
            job.stop()
    finally:
        WorkerRegistry.heartbeat = original  # type: ignore[method-assign]
    gaps = sorted(b - a for times in snapshot.values() for a, b in zip(times, times[1:]))
    if not gaps:
        raise RuntimeError("no heartbeats arrived during the run")
    return {"beats": sum(len(t) for t in snapshot.values()), "workers": len(snapshot),
            "p50": statistics.median(gaps), "p99": gaps[min(len(gaps) - 1, int(0.99 * len(gaps)))],
            "max": gaps[-1], "mean": statistics.fmean(gaps)}


def report(costs: list[dict[str, float]], gaps: dict[str, float], forwarded: tuple[int, int]) -> str:
    lines = [
        "## Driver /metrics with worker SPUs from heartbeats (bench/metrics_export.py)",
        "",
        f"Scrape = `generate_latest()` over the SpuStats collector (13 series per SPU), median of interleaved "
        f"rounds, the ratio the median of per-round ratios; {UNITS} units; heartbeat rows spread "
        f"over {WORKERS} workers. *local*: the N SPUs in the scraped process (`--cluster threads`); "
        "*heartbeat*: the same N SPUs as the driver knows them from its workers' heartbeats (the default mode). "
        f"Machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end of the run (absolute "
        "times scale with the load; the ratio does not).",
        "",
        "| SPUs | scrape, local (ms) | scrape, heartbeat (ms) | heartbeat / local | of which the collector (ms) "
        "| µs per SPU | exposition (KiB) "
        "| heartbeat bytes per SPU | driver takes in one beat (µs, rows) |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for c in costs:
        lines.append(f"| {c['spus']} | {c['local_ms']:.2f} | {c['heartbeat_ms']:.2f} | {c['ratio']:.2f} | {c['collect_ms']:.2f} | "
                     f"{c['us_per_spu']:.1f} | {c['bytes'] / 1024:.0f} | {c['beat_bytes_per_spu']:.0f} | "
                     f"{c['ingest_us']:.0f} ({c['rows_per_beat']:.0f}) |")
    lines += [
        "",
        f"Staleness: heartbeats every {HEARTBEAT_INTERVAL} s (`esault.cluster.worker.HEARTBEAT_INTERVAL`). "
        f"Measured at a real driver with {gaps['workers']} spawned workers running a topology: "
        f"{gaps['beats']} heartbeats, gap between a worker's beats p50 {gaps['p50'] * 1e3:.0f} ms, "
        f"p99 {gaps['p99'] * 1e3:.0f} ms, max {gaps['max'] * 1e3:.0f} ms. A scraped worker value is as old as "
        f"the time since its worker's last beat: on average half a gap (~{gaps['mean'] / 2 * 1e3:.0f} ms), "
        f"at most one gap ({gaps['max'] * 1e3:.0f} ms here), plus the beat's transit.",
        "",
        f"A worker's own metrics (frames dropped, keys refused, unknown messages) add {forwarded[0]} samples, "
        f"{forwarded[1]} bytes, to a heartbeat when they changed (and every 25th beat), nothing otherwise.",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="16,128,1024,4096", help="SPU counts to scrape")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved local/heartbeat scrapes per size")
    parser.add_argument("--seconds", type=float, default=5.0, help="how long to time heartbeat arrivals")
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/results/metrics.md")
    args = parser.parse_args()
    costs = scrape_costs([int(n) for n in args.sizes.split(",")], args.rounds)
    forwarded = forwarded_bytes()  # before the cluster run, whose driver would add its own series
    gaps = heartbeat_gaps(args.seconds)
    text = report(costs, gaps, forwarded)
    print(text)
    if not args.no_write:
        if not RESULTS.exists():
            RESULTS.parent.mkdir(parents=True, exist_ok=True)
            RESULTS.write_text("# Metrics export\n")
        write_section(RESULTS, "metrics", text)
        print(f"\nwrote {RESULTS}")


if __name__ == "__main__":
    main()
