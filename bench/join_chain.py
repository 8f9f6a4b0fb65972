"""End-to-end stream join benchmark: real jobs on LocalCluster(workers=2) (issue #14's runtime figures).

    python bench/join_chain.py [--tuples 8000] [--rounds 3] [--quick] [--out DIR]

bench/joins.py measures the pure model in one thread; this runs the join as a
job: two spouts in the driver (R and S, bench/joins.py's workload, each value
stamped with its emit time), the join on two worker processes, and a sink in
the driver that takes each pair's latency (sink time - emit time of the
pair's later tuple; spouts and sink share the driver's clock).
1. Throughput (input tuples/s and pairs/s from submit to job.wait()) and
   pair latency: keyed mode, 1 SPU, 1 worker (a plain symmetric hash join in
   one SPU) vs mode="chain" with 1, 2 and 4 SPUs, guarantee "none", and the
   2-SPU chain under "exactly_once"; for an equi-join, a band join and a
   predicate join (no index: the nested loop a chain spreads over SPUs).
2. zeta 1 / 20 / 100 on a chain of 4 SPUs (predicate join; protocol messages
   per tuple from the pure model: the runtime keeps no link counters).
3. 2x overload on the 2-SPU predicate chain: spouts paced at its measured
   capacity each (a tuple's stamp is its scheduled arrival, so waiting in the
   spout counts), S2J shedding at tau1 0.9 and 0.5 vs none: completeness
   (pairs out / the oracle's), p50/p99 latency, tuples shed.
4. Scaling of the chain (issue 31: 2 SPUs should sustain >= 1.7x one): paced capacity probes of the 1-SPU
   and the 2-SPU chain in the same run, interleaved, at rates climbing by ~1.19x from 0.3x the 1-SPU
   unpaced throughput, each run at least SCALE_SECONDS of input; the capacity of each is the fastest rate
   it kept up with, and the ratio of the two is printed; for the predicate join above and for a join-bound
   one (a 10x window, the predicate for one left value in 8). Beside it, each worker process's CPU
   microseconds per input tuple (/proc), the load-independent figure: 2 SPUs scale when each does about half
   of what one does.
Configurations run --rounds times, interleaved (the machine is shared); the
table shows medians and the spread (max - min) of throughput. Writes
DIR/joins_chain.md and DIR/joins_chain.png; by default (no --out) the plot
goes to docs/results and the section into docs/results/joins.md between its
markers.
"""

from __future__ import annotations

import argparse
import bisect
import math
import os
import statistics
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from _report import write_section  # noqa: E402
from joins import KEYS, QUERY, workload  # noqa: E402

from esault import Bolt, JobConfig, LocalCluster, TopologyBuilder  # noqa: E402
from esault.joins import JoinChain  # noqa: E402
from esault.testing import ListSpout  # noqa: E402

WINDOW = 400  # event-time units per side (bench/joins.py's 2000 would make ~8 pairs per tuple)
BAND = 1
JOINS = ("equi", "band", "predicate")
PROBES = (1, 1.5, 2, 3, 4, 6, 8)  # paced runs at these multiples of the unpaced 2-SPU predicate chain's throughput
KEPT_UP_MS = 100  # a paced run kept up when its pair p50 stayed below this; the fastest such run is the capacity
SCALE_STEPS = (0.3, 0.35, 0.4, 0.5, 0.6, 0.7, 0.85, 1, 1.2, 1.4, 1.7, 2, 2.4, 2.8, 3.4, 4, 4.8, 5.6)
"""Scaling probes: multiples of the 1-SPU chain's unpaced throughput on the same input (steps of ~1.19x)."""
SCALE_SECONDS = 3.0  # a scaling probe offers at least this many seconds of input (--quick: 1)
PROBE_MISSES = 2
"""A configuration's probes stop after this many in a row fell behind: one miss on a shared machine (or a 2-SPU
chain's pair latency at a low rate, where its links' blocks of zeta fill slowly) does not end the search."""
SCALE_SLACK = (1.15, 1.0)  # ... and kept up if it also took at most 1.15x that + 1 s (start-up and the last flush)


