"""Stream join (S2J chain) benchmark: the chain's cost, zeta, and load shedding at 2x overload.

    python bench/joins.py [--tuples 10000] [--quick]

All on the pure model in one thread (esault/joins), as the runtime runs it
inside a PE: every tuple is ingested and the chain run to quiet.
1. Throughput and pair latency: a plain symmetric hash join (two dicts, one
   "SPU") vs the S2J chain with 1, 2 and 4 workers (zeta 20); equi-join on 50
   keys, window 2000 time units per stream.
2. zeta 1 / 20 / 100 on a 4-worker chain: throughput, messages per tuple,
   pair latency.
3. Shedding at 2x overload: arrivals at twice the measured capacity on a
   virtual clock (each tuple costs one service time, the 2-worker chain's
   measured cost per tuple, so the queueing is deterministic); without shedding the
   queue grows, with ShedPolicy (tau1 = 0.9) the admitted load is held at
   ~tau1: result completeness (pairs produced / pairs of all input) vs latency.
Prints a table and writes docs/results/joins.md and docs/results/joins.png.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections import defaultdict, deque
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

from _report import write_section  # noqa: E402
from esault.joins import JoinChain, JoinQuery, ShedPolicy  # noqa: E402
from esault.joins.queries import extractor  # noqa: E402

KEYS, WINDOW = 200, 2000
QUERY = JoinQuery("q", "equi", extractor("k", "on"), extractor("k", "on"))


def workload(n: int, seed: int = 7) -> list[tuple[str, int, dict]]:
    rng = random.Random(seed)
    clock = {"R": 0, "S": 0}
    out = []
    for _ in range(n):
        side = rng.choice("RS")
        clock[side] += 1
        out.append((side, clock[side], {"k": rng.randrange(KEYS)}))
    return out


class SymmetricHashJoin:
    """The baseline: one hash table per stream, probe the other, expire by the other stream's time."""

    def __init__(self, window: float) -> None:
        self.window = window
        self.tables = {"R": defaultdict(dict), "S": defaultdict(dict)}
        self.order = {"R": deque(), "S": deque()}
        self.seq = {"R": 0, "S": 0}

    def ingest(self, side: str, ts: float, value: dict) -> list:
        """Pairs as (R seq, S seq)."""
        other = "S" if side == "R" else "R"
        self.seq[side] += 1
        seq = self.seq[side]
        k = value["k"]
        found = [o for o, (ots, _) in self.tables[other][k].items() if abs(ts - ots) <= self.window]
        out = [(seq, o) for o in found] if side == "R" else [(o, seq) for o in found]
        self.tables[side][k][seq] = (ts, value)
        self.order[side].append((seq, ts, k))
        old = self.order[other]
        while old and old[0][1] < ts - self.window:
            seq, _, ok = old.popleft()
            del self.tables[other][ok][seq]
        return out


def clock() -> float:
    """This process's CPU seconds: other jobs on a shared machine do not inflate the figures."""
    return time.process_time()


