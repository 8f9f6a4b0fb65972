"""Scale-out on worker processes: a CPU-bound key-grouped bolt on 1, 2, 4 SPUs, and the monitor finding 2.

    python bench/scaleout.py                # ~1 min on a 2-core machine; prints a table
    python bench/scaleout.py --tuples 200000 --work 300

The bolt does pure-Python work per tuple (no sleep, no I/O: it holds the GIL),
so its SPUs scale only across processes. Fixed runs (elasticity off) give the
throughput per SPU count; the elastic run starts at one SPU, offers a load of
1.3x what one SPU sustains, and records the SPUs the latency monitor ends with
and where they run. throughput.py calls these functions and writes the figures.
"""

from __future__ import annotations

import argparse
import sys
import threading
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from esault import Bolt, JobConfig, LocalCluster, Spout, TopologyBuilder  # noqa: E402


class KeySpout(Spout):
    """`total` tuples (key, i) over `keys` keys in chunks of 100, at most `rate` per second if given."""

    def __init__(self, total: int, keys: int = 10_000, rate: float | None = None) -> None:
        self.total = total
        self.keys = [f"k{i}" for i in range(keys)]
        self.rate = rate
        self.position = 0
        self.started: float | None = None

    def next_tuple(self) -> None:
        end = min(self.position + 100, self.total)
        if self.rate is not None:
            now = time.monotonic()
            if self.started is None:
                self.started = now
            end = min(end, int((now - self.started) * self.rate))
        if end <= self.position:
            return
        keys = self.keys
        n = len(keys)
        self.emit_batch([keys[i % n] for i in range(self.position, end)], list(range(self.position, end)),
                        msg_id=self.position)
        self.position = end
        if end >= self.total:
            self.finish()


class BusyBolt(Bolt):
    """Per key: `work` iterations of pure-Python arithmetic per tuple (about 35 ns each), then counts."""

    def __init__(self, work: int = 300) -> None:
        self.work = work

    def open(self, context: Any) -> None:
        self.count = 0

    def process(self, tup: Any) -> None:
        x = tup.value
        for i in range(self.work):
            x = (x * 31 + i) & 0xFFFF
        self.count += 1


def topology(total: int, spus: int, work: int, elastic: bool, rate: float | None = None):
    b = TopologyBuilder("scaleout")
    b.set_spout("src", KeySpout, params={"total": total, "rate": rate}, max_pending=20_000)
    # The monitor's settings are the defaults (max_latency 0.1 s, probe_period 1 s, cooldown 5 s, max_spus 8).
    b.set_bolt("busy", BusyBolt, spus, params={"work": work}, elastic=elastic).key_grouping("src")
    return b.build()


def run_fixed(cluster: LocalCluster, spus: int, total: int, work: int) -> float:
    """Tuples/s through `spus` SPUs (elasticity off), submit to completion."""
    job = cluster.submit(topology(total, spus, work, elastic=False),
                         JobConfig(data_dir=Path(tempfile.mkdtemp(prefix="esault-scaleout-")),
                                   guarantee="at_least_once"))  # KeySpout cannot rewind
    started = time.perf_counter()
    try:
        if not job.wait(600):
            raise RuntimeError(f"scale-out run with {spus} SPUs did not finish: {job.status()}")
        return total / (time.perf_counter() - started)
    finally:
        job.stop()


@dataclass
class ElasticRun:
    offered: float
    seconds: float
    tuples: int
    timeline: list[tuple[float, int]] = field(default_factory=list)
    """(seconds since start, SPUs of the bolt) at each change."""
    placement: dict[str, list[int]] = field(default_factory=dict)
    """worker -> SPU ids of the bolt at the end."""
    peak_workers: int = 0
    """Worker processes hosting the bolt's SPUs when it had the most."""

    @property
    def final_spus(self) -> int:
        return self.timeline[-1][1] if self.timeline else 0


def run_elastic(cluster: LocalCluster, one_spu_rate: float, work: int, seconds: float = 30.0) -> ElasticRun:
    """Offer 1.3x one SPU's rate to one elastic SPU; record how the monitor scales it and where."""
    offered = 1.3 * one_spu_rate
    total = int(offered * seconds)
    job = cluster.submit(topology(total, 1, work, elastic=True, rate=offered),
                         JobConfig(data_dir=Path(tempfile.mkdtemp(prefix="esault-elastic-")), elasticity=True,
                                   guarantee="at_least_once"))
    started = time.perf_counter()
    run = ElasticRun(offered, 0.0, total)
    try:
        gate = threading.Event()
        done = False
        peak = 0
        while not done:
            live = set(job.spus("busy"))
            spus = len(live)
            now = time.perf_counter() - started
            if not run.timeline or run.timeline[-1][1] != spus:
                run.timeline.append((round(now, 2), spus))
            if spus > peak:
                peak = spus
                run.peak_workers = sum(1 for s in cluster.registry.spus_on.values() if s & live)
            done = job.is_complete() or now > 6 * seconds
            gate.wait(0.2)
        run.seconds = time.perf_counter() - started
        live = set(job.spus("busy"))
        run.placement = {w: sorted(s & live) for w, s in cluster.registry.spus_on.items()}
        return run
    finally:
        job.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tuples", type=int, default=150_000)
    parser.add_argument("--work", type=int, default=300, help="loop iterations per tuple")
    args = parser.parse_args()
    with LocalCluster(workers=2) as cluster:
        rates = {n: run_fixed(cluster, n, args.tuples, args.work) for n in (1, 2, 4)}
        for n, r in rates.items():
            print(f"{n} SPU(s): {r:10,.0f} tuples/s  ({r / rates[1]:.2f}x)")
        elastic = run_elastic(cluster, rates[1], args.work)
        print(f"elastic: offered {elastic.offered:,.0f}/s, SPUs over time {elastic.timeline}, "
              f"placement {elastic.placement}")


if __name__ == "__main__":
    main()