def sums_to_keys(r: dict, s: dict) -> bool:
    """The predicate join's test: no index serves it, so every stored tuple in the window is compared."""
    return (r["k"] + s["k"]) % KEYS == 0


def sums_to_keys_sparse(r: dict, s: dict) -> bool:
    """The same test for one left value in 8: the scaling part's 10x window then still makes ~1 pair per tuple
    (the sink, in the driver, stays light) while each tuple is tested against ~4000 others."""
    return r["k"] % 8 == 0 and (r["k"] + s["k"]) % KEYS == 0


PARTNERS = {"equi": lambda k: [k], "band": lambda k: range(k - BAND, k + BAND + 1),
            "predicate": lambda k: [(KEYS - k) % KEYS],
            "sparse": lambda k: [(KEYS - k) % KEYS] if k % 8 == 0 else []}
KINDS = {"equi": {"kind": "equi"}, "band": {"kind": "band", "band": BAND},
         "predicate": {"kind": "join_chain:sums_to_keys"},  # module:function, so worker processes import it
         "sparse": {"kind": "join_chain:sums_to_keys_sparse"}}
SCALE_JOINS = (("predicate", WINDOW), ("sparse", 10 * WINDOW))  # part 4: the bench's join, and a join-bound one

_lock = threading.Lock()
_seen: dict[str, list[float]] = defaultdict(list)  # run tag -> pair latencies (s), filled in the driver


class StampedSpout(ListSpout):
    """Emits its items with value["t"] = the emit time (perf_counter, the driver's clock); with `rate`, at
    most `rate` tuples/s and "t" the tuple's scheduled arrival, so time spent waiting to be emitted counts."""

    def __init__(self, items: list, per_call: int = 64, rate: float = 0.0) -> None:
        super().__init__(items, per_call)
        self.rate, self.start = float(rate), None

    def limit(self) -> int:
        if not self.rate:
            return len(self.items)
        if self.start is None:
            self.start = time.perf_counter()
        return min(len(self.items), int(self.rate * (time.perf_counter() - self.start)) + 1)

    def next_tuple(self) -> None:
        end = min(self.position + self.per_call, self.limit())
        now = time.perf_counter()
        for i in range(self.position, end):
            key, value = self.items[i]
            stamp = self.start + i / self.rate if self.rate else now
            self.emit(key, {**value, "t": stamp}, msg_id=i)
        self.position = end
        if self.position >= len(self.items):
            self.finish()


class LatencySink(Bolt):
    """In the driver: records each pair's latency under its run's tag."""

    esault_placement = "driver"

    def __init__(self, tag: str) -> None:
        self.tag = tag

    def process(self, tup: Any) -> None:
        v = tup.value
        latency = time.perf_counter() - max(v["left"]["t"], v["right"]["t"])
        with _lock:
            _seen[self.tag].append(latency)


def streams(n: int, join: str) -> tuple[list, list]:
    """bench/joins.py's workload as two spouts' items: (key, {"k", "ts"}); band and predicate tuples share one
    key (they cannot be key-partitioned: keyed mode runs them in one PE)."""
    items: dict[str, list] = {"R": [], "S": []}
    for side, ts, value in workload(n):
        items[side].append([value["k"] if join == "equi" else 0, {"k": value["k"], "ts": ts}])
    return items["R"], items["S"]


def oracle_pairs(lefts: list, rights: list, join: str, window: float = WINDOW) -> int:
    """Pairs with |ts_r - ts_s| <= WINDOW whose k's match, counted by bisection over each k's times."""
    times: dict[int, list[int]] = defaultdict(list)
    for _, v in rights:
        times[v["k"]].append(v["ts"])  # already sorted: ts grows per side
    count = 0
    for _, v in lefts:
        for k in PARTNERS[join](v["k"]):
            ts = times.get(k, ())
            count += bisect.bisect_right(ts, v["ts"] + window) - bisect.bisect_left(ts, v["ts"] - window)
    return count