def run(join, items) -> dict:
    """Ingest everything; pair latency = emission time - arrival of the pair's later tuple (CPU-time clock)."""
    arrived: dict[tuple[str, int], float] = {}
    latencies: list[float] = []
    pairs = 0
    seq = {"R": 0, "S": 0}
    start = clock()
    for side, ts, value in items:
        now = clock()
        seq[side] += 1
        arrived[(side, seq[side])] = now
        if isinstance(join, JoinChain):
            out = [(p.r[0], p.s[0]) for p in join.ingest(side, ts, value) + join.run()]
        else:
            out = join.ingest(side, ts, value)
        done = clock()
        for r, s in out:
            latencies.append(done - max(arrived[("R", r)], arrived[("S", s)]))
        pairs += len(out)
    if isinstance(join, JoinChain):
        out = join.drain()
        done = clock()
        latencies += [done - max(arrived[("R", p.r[0])], arrived[("S", p.s[0])]) for p in out]
        pairs += len(out)
    elapsed = clock() - start
    latencies.sort()
    return {"tuples_s": len(items) / elapsed, "pairs": pairs, "p50_ms": 1e3 * latencies[len(latencies) // 2],
            "p99_ms": 1e3 * latencies[int(len(latencies) * 0.99)],
            "msgs_per_tuple": (join.messages / len(items)) if isinstance(join, JoinChain) else 0.0}


def median_of(runs: list[dict]) -> dict:
    """Per field, the median over rounds (pairs must agree: the join is deterministic)."""
    assert len({r["pairs"] for r in runs}) == 1, "rounds produced different pairs"
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def overload(items, factor: float, shed: bool, unit_ms: float) -> dict:
    """Arrivals at `factor` x capacity on a virtual clock where each admitted tuple costs one service time
    (deterministic: the shared machine's noise stays out); latencies are converted to ms at `unit_ms`."""
    gap = 1.0 / factor
    chain = JoinChain([QUERY], WINDOW, zeta=20, workers=2)
    policy = ShedPolicy(tau0=0.0, tau1=0.9, tau2=10.0, sustain=1, max_shed=0.95)
    period = 200.0
    free_at = 0.0  # virtual time the join is free again
    arrivals: dict[str, dict[int, float]] = {"R": {}, "S": {}}
    seq = {"R": 0, "S": 0}
    latencies: list[float] = []
    pairs = 0
    window_start, offered = 0.0, 0.0
    for i, (side, ts, value) in enumerate(items):
        arrival = i * gap
        if arrival - window_start >= period:  # tau: the work offered in the period over its length
            if shed:
                policy.observe(offered / (arrival - window_start), chain.size)
            window_start, offered = arrival, 0.0
        offered += 1.0
        if shed and not policy.admit():
            continue
        free_at = max(arrival, free_at) + 1.0
        seq[side] += 1
        arrivals[side][seq[side]] = arrival
        out = chain.ingest(side, ts, value) + chain.run()
        latencies += [free_at - max(arrivals["R"][p.r[0]], arrivals["S"][p.s[0]]) for p in out]
        pairs += len(out)
    out = chain.drain()  # end of input: the pairs still waiting to cross
    latencies += [free_at - max(arrivals["R"][p.r[0]], arrivals["S"][p.s[0]]) for p in out]
    pairs += len(out)
    latencies.sort()
    return {"pairs": pairs, "p50_ms": unit_ms * latencies[len(latencies) // 2],
            "p99_ms": unit_ms * latencies[int(len(latencies) * 0.99)], "shed": policy.shed,
            "admitted": len(items) - policy.shed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tuples", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="5000 tuples (a smoke run)")
    args = parser.parse_args()
    n = 5000 if args.quick else args.tuples
    items = workload(n)
    configs = [("symmetric hash join, 1 SPU", "-", lambda: SymmetricHashJoin(WINDOW))]
    configs += [(f"S2J chain, {w} worker(s)", 20, lambda w=w: JoinChain([QUERY], WINDOW, zeta=20, workers=w))
                for w in (1, 2, 4)]
    configs += [(f"S2J chain, 4 workers, zeta {z}", z, lambda z=z: JoinChain([QUERY], WINDOW, zeta=z, workers=4))
                for z in (1, 20, 100)]
    results: list[list[dict]] = [[] for _ in configs]
    for _ in range(args.rounds):  # interleaved rounds, median: the machine is shared
        for i, (_, _, make) in enumerate(configs):
            results[i].append(run(make(), items))
    rows = [(name, zeta, median_of(rs)) for (name, zeta, _), rs in zip(configs, results)]
    base = rows[0][2]
    zetas = [(zeta, r) for name, zeta, r in rows[4:]]
    assert all(r[2]["pairs"] == base["pairs"] for r in rows), "every configuration must produce the same pairs"
    full = base["pairs"]
    unit_ms = 1e3 / rows[2][2]["tuples_s"]  # one service time: the 2-worker chain's measured cost per tuple
    sheds = [("2x overload, no shedding", overload(items, 2.0, False, unit_ms)),
             ("2x overload, shedding (tau1 0.9)", overload(items, 2.0, True, unit_ms))]

    lines = [f"{'configuration':40} {'zeta':>5} {'tuples/s':>10} {'x SHJ':>6} {'msgs/tuple':>10} "
             f"{'p50 ms':>8} {'p99 ms':>8}"]
    for name, zeta, r in rows:
        lines.append(f"{name:40} {zeta!s:>5} {r['tuples_s']:>10.0f} {r['tuples_s'] / base['tuples_s']:>6.2f} "
                     f"{r['msgs_per_tuple']:>10.2f} {r['p50_ms']:>8.3f} {r['p99_ms']:>8.2f}")
    lines.append("")
    lines.append(f"{'overload run':40} {'shed':>7} {'complete':>9} {'p50 ms':>9} {'p99 ms':>9}")
    for name, r in sheds:
        lines.append(f"{name:40} {r['shed']:>7} {r['pairs'] / full:>9.1%} {r['p50_ms']:>9.1f} {r['p99_ms']:>9.1f}")
    print("\n".join(lines))
    write_results(n, rows, zetas, sheds, full)


def write_results(n, rows, zetas, sheds, full) -> None:
    out = ROOT / "docs" / "results"
    out.mkdir(parents=True, exist_ok=True)
    md = [f"# Stream join benchmark (bench/joins.py, {n} tuples, equi-join, {KEYS} keys, window {WINDOW})", "",
          "One thread, the pure model as the runtime runs it in a PE; the chain is run to quiet after every "
          "tuple. Times are this process's CPU time (the machine is shared), medians of 3 interleaved rounds. "
          "Produced by `python bench/joins.py`; every configuration produced the same "
          f"{full} pairs (checked).", "",
          "| configuration | zeta | tuples/s | vs SHJ | messages/tuple | pair p50 ms | pair p99 ms |",
          "| --- | --- | --- | --- | --- | --- | --- |"]
    base = rows[0][2]["tuples_s"]
    for name, zeta, r in rows:
        md.append(f"| {name} | {zeta} | {r['tuples_s']:.0f} | {r['tuples_s'] / base:.2f} | "
                  f"{r['msgs_per_tuple']:.2f} | {r['p50_ms']:.3f} | {r['p99_ms']:.2f} |")
    md += ["", "2x overload: arrivals at twice the capacity on a virtual clock (an admitted tuple costs one "
           "service time, the 2-worker chain's measured time per tuple); latency includes queueing, so without "
           "shedding it grows with the length of the run.", "",
           "| 2x overload (virtual clock) | tuples shed | completeness | pair p50 ms | pair p99 ms |",
           "| --- | --- | --- | --- | --- |"]
    for name, r in sheds:
        md.append(f"| {name} | {r['shed']} | {r['pairs'] / full:.1%} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} |")
    md += ["", "![joins](joins.png)", ""]
    write_section(out / "joins.md", "joins", "\n".join(md))  # bench/join_chain.py's section stays
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no plot")
        return
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    names = [r[0].replace("S2J chain, ", "").replace("symmetric hash join, 1 SPU", "SHJ") for r in rows[:4]]
    axes[0].bar(names, [r[2]["tuples_s"] for r in rows[:4]], color="tab:blue")
    axes[0].set_ylabel("tuples/s (one thread)")
    axes[0].set_title("throughput: SHJ vs chain")
    axes[0].tick_params(axis="x", labelrotation=20)
    axes[1].plot([z for z, _ in zetas], [r["msgs_per_tuple"] for _, r in zetas], "o-", label="messages/tuple")
    axes[1].set_xscale("log")
    axes[1].set_xlabel("zeta (tuples per block)")
    axes[1].set_ylabel("messages per tuple")
    ax2 = axes[1].twinx()
    ax2.plot([z for z, _ in zetas], [r["p99_ms"] for _, r in zetas], "s--", color="tab:red", label="p99 ms")
    ax2.set_ylabel("pair p99 latency (ms)", color="tab:red")
    axes[1].set_title("zeta: messages vs latency (4 workers)")
    for name, r in sheds:
        axes[2].scatter(r["p99_ms"], 100 * r["pairs"] / full, s=60, label=name)
    axes[2].set_xscale("log")
    axes[2].set_xlabel("pair p99 latency (ms, virtual clock)")
    axes[2].set_ylabel("result completeness (%)")
    axes[2].set_title("2x overload")
    axes[2].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "joins.png", dpi=90)


if __name__ == "__main__":
    main()
