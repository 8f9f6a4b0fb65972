"""Benchmark: TAG grouping against key grouping, shuffle + combine and Partial Key Grouping, on skewed keys
with one slowed SPU (PAPER_NOTES section 7; docs/GROUPING.md).

    python bench/tag.py                 # ~1.5 minutes: 2 inputs x 4 groupings x (saturated + paced run)
    python bench/tag.py --quick         # ~30 s smoke run, nothing written
    python bench/tag.py --parallelism 12 --slow 4 --cost 0.0002

Workload: a per-key count (the aggregate API's Count) whose first stage costs
`cost` seconds per tuple (a lookup that releases the GIL, like a remote call),
`slow` times that on the first SPU (a slowed worker). Inputs: Zipf(s=1.2) keys
over 50,000 ranks, and the words of a real text corpus shipped on this machine
(vim's help files, else the Python standard library's sources).

Plans (TopologyBuilder.aggregate with the grouping named):
- key:         one key-grouped stage; the hot key's SPU and the slow SPU bound it;
- shuffle:     round robin to partial SPUs, partials merged per key downstream;
- partial_key: PKG, the less loaded of two hash choices by what each sender sent;
- tag:         TAG: heavy keys on SPUs drawn by 1/t_i, least t_i x queue; light keys PKG-like with t_i.

Per input and plan, two runs in one process (LocalCluster threads; SPUs are
threads, the per-tuple cost sleeps so SPUs run in parallel):
1. saturated: `tuples` tuples as fast as max_spout_pending lets them in -> throughput;
2. paced: the same plan offered `paced_share` of what an even, speed-blind split sustains
   (parallelism x the slow SPU's rate) for `paced_seconds`
   -> end-to-end latency (spout emit -> the final stage's per-key aggregate includes it), mean and p99.
Writes docs/results/tag.md (--no-write to skip).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np

from esault import JobConfig, LocalCluster, Spout, TopologyBuilder
from esault.aggregates import Aggregate
from esault.dsl.aggregation import FinalAggregate, PartialAggregate, aggregate_to_wire

PLANS = ("key", "shuffle", "partial_key", "tag")
LAT: list[float] = []
"""End-to-end seconds of every tuple the final stage folded in (this process)."""
_LAT_LOCK = threading.Lock()
INPUTS: dict[str, list[str]] = {}
DEBT: dict[tuple[str, int], float] = {}


class TimedCount(Aggregate[list]):
    """Count whose values are emit times: the final stage records each tuple's end-to-end latency."""

    def create(self) -> list:
        return [0, []]

    def add(self, acc: list, value: float) -> list:
        acc[1].append(value)
        return [acc[0] + 1, acc[1]]

    def merge(self, a: list, b: list) -> list:
        now = time.monotonic()
        lat = [now - t for t in b[1]]
        with _LAT_LOCK:
            LAT.extend(lat)
        return [a[0] + b[0], []]

    def result(self, acc: list) -> int:
        return acc[0]


class KeyTimedCount(TimedCount):
    """One-stage (key grouping): the latency is taken when the key's PE adds the tuple."""

    def add(self, acc: list, value: float) -> list:
        with _LAT_LOCK:
            LAT.append(time.monotonic() - value)
        return [acc[0] + 1, []]


def work(unit: str, context: Any, cost: float, slow: float) -> tuple[tuple[str, int], float]:
    return (unit, context.spu_id), cost * (slow if context.instance == 0 else 1.0)


def pay(slot: tuple[str, int], cost: float) -> None:
    """Accrue the per-tuple cost; sleep it off in >= 2 ms steps (a sleep per tuple would cost more than it)."""
    debt = DEBT.get(slot, 0.0) + cost
    if debt >= 0.002:
        time.sleep(debt)
        debt = 0.0
    DEBT[slot] = debt


class Costly:
    """Mixed into an aggregate stage: each tuple costs `cost` seconds of its SPU (`slow` times that on SPU 0)."""

    def __init__(self, aggregate: Any, cost: float, slow: float) -> None:
        super().__init__(aggregate)
        self._cost, self._slow = cost, slow

    def open(self, context: Any) -> None:
        self._slot, self._my_cost = work(context.unit, context, self._cost, self._slow)

    def process(self, tup: Any) -> None:
        pay(self._slot, self._my_cost)
        super().process(tup)


class WorkPartial(Costly, PartialAggregate):
    """The partial stage of the two-stage plans, at the work's cost."""


class WorkFinal(Costly, FinalAggregate):
    """Key grouping's only stage: the same per-tuple cost, shared by the PEs of one SPU."""