def model_messages(n: int, spus: int, zeta: int) -> float:
    """Protocol messages (blocks and acks) per input tuple on the pure model's chain of `spus` workers."""
    chain = JoinChain([QUERY], WINDOW, zeta=zeta, workers=spus)
    for side, ts, value in workload(n):
        chain.ingest(side, ts, value)
        chain.run()
    chain.drain()
    return chain.messages / n


class Config:
    """One benchmarked job: join mode, SPUs, zeta, guarantee, band or equi, pacing and shedding."""

    def __init__(self, label: str, mode: str = "chain", spus: int = 2, zeta: int = 20, guarantee: str = "none",
                 join: str = "equi", rate: float = 0.0, shed: dict | None = None, part: int = 1) -> None:
        self.label, self.mode, self.spus, self.zeta, self.guarantee = label, mode, spus, zeta, guarantee
        self.join, self.rate, self.shed, self.part = join, rate, shed, part
        self.expected: int | None = None  # the oracle's pairs, when this job has its own input (scaling probes)
        self.window = WINDOW


def run_job(cluster: LocalCluster, cfg: Config, lefts: list, rights: list, data_dir: Path, tag: str) -> dict:
    b = TopologyBuilder(tag)
    b.set_spout("R", StampedSpout, params={"items": lefts, "rate": cfg.rate})
    b.set_spout("S", StampedSpout, params={"items": rights, "rate": cfg.rate})
    kind = KINDS[cfg.join]
    b.join("j", "R", "S", on="k", window=cfg.window, zeta=cfg.zeta, mode=cfg.mode, parallelism=cfg.spus,
           shed=cfg.shed, **kind)
    b.set_bolt("out", LatencySink, params={"tag": tag}).global_grouping("j")
    config = JobConfig(data_dir=data_dir, guarantee=cfg.guarantee, elasticity=False, message_timeout=120.0,
                       checkpoint_interval=1.0)
    workers = [p.pid for p in getattr(getattr(cluster, "pool", None), "processes", [])]
    worker_cpu = [cpu_seconds(pid) for pid in workers]
    start, cpu = time.perf_counter(), time.process_time()
    job = cluster.submit(b.build(), config)
    try:
        if not job.wait(600):
            raise RuntimeError(f"{tag}: not complete in 600 s: {job.status()['units']['j']}")
        elapsed = time.perf_counter() - start
        driver = (time.process_time() - cpu) / elapsed  # the driver's share of a core: spouts, sink, control
        worker_cpu = [cpu_seconds(pid) - before for pid, before in zip(workers, worker_cpu)]
        live = job.status()["units"]["j"]["spus"]
    finally:
        job.stop()
    final = job.final_status["units"]["j"]
    with _lock:
        latencies = sorted(_seen.pop(tag, []))
    busy = sorted(s.get("busy_us", 0) / 1e6 / elapsed for s in (final["spus"] or live).values())
    n = len(lefts) + len(rights)
    return {"elapsed": elapsed, "tuples_s": n / elapsed, "pairs_s": len(latencies) / elapsed,
            "pairs": len(latencies), "shed": final.get("shed", 0),
            "p50_ms": 1e3 * latencies[len(latencies) // 2] if latencies else float("nan"),
            "p99_ms": 1e3 * latencies[int(len(latencies) * 0.99)] if latencies else float("nan"),
            "busy": busy, "driver": driver,
            "cpu_us": sorted((1e6 * c / n for c in worker_cpu if c == c), reverse=True)}  # per input tuple


def cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) a process used so far; nan where /proc is not there."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return float("nan")


def summarise(runs: list[dict]) -> dict:
    out = {k: statistics.median(r[k] for r in runs) for k in ("tuples_s", "pairs_s", "pairs", "p50_ms", "p99_ms",
                                                              "shed", "elapsed", "driver")}
    out["spread"] = max(r["tuples_s"] for r in runs) - min(r["tuples_s"] for r in runs)
    out["busy"] = max(runs, key=lambda r: r["tuples_s"])["busy"]
    out["cpu_us"] = max(runs, key=lambda r: r["tuples_s"])["cpu_us"]
    out["rounds"] = len(runs)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tuples", type=int, default=8000, help="input tuples per job (both streams)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="1500 tuples, 1 round (a smoke run, < 1 min)")
    parser.add_argument("--out", type=Path, default=None, help="where joins_chain.md/.png go (default: "
                        "docs/results, the section also written into docs/results/joins.md)")
    args = parser.parse_args()
    n, rounds = (1500, 1) if args.quick else (args.tuples, args.rounds)
    out = args.out or ROOT / "docs" / "results"
    out.mkdir(parents=True, exist_ok=True)
    data = {join: streams(n, join) for join in JOINS}
    oracle = {join: oracle_pairs(*data[join], join) for join in JOINS}

    part1 = [("keyed, 1 SPU (symmetric hash join)", dict(mode="keyed", spus=1))]
    part1 += [(f"chain, {p} SPU(s)", dict(spus=p)) for p in (1, 2, 4)]
    part1 += [("chain, 2 SPUs, exactly_once", dict(spus=2, guarantee="exactly_once"))]
    configs = [Config(label, join=join, **kw) for join in JOINS for label, kw in part1]
    configs += [Config(f"chain, 4 SPUs, zeta {z}", spus=4, zeta=z, join="predicate", part=2) for z in (1, 20, 100)]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp, LocalCluster(workers=2) as cluster:
        tags = (f"j{i}" for i in range(10**6))
        results = run_rounds(cluster, configs, data, rounds, Path(tmp), tags)
        unpaced = next(s["tuples_s"] for c, s in zip(configs, results)
                       if c.label == "chain, 2 SPU(s)" and c.join == "predicate")
        probes, probed = [], []
        for m in PROBES:  # faster and faster, until a run falls behind
            probes.append(Config(f"capacity probe, paced {m}x unpaced", spus=2, join="predicate", part=3,
                                 rate=m * unpaced / 2))
            probed += run_rounds(cluster, probes[-1:], data, 1, Path(tmp), tags)
            if probed[-1]["p50_ms"] >= KEPT_UP_MS:
                break
        kept_up = [s["tuples_s"] for s in probed if s["p50_ms"] < KEPT_UP_MS]
        rate = max(kept_up, default=unpaced)  # each spout at the capacity, so twice it offered
        over = [Config("2x overload, no shedding", join="predicate", rate=rate, part=3)]
        over += [Config(f"2x overload, shed tau1 {tau}", join="predicate", rate=rate, part=3,
                        shed={"tau1": tau, "period": 0.2, "sustain": 1}) for tau in (0.9, 0.5)]
        results += run_rounds(cluster, over, data, rounds, Path(tmp), tags)
        scaled, scaling = run_scaling(cluster, args.quick, Path(tmp), tags)
    results[len(configs):len(configs)] = probed
    configs += probes + over
    configs += scaled
    results += scaling
    took = time.perf_counter() - started
    messages = {c.zeta: model_messages(n, 4, c.zeta) for c in configs if c.part == 2}
    print(format_table(configs, results, oracle, messages))
    print(f"({took:.0f} s, {n} tuples per job, {rounds} round(s); 2x overload: {rate:.0f} tuples/s per spout)")
    scale_text = scaling_summary(scaled, scaling)
    print(scale_text)
    section = write_markdown(out, configs, results, oracle, messages, n, rounds, rate, args, scale_text)
    plot(out / "joins_chain.png", configs, results, oracle)
    if args.out is None:
        write_section(out / "joins.md", "join_chain", section)