class WordSpout(Spout):
    """Emits (word, emit time), tracked, as fast as allowed (rate None) or at `rate` per second."""

    def __init__(self, input: str, total: int, rate: float | None = None, chunk: int = 256) -> None:
        self.input, self.total, self.rate, self.chunk = input, total, rate, chunk
        self.position = 0

    def open(self, context: Any) -> None:
        self.words = INPUTS[self.input]
        self.t0 = time.monotonic()

    def next_tuple(self) -> None:
        if self.position >= self.total:
            self.finish()
            return
        now = time.monotonic()
        end = min(self.total, self.position + self.chunk)
        if self.rate is not None:
            due = int((now - self.t0) * self.rate)
            end = min(end, due - due % 64)  # whole slots of 64: batches, not a message per tuple
            if end <= self.position:
                return
        words, w, emit = self.words, len(self.words), self.emit
        for i in range(self.position, end):
            emit(words[i % w], now, i)
        self.position = end


def build(plan: str, input: str, total: int, rate: float | None, p: int, cost: float, slow: float):
    b = TopologyBuilder(f"tag-bench-{plan}")
    b.set_spout("words", WordSpout, params={"input": input, "total": total, "rate": rate})
    opts = {"elastic": False}
    if plan == "key":
        b.set_bolt("agg", WorkFinal, p, params={"aggregate": aggregate_to_wire(KeyTimedCount()), "cost": cost,
                                                "slow": slow}, **opts).key_grouping("words")
        return b.build()
    wire = aggregate_to_wire(TimedCount())
    declarer = b.set_bolt("agg_partial", WorkPartial, p, params={"aggregate": wire, "cost": cost, "slow": slow},
                          chain=False, **opts)
    getattr(declarer, f"{plan}_grouping")("words")
    b.set_bolt("agg", FinalAggregate, 2, params={"aggregate": wire, "merge": True}, **opts).key_grouping("agg_partial")
    return b.build()


def run(cluster: LocalCluster, plan: str, input: str, total: int, rate: float | None, args, data: Path) -> dict:
    LAT.clear()
    DEBT.clear()
    config = JobConfig(data_dir=data, guarantee="at_least_once", elasticity=False,
                       max_spout_pending=args.max_pending, message_timeout=120.0)
    started = time.monotonic()
    job = cluster.submit(build(plan, input, total, rate, args.parallelism, args.cost, args.slow), config)
    if not job.wait(300):
        raise SystemExit(f"{plan}/{input}: did not finish: {job.status()}")
    wall = time.monotonic() - started
    status = job.status()["units"]
    first = status["agg" if plan == "key" else "agg_partial"]
    shares = sorted((s["processed"] for s in first["spus"].values()), reverse=True)
    job.stop()
    lat = np.asarray(LAT)
    if len(lat) != total:
        raise SystemExit(f"{plan}/{input}: the final stage folded {len(lat)} tuples, expected {total}")
    return {"wall": wall, "tps": total / wall, "mean_ms": float(lat.mean() * 1e3),
            "p99_ms": float(np.percentile(lat, 99) * 1e3), "max_share": shares[0] / total,
            "slow_share": first["spus"][min(first["spus"])]["processed"] / total,
            "final_in": status["agg"]["processed"]}


def corpus_words(limit: int) -> tuple[list[str], str]:
    vim = sorted(Path("/usr/share/vim").glob("vim*/doc/*.txt"))
    files, name = (vim, "vim help files") if vim else (sorted(Path(np.__file__).parents[1].glob("*.py")),
                                                       "Python sources")
    words: list[str] = []
    for f in files:
        words += re.findall(r"[a-z]+", f.read_text(errors="ignore").lower())
        if len(words) >= limit:
            break
    return words[:limit], f"{name} ({len(files)} files searched, {len(set(words[:limit])):,} distinct words)"


def zipf_words(n: int, s: float, ranks: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, ranks + 1) ** s
    ids = rng.choice(ranks, size=n, p=p / p.sum())
    return [f"w{i}" for i in ids]