def run_scaling(cluster: LocalCluster, quick: bool, tmp: Path, tags) -> tuple[list, list]:
    """Part 4, for each of SCALE_JOINS (only the first with --quick): the 1-SPU chain's unpaced throughput on
    its own input is the base; then the 1-SPU and the 2-SPU chain paced at SCALE_STEPS x base (input
    tuples/s, both spouts together), interleaved, each until PROBE_MISSES probes in a row fell behind; every
    run offers at least SCALE_SECONDS of input, checked against its own oracle."""
    seconds = 1.0 if quick else SCALE_SECONDS
    steps = (0.7, 1.4) if quick else SCALE_STEPS
    configs: list[Config] = []
    summaries: list[dict] = []
    for join, window in SCALE_JOINS[:1] if quick else SCALE_JOINS:
        inputs: dict[int, tuple] = {}

        def probe(label: str, spus: int, rate: float, n: int) -> dict:
            if n not in inputs:
                lefts, rights = streams(n, join)
                inputs[n] = (lefts, rights, oracle_pairs(lefts, rights, join, window))
            lefts, rights, expected = inputs[n]
            cfg = Config(label, spus=spus, join=join, rate=rate, part=4)
            cfg.expected, cfg.window = expected, window
            summary = summarise([run_job(cluster, cfg, lefts, rights, tmp, next(tags))])
            summary["kept_up"] = kept_up(summary, n / (2 * rate)) if rate else False
            configs.append(cfg)
            summaries.append(summary)
            return summary

        tag = "scaling probe" if window == WINDOW else f"scaling, w={window:g}"
        base = probe(f"{tag}, 1 SPU(s), unpaced", 1, 0.0, max(8000, int(4 * window)))["tuples_s"]  # window full
        misses = {1: 0, 2: 0}  # probes in a row that fell behind: a configuration stops at PROBE_MISSES
        for m in steps:
            for spus in (1, 2):
                if misses[spus] < PROBE_MISSES:
                    offered = m * base
                    n = int(math.ceil(max(offered * seconds, 1000) / 1000)) * 1000
                    kept = probe(f"{tag}, {spus} SPU(s), {m}x", spus, offered / 2, n)["kept_up"]
                    misses[spus] = 0 if kept else misses[spus] + 1
            if min(misses.values()) >= PROBE_MISSES:
                break
    return configs, summaries


def kept_up(summary: dict, input_seconds: float) -> bool:
    """A paced run kept up: pair p50 under KEPT_UP_MS and the job no longer than its input allows."""
    factor, extra = SCALE_SLACK
    return summary["p50_ms"] < KEPT_UP_MS and summary["elapsed"] <= factor * input_seconds + extra


def scaling_summary(configs: list, summaries: list) -> str:
    """Per scaling join: the capacities (fastest paced rate kept up) of 1 and 2 SPUs, their ratio, and the
    worker processes' CPU per tuple at those rates."""
    lines = []
    for join, window in SCALE_JOINS:
        if not any(c.join == join and c.window == window for c in configs):
            continue
        capacity: dict[int, float] = {}
        cpu: dict[int, list] = {}
        for c, s in zip(configs, summaries):
            if c.join == join and c.window == window and s["kept_up"] and 2 * c.rate >= capacity.get(c.spus, 0):
                capacity[c.spus], cpu[c.spus] = 2 * c.rate, s["cpu_us"]
        what = f"{join} join, window {window:g}"
        if 1 not in capacity or 2 not in capacity:
            lines.append(f"Chain scaling ({what}): a configuration kept up with no probe rate; no capacity ratio.")
            continue
        per_worker = "; ".join(f"{p} SPU(s): {' + '.join(f'{u:.0f}' for u in cpu[p])} us" for p in (1, 2))
        lines.append(f"Chain scaling ({what}, paced capacity probes): 1 SPU sustains {capacity[1]:.0f} tuples/s, "
                     f"2 SPUs {capacity[2]:.0f} tuples/s: {capacity[2] / capacity[1]:.2f}x. Worker processes' CPU "
                     f"per input tuple at those rates (busiest first): {per_worker}.")
    return "\n".join(lines)


def run_rounds(cluster: LocalCluster, configs: list[Config], data: dict, rounds: int, tmp: Path, tags) -> list[dict]:
    """Every configuration `rounds` times, interleaved (round 1 of each, then round 2, ...); summaries."""
    runs: list[list[dict]] = [[] for _ in configs]
    for _ in range(rounds):
        for i, cfg in enumerate(configs):
            runs[i].append(run_job(cluster, cfg, *data[cfg.join], tmp, next(tags)))
    return [summarise(r) for r in runs]


def busy_text(busy: list[float]) -> str:
    return " ".join(f"{b:.2f}" for b in busy)


def cpu_text(cpu_us: list[float]) -> str:
    return " ".join(f"{u:.0f}" for u in cpu_us) or "-"


def format_table(configs, summaries, oracle, messages) -> str:
    lines = [f"{'join':9} {'configuration':36} {'offered':>8} {'tuples/s':>9} {'+-':>6} {'pairs/s':>9} "
             f"{'complete':>9} {'p50 ms':>8} {'p99 ms':>8} {'shed':>6} {'msgs/t':>7} {'driver':>6}  busy per SPU  "
             "worker CPU us/tuple"]
    for c, s in zip(configs, summaries):
        msgs = f"{messages[c.zeta]:.2f}" if c.part == 2 else "-"
        offered = f"{2 * c.rate:.0f}" if c.rate else "-"
        lines.append(f"{c.join:9} {c.label:36} {offered:>8} {s['tuples_s']:>9.0f} {s['spread']:>6.0f} "
                     f"{s['pairs_s']:>9.0f} {s['pairs'] / (c.expected or oracle[c.join]):>9.1%} {s['p50_ms']:>8.0f} "
                     f"{s['p99_ms']:>8.0f} {s['shed']:>6.0f} {msgs:>7} {s['driver']:>6.2f}  {busy_text(s['busy'])}  "
                     f"{cpu_text(s['cpu_us'])}")
    return "\n".join(lines)