def top_share(words: list[str]) -> float:
    _, counts = np.unique(words, return_counts=True)
    return counts.max() / len(words)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tuples", type=int, default=60_000, help="tuples per saturated run")
    ap.add_argument("--parallelism", type=int, default=8, help="SPUs of the first stage")
    ap.add_argument("--cost", type=float, default=2e-4, help="seconds per tuple in the first stage")
    ap.add_argument("--slow", type=float, default=4.0, help="the first SPU is this many times slower")
    ap.add_argument("--paced-share", type=float, default=0.6,
                    help="paced runs offer this share of what a speed-blind even split sustains (n / (slow x cost))")
    ap.add_argument("--paced-seconds", type=float, default=4.0)
    ap.add_argument("--max-pending", type=int, default=4000, help="max_spout_pending")
    ap.add_argument("--inputs", default="zipf,text", help="comma-separated: zipf, text")
    ap.add_argument("--plans", default=",".join(PLANS), help=f"comma-separated, of {', '.join(PLANS)} "
                    "(partial_key is the baseline of the 'vs PKG' columns)")
    ap.add_argument("--quick", action="store_true", help="fewer tuples, nothing written")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    inputs, plans = args.inputs.split(","), args.plans.split(",")
    if not set(inputs) <= {"zipf", "text"} or not set(plans) <= set(PLANS) or "partial_key" not in plans:
        raise SystemExit(f"--inputs must name zipf and/or text, --plans some of {PLANS} including partial_key")
    if (inputs, plans) != (["zipf", "text"], list(PLANS)):
        args.no_write = True  # docs/results/tag.md holds full runs only
    if args.quick:
        args.tuples, args.paced_seconds, args.no_write = 15_000, 2.0, True
    n = max(args.tuples, int(args.paced_seconds * args.parallelism / args.cost) + 1)
    INPUTS["zipf"] = zipf_words(n, 1.2, 50_000, seed=1)
    INPUTS["text"], corpus = corpus_words(n)
    capacity = (args.parallelism - 1 + 1 / args.slow) / args.cost
    rate = args.paced_share * args.parallelism / (args.slow * args.cost)
    paced_total = int(rate * args.paced_seconds)
    rows = []
    import tempfile
    with tempfile.TemporaryDirectory() as tmp, LocalCluster() as cluster:
        for input in inputs:
            for plan in plans:
                sat = run(cluster, plan, input, args.tuples, None, args, Path(tmp) / f"{plan}-{input}-s")
                paced = run(cluster, plan, input, paced_total, rate, args, Path(tmp) / f"{plan}-{input}-p")
                rows.append({"input": input, "plan": plan, **{f"sat_{k}": v for k, v in sat.items()},
                             **{f"paced_{k}": v for k, v in paced.items()}})
                r = rows[-1]
                print(f"{input:5} {plan:12} {r['sat_tps']:9,.0f} t/s  saturated mean {r['sat_mean_ms']:8.1f} ms "
                      f"p99 {r['sat_p99_ms']:8.1f}  | paced mean {r['paced_mean_ms']:7.1f} ms "
                      f"p99 {r['paced_p99_ms']:7.1f}  | busiest SPU {r['sat_max_share']:.1%}, slow SPU "
                      f"{r['sat_slow_share']:.1%}, final stage in {r['sat_final_in']:,}", flush=True)
    md = report(rows, args, corpus, capacity, rate)
    print("\n" + md)
    if not args.no_write:
        out = ROOT / "docs" / "results" / "tag.md"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(md)
        print(f"wrote {out}")


def report(rows: list[dict], args, corpus: str, capacity: float, rate: float) -> str:
    lines = [
        "# TAG grouping: measured (bench/tag.py)", "",
        f"Per-key count, first stage {args.parallelism} SPUs at {args.cost * 1e6:.0f} us per tuple, SPU 0 "
        f"{args.slow:g}x slower (ideal capacity {capacity:,.0f} t/s). Saturated: {args.tuples:,} tuples as fast "
        f"as max_spout_pending={args.max_pending} allows. Paced: {rate:,.0f} t/s ({args.paced_share:.0%} of what an "
        f"even split blind to speed sustains, {args.parallelism} x the slow SPU's rate) for {args.paced_seconds:g} s. Latency: spout emit -> the final per-key aggregate includes "
        "the tuple. One process (LocalCluster threads), at_least_once, no elasticity.", "",
        f"Inputs: zipf = Zipf(s=1.2) over 50,000 ranks (top key "
        f"{top_share(INPUTS['zipf']):.1%}); text = words of {corpus} (top word {top_share(INPUTS['text']):.1%}). "
        f"Machine load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs.", "",
        "| input | plan | throughput t/s | vs PKG | sat. mean ms | sat. p99 ms | paced mean ms | paced p99 ms "
        "| vs PKG (paced mean) | busiest SPU | slow SPU | final stage tuples |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        pkg = next(x for x in rows if x["input"] == r["input"] and x["plan"] == "partial_key")
        lines.append(
            f"| {r['input']} | {r['plan']} | {r['sat_tps']:,.0f} | {r['sat_tps'] / pkg['sat_tps'] - 1:+.0%} "
            f"| {r['sat_mean_ms']:.0f} | {r['sat_p99_ms']:.0f} | {r['paced_mean_ms']:.1f} | {r['paced_p99_ms']:.1f} "
            f"| {r['paced_mean_ms'] / pkg['paced_mean_ms'] - 1:+.0%} | {r['sat_max_share']:.1%} "
            f"| {r['sat_slow_share']:.1%} | {r['sat_final_in']:,} |")
    lines += ["", "busiest SPU / slow SPU: share of the first stage's tuples processed by its busiest SPU and by "
              f"the slowed one (fair: {1 / args.parallelism:.1%}). final stage tuples: partials the merge stage "
              "received in the saturated run (key grouping: the raw tuples, one stage)."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