def write_markdown(out, configs, summaries, oracle, messages, n, rounds, rate, args, scale_text="") -> str:
    md = ["## End to end on worker processes (bench/join_chain.py)", "",
          f"Command: `python bench/join_chain.py{' --quick' if args.quick else ''}`. {n} input tuples per job "
          f"(bench/joins.py's workload: {KEYS} values of k, event time = position in its stream), window {WINDOW} "
          f"per stream. Joins: equi (k_r == k_s, hash index, {oracle['equi']} pairs), band (|k_r - k_s| <= {BAND}, "
          f"sorted index, {oracle['band']} pairs) and predicate ((k_r + k_s) % {KEYS} == 0 as a function: no "
          f"index, every stored tuple in the window is tested, {oracle['predicate']} pairs). Band and predicate "
          "tuples all carry one key, so keyed mode runs them in one PE. Each job: the R and S spouts and the "
          "latency sink in the driver process, the join's SPUs on LocalCluster(workers=2) (two worker "
          f"processes; chain SPUs alternate between them), guarantee \"none\" unless named. {rounds} interleaved "
          "round(s); medians, +- = max - min of throughput over the rounds. Throughput: input tuples over "
          "submit -> job.wait() (SPU start-up included); latency: sink time - emit time of the pair's later "
          "tuple, so in the unpaced runs it is mostly queueing (the spouts run up to max_spout_pending ahead). "
          "busy = each SPU's busy_us / elapsed (job.final_status), head first.", "",
          "| join | configuration | offered/s | tuples/s | +- | pairs/s | complete | pair p50 ms | pair p99 ms | "
          "shed | msgs/tuple (model) | driver CPU | busy per SPU | worker CPU us/tuple |",
          "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for c, s in zip(configs, summaries):
        msgs = f"{messages[c.zeta]:.2f}" if c.part == 2 else "-"
        offered = f"{2 * c.rate:.0f}" if c.rate else "-"
        md.append(f"| {c.join} | {c.label} | {offered} | {s['tuples_s']:.0f} | {s['spread']:.0f} | "
                  f"{s['pairs_s']:.0f} | {s['pairs'] / (c.expected or oracle[c.join]):.1%} | {s['p50_ms']:.0f} | {s['p99_ms']:.0f} | "
                  f"{s['shed']:.0f} | "
                  f"{msgs} | {s['driver']:.2f} | {busy_text(s['busy'])} | {cpu_text(s['cpu_us'])} |")
    md += ["", f"Capacity probes: the 2-SPU predicate chain paced at 1, 1.5, 2, 3, 4, 6, 8x its unpaced "
           f"throughput (one round each) until one falls behind; the fastest one whose pair p50 stayed under "
           f"{KEPT_UP_MS} ms is taken as the capacity. 2x overload: each spout paced at that capacity, "
           f"{rate:.0f} tuples/s, so both together offer twice it; a tuple's stamp is its scheduled arrival, "
           "so waiting in the spout counts. "
           "offered/s: both spouts' pace. driver CPU: the driver process's CPU seconds per second of the job "
           "(spouts, sink, acker, control; a share of the machine's 2 cores). msgs/tuple: protocol messages "
           "(blocks and acks) per input tuple of the pure model's 4-worker chain on the same input (the runtime "
           "keeps no link counters; it sends "
           "one ChainLink per neighbour per batch, carrying several). worker CPU us/tuple: each worker "
           "process's CPU (user + system, /proc) over the job per input tuple, busiest first: what the join costs "
           "whatever else runs on the machine.", "",
           f"Scaling probes (part 4): the 1-SPU and the 2-SPU chain paced at {', '.join(map(str, SCALE_STEPS))}"
           f"x the 1-SPU chain's unpaced throughput on the same input, interleaved, each until {PROBE_MISSES} "
           "probes in a row fall behind, "
           f"for the predicate join above and for a join-bound one (\"sparse\": window {SCALE_JOINS[1][1]:g}, so "
           "each tuple is tested against ~10x as many, and the same predicate for one left value in 8, so still "
           "~1 pair per tuple and the sink in the driver stays light; S2J's case: the join, not the spouts and "
           f"the sink, bounds the rate). Falls behind: pair p50 >= "
           f"{KEPT_UP_MS} ms, or the job took longer than {SCALE_SLACK[0]}x its input's duration + "
           f"{SCALE_SLACK[1]:g} s), one round, each run at least {SCALE_SECONDS:g} s of input (its own oracle). "
           + scale_text, "",
           "![joins on worker processes](joins_chain.png)", ""]
    text = "\n".join(md)
    if args.out is not None:  # else the section goes into joins.md only
        (out / "joins_chain.md").write_text(text)
    return text


def plot(path: Path, configs, summaries, oracle) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no plot")
        return
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    part1 = [(c, s) for c, s in zip(configs, summaries) if c.part == 1]
    labels = [c.label.replace(" (symmetric hash join)", "\n(SHJ)").replace(", ", "\n")
              for c, _ in part1 if c.join == JOINS[0]]
    x = range(len(labels))
    for offset, join in zip((-0.27, 0, 0.27), JOINS):
        rows = [s for c, s in part1 if c.join == join]
        axes[0].bar([i + offset for i in x], [s["tuples_s"] for s in rows], 0.27,
                    yerr=[s["spread"] / 2 for s in rows], label=join)
    axes[0].set_xticks(list(x), labels, fontsize=7)
    axes[0].set_yscale("log")
    axes[0].set_ylabel("input tuples/s (submit -> wait)")
    axes[0].set_title("throughput, 2 worker processes")
    axes[0].legend(fontsize=8)
    zetas = [(c.zeta, s) for c, s in zip(configs, summaries) if c.part == 2]
    axes[1].plot([z for z, _ in zetas], [s["tuples_s"] for _, s in zetas], "o-", label="tuples/s")
    axes[1].set_xscale("log")
    axes[1].set_xlabel("zeta (tuples per block), 4 SPUs, predicate")
    axes[1].set_ylabel("input tuples/s")
    ax2 = axes[1].twinx()
    ax2.plot([z for z, _ in zetas], [s["p99_ms"] for _, s in zetas], "s--", color="tab:red")
    ax2.set_ylabel("pair p99 latency (ms)", color="tab:red")
    axes[1].set_title("zeta on a 4-SPU chain")
    for c, s in zip(configs, summaries):
        if c.part == 3 and c.label.startswith("2x"):
            axes[2].scatter(s["p99_ms"], 100 * s["pairs"] / oracle[c.join], s=60, label=c.label)
    axes[2].set_xlabel("pair p99 latency (ms)")
    axes[2].set_ylabel("result completeness (%)")
    axes[2].set_title("2x overload, 2-SPU predicate chain")
    axes[2].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


if __name__ == "__main__":
    main()
