"""Benchmark: esault's multi-process data path against Bytewax and Pathway, scale-out, latency, memory.

    python bench/throughput.py                  # ~4 min on a 2-core machine; writes docs/PERFORMANCE.md
    python bench/throughput.py --words 2000000 --repeat 3 --no-write
    python bench/throughput.py --only wordcount # one section: wordcount, scaleout, latency, memory

Word count over one input file (bench/wordcount_input.py: 10M Zipf(1.1) words
from a 100k vocabulary, 10 per line, by default: several checkpoint intervals,
so exactly-once is paid for in the figure): lines -> split -> key-grouped count
(one PE per word) -> final counts, checked against collections.Counter.
Every round runs, back to back:

- a plain Python dict loop (one core: the practical ceiling of Python);
- esault on 2 worker processes (`LocalCluster(workers=2)`, as `esault run`),
  with the defaults a user gets (guarantee exactly_once, checkpoints every 2 s),
  spouts in the workers (placement="worker": each reads half the file; split
  runs chained into them);
- the same with guarantee at_least_once;
- with --variants: spouts in the driver, delivery tracking off, one process;
- Bytewax 0.21 on 2 processes and Pathway 0.33 on 2 threads (bench/peers.py),
  when installed (`pip install -e ".[bench]"`).

The machine is shared and noisy, so each figure is the median of the rounds
and every ratio divides figures of the same round. esault is timed from
submit() to job.wait() returning (start of its SPUs included), and separately
to job.stop() returning with the final counts written (the peers' time
includes writing their output); the peers from "go" to their run returning
(bench/peers.py). CPU is per process over the timed span.

Then, on 2 worker processes: a CPU-bound key-grouped bolt (pure Python, no
sleep) on 1, 2 and 4 SPUs, and one elastic SPU offered 1.3x what one SPU
carries (bench/scaleout.py); end-to-end latency (spout emit to count) at 70%
of the measured sustainable rate; memory of every process while a source
far faster than its bolt runs for a while.
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import importlib.metadata
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import esault_wordcount  # noqa: E402
import peers  # noqa: E402
import scaleout  # noqa: E402
from _report import write_section  # noqa: E402
from esault import JobConfig, LocalCluster  # noqa: E402
from wordcount_input import make_input, oracle  # noqa: E402

DOC = ROOT / "docs" / "PERFORMANCE.md"
FIGURE = ROOT / "docs" / "figures" / "throughput.png"
TARGET = 2_000_000  # words/s on 2 worker processes, default guarantee (issue #31)
PEER_RATIO = 3.0  # x the best peer in the same round (issue #31)


def stat_cpu_seconds(stat: Path) -> float:
    """User + system CPU seconds from a /proc stat file: /proc/PID/stat (a process, all its threads) or
    /proc/PID/task/TID/stat (one thread)."""
    fields = stat.read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid: int) -> float:
    return stat_cpu_seconds(Path(f"/proc/{pid}/stat"))


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


@dataclass
class Run:
    name: str
    words: int
    seconds: float | None  # submit -> processed (None: failed)
    with_output: float | None = None  # submit -> results written
    exact: bool = False
    cpu: dict[str, float] = field(default_factory=dict)  # process -> CPU share of the timed span
    note: str = ""

    @property
    def rate(self) -> float | None:
        return None if not self.seconds else self.words / self.seconds

    @property
    def rate_with_output(self) -> float | None:
        return None if not self.with_output else self.words / self.with_output


# --- the runs of one round -------------------------------------------------------------------


def run_dict_loop(path: Path, expected: collections.Counter) -> Run:
    started = time.perf_counter()
    counts: dict[str, int] = {}
    with path.open() as f:
        for line in f:
            for word in line.split():
                counts[word] = counts.get(word, 0) + 1
    seconds = time.perf_counter() - started
    return Run("plain Python dict loop, one core", sum(expected.values()), seconds, seconds, counts == expected)


def run_esault(cluster: LocalCluster, name: str, path: Path, expected: collections.Counter, *,
               acking: bool = True, spout_placement: str | None = "worker", guarantee: str | None = None,
               checkpoint_interval: float | None = None, stats: dict | None = None,
               on_processed: Callable[[], None] | None = None, checkpoint_storage: str | None = None) -> Run:
    """One esault word count; CPU per process of the cluster over submit -> processed.

    guarantee and checkpoint_interval None: JobConfig's defaults, what a user gets (exactly_once, 2 s).
    `stats` gets the job's checkpoint stats and its SPUs' snapshot encoding time; `on_processed` is called once every word is processed, before the
    job stops (its SPU threads still there: bench/checkpoints.py reads their CPU then)."""
    pids = {"driver": os.getpid()}
    if cluster.pool is not None:
        pids.update({f"w{i + 1}": p.pid for i, p in enumerate(cluster.pool.processes)})
    data = Path(tempfile.mkdtemp(prefix="esault-bench-"))
    topology = esault_wordcount.build(str(path), count_spus=2, spout_placement=spout_placement)
    before = {k: _cpu_seconds(p) for k, p in pids.items()}
    started = time.perf_counter()
    chosen = {k: v for k, v in (("guarantee", guarantee), ("checkpoint_interval", checkpoint_interval),
                                ("checkpoint_storage", checkpoint_storage)) if v is not None}
    job = cluster.submit(topology, JobConfig(data_dir=data, acking=acking, elasticity=False, **chosen))
    try:
        finished = job.wait(600)
        processed = time.perf_counter() - started
        after = {k: _cpu_seconds(p) for k, p in pids.items()}
        if on_processed is not None:
            on_processed()
    finally:
        job.stop()
    if stats is not None:
        stats["checkpoints"] = job.checkpoints.stats
        stats["job"] = job
        stats["snapshot_us"] = sum(unit.get("snapshot_us", 0) for unit in job.status()["units"].values())
    written = time.perf_counter() - started
    if not finished:
        return Run(name, sum(expected.values()), None, note=f"did not finish: {job.final_status}")
    exact = esault_wordcount.final_counts(data) == expected
    cpu = {k: (after[k] - before[k]) / processed for k in pids}
    return Run(name, sum(expected.values()), processed, written, exact, cpu)


def run_peer(fn: Callable[..., peers.PeerResult], name: str, path: Path, expected: collections.Counter) -> Run:
    r = fn(path, 2, expected=expected)
    if r.words_per_s is None:
        return Run(name, r.words, None, note=r.note)
    cpu = {"workers": r.cpu_s / r.seconds} if r.cpu_s and r.seconds else {}
    return Run(name, r.words, r.seconds, r.seconds, r.exact, cpu, r.note)


PEERS = {"Bytewax 0.21, 2 processes": ("bytewax", peers.run_bytewax),
         "Pathway 0.33, 2 threads": ("pathway", peers.run_pathway)}
ESAULT_2W = "esault, 2 worker processes, default guarantee (exactly_once)"
ESAULT_2W_ALO = "esault, 2 worker processes, at_least_once"
ESAULT_2W_DRIVER = "esault, 2 worker processes, spouts in the driver"
ESAULT_2W_OFF = "esault, 2 worker processes, tracking off"
ESAULT_1P = "esault, one process (LocalCluster())"


def wordcount_rounds(path: Path, expected: collections.Counter, repeat: int, variants: bool = False
                     ) -> list[dict[str, Run]]:
    """`repeat` rounds, each: the dict loop, esault (default guarantee, then at_least_once), the peers.

    `variants` adds spouts in the driver, tracking off and one process (at_least_once, as before)."""
    installed = {name: peers._version(dist) is not None for name, (dist, _) in PEERS.items()}
    rounds: list[dict[str, Run]] = []
    with LocalCluster(workers=2) as cluster, LocalCluster() as local:
        for i in range(repeat):
            runs: dict[str, Run] = {}
            runs["dict"] = run_dict_loop(path, expected)
            runs[ESAULT_2W] = run_esault(cluster, ESAULT_2W, path, expected)
            runs[ESAULT_2W_ALO] = run_esault(cluster, ESAULT_2W_ALO, path, expected, guarantee="at_least_once")
            if variants:
                runs[ESAULT_2W_DRIVER] = run_esault(cluster, ESAULT_2W_DRIVER, path, expected, spout_placement=None,
                                                    guarantee="at_least_once")
                runs[ESAULT_2W_OFF] = run_esault(cluster, ESAULT_2W_OFF, path, expected, acking=False,
                                                 guarantee="at_least_once")
                runs[ESAULT_1P] = run_esault(local, ESAULT_1P, path, expected, spout_placement=None,
                                             guarantee="at_least_once")
            for name, (_, fn) in PEERS.items():
                if installed[name]:
                    runs[name] = run_peer(fn, name, path, expected)
            rounds.append(runs)
            print(f"round {i + 1}: " + ", ".join(f"{n.split(',')[0]} {r.rate or 0:,.0f}" for n, r in runs.items()),
                  flush=True)
    return rounds


def median_of(rounds: list[dict[str, Run]], name: str, attr: str = "rate") -> float | None:
    values = [getattr(r[name], attr) for r in rounds if name in r and getattr(r[name], attr)]
    return statistics.median(values) if values else None


def best_peer_ratios(rounds: list[dict[str, Run]], name: str) -> list[float]:
    """Per round: esault's rate over the best peer's rate in that round."""
    out = []
    for runs in rounds:
        peer_rates = [runs[p].rate for p in PEERS if p in runs and runs[p].rate]
        if runs[name].rate and peer_rates:
            out.append(runs[name].rate / max(peer_rates))
    return out


# --- latency and memory --------------------------------------------------------------------------


def timed_run(cluster: LocalCluster, path: Path, words_per_s: float, seconds: float) -> tuple[Path, float]:
    """The latency topology over the first `words_per_s * seconds` words; (its data dir, seconds taken)."""
    lines = int(words_per_s * seconds / 10)  # 10 words per line
    cut = path.with_name(f"timed_{lines}.txt")
    with cut.open("w") as dst:
        while lines > 0:  # the input again and again, as long as the run needs
            with path.open() as src:
                for _, line in zip(range(lines), src):
                    dst.write(line)
                    lines -= 1
    data = Path(tempfile.mkdtemp(prefix="esault-latency-"))
    started = time.perf_counter()
    job = cluster.submit(esault_wordcount.build_timed(str(cut), words_per_s / 10),
                         JobConfig(data_dir=data, elasticity=False))
    try:
        if not job.wait(60 + 20 * seconds):
            raise RuntimeError(f"the latency run did not finish: {job.status()}")
        return data, time.perf_counter() - started
    finally:
        job.stop()


def latency_at(cluster: LocalCluster, path: Path, load: float = 0.7, seconds: float = 12.0,
               warmup: float = 3.0) -> dict[str, float]:
    """p50/p99/max end-to-end latency (spout emit -> count) at `load` x this topology's sustainable rate.

    The sustainable rate is measured first, with the source unthrottled. Tuples emitted in the first
    `warmup` seconds are left out: that is when every word's PE is created.
    """
    words = sum(1 for _ in path.open()) * 10
    _, took = timed_run(cluster, path, 1e9, words / 1e9)  # as fast as it goes: the whole file
    sustainable = words / took
    data, _ = timed_run(cluster, path, load * sustainable, seconds)
    samples = sorted(esault_wordcount.latency_samples(data, warmup))
    if not samples:
        return {}
    pick = lambda q: samples[min(len(samples) - 1, int(q * len(samples)))]  # noqa: E731
    return {"rate": load * sustainable, "sustainable": sustainable, "samples": len(samples), "p50": pick(0.50),
            "p99": pick(0.99), "max": samples[-1], "warmup": warmup}


def memory_under_overload(cluster: LocalCluster, seconds: float = 20.0) -> dict[str, list[tuple[float, float]]]:
    """RSS (MiB) of each process every 0.5 s while an unthrottled source feeds a CPU-bound bolt."""
    pids = {"driver": os.getpid(), **{f"w{i + 1}": p.pid for i, p in enumerate(cluster.pool.processes)}}
    total = 50_000_000  # far more than the bolt can take in `seconds`: the source is never exhausted
    job = cluster.submit(scaleout.topology(total, 2, 300, elastic=False),
                         JobConfig(data_dir=Path(tempfile.mkdtemp(prefix="esault-memory-")), elasticity=False,
                                   guarantee="at_least_once"))  # scaleout's KeySpout cannot rewind
    series: dict[str, list[tuple[float, float]]] = {k: [] for k in pids}
    started = time.perf_counter()
    gate = threading.Event()
    try:
        while (now := time.perf_counter() - started) < seconds:
            for k, p in pids.items():
                series[k].append((round(now, 1), _rss_mib(p)))
            gate.wait(0.5)
        series["processed"] = [(round(time.perf_counter() - started, 1),
                                job.status()["units"]["busy"]["processed"])]
    finally:
        job.stop()
    return series


# --- report --------------------------------------------------------------------------------------


def _fmt(x: float | None, spec: str = ",.0f") -> str:
    return "-" if x is None else format(x, spec)


def report(path: Path, expected: collections.Counter, rounds: list[dict[str, Run]] | None,
           scale: dict[str, Any] | None, latency: dict[str, float] | None,
           memory: dict[str, list] | None, started: float) -> str:
    lines: list[str] = []
    if rounds:
        dict_rate = median_of(rounds, "dict")
        lines += ["| run | words/s (median) | with results written | / dict loop | / best peer (per round) "
                  "| CPU per process (share of a core) | counts exact |",
                  "| --- | ---: | ---: | ---: | ---: | --- | :---: |"]
        names = ["dict", ESAULT_2W, ESAULT_2W_ALO, ESAULT_2W_DRIVER, ESAULT_2W_OFF, ESAULT_1P, *PEERS]
        for name in names:
            if not any(name in r for r in rounds):
                continue
            rate, out = median_of(rounds, name), median_of(rounds, name, "rate_with_output")
            ratios = best_peer_ratios(rounds, name) if name.startswith("esault") else []
            last = rounds[-1].get(name)
            cpu = ", ".join(f"{k} {v:.2f}" for k, v in last.cpu.items()) if last else ""
            label = rounds[0][name].name if name in rounds[0] else name
            lines.append(
                f"| {label} | {_fmt(rate)} | {_fmt(out)} | {_fmt(rate / dict_rate if rate and dict_rate else None, '.3f')}"
                f" | {_fmt(statistics.median(ratios) if ratios else None, '.2f')} | {cpu} "
                f"| {all(r[name].exact for r in rounds if name in r)} |")
        rate = median_of(rounds, ESAULT_2W)
        ratios = best_peer_ratios(rounds, ESAULT_2W)
        verdict = ("met" if rate and rate >= TARGET and ratios and statistics.median(ratios) >= PEER_RATIO
                   else "NOT met")
        lines += ["", f"**Target (>= {TARGET:,} words/s on 2 worker processes with the default guarantee, >= "
                      f"{PEER_RATIO:g}x the best peer in the same run): {verdict}** — median {_fmt(rate)} words/s, "
                      f"{_fmt(statistics.median(ratios) if ratios else None, '.2f')}x the best peer; every run: "
                      + ", ".join(f"{r[ESAULT_2W].rate or 0:,.0f}" for r in rounds) + " words/s."]
        notes = {r.note for runs in rounds for r in runs.values() if r.note and not r.rate}
        lines += [f"- failed: {n}" for n in sorted(notes)]
    if scale:
        r = scale["rates"]
        lines += ["", "### Scale-out: a CPU-bound key-grouped bolt on 2 worker processes", "",
                  "| SPUs | tuples/s | vs 1 SPU |", "| ---: | ---: | ---: |"]
        lines += [f"| {n} | {v:,.0f} | {v / r[1]:.2f} |" for n, v in r.items()]
        e = scale["elastic"]
        lines += ["", f"Elastic (monitor on, starting at 1 SPU, offered {e.offered:,.0f} tuples/s = 1.3x one SPU): "
                      f"SPUs over time (s, SPUs) {e.timeline}; at the peak the bolt's SPUs sat on "
                      f"{scale['peak_workers']} worker process(es)."]
    if latency:
        lines += ["", "### End-to-end latency at 70% of the sustainable rate (2 worker processes)", "",
                  f"Source held at {latency['rate']:,.0f} words/s: 70% of the {latency['sustainable']:,.0f} words/s this "
                  "topology sustained unthrottled in the same run (spouts in the workers; each value carries its "
                  "emit time); "
                  f"{latency['samples']:,} samples from the spout's emit to the count PE (after a "
                  f"{latency['warmup']:.0f} s warm-up, when every word's PE is created): "
                  f"p50 {latency['p50'] * 1e3:.1f} ms, p99 {latency['p99'] * 1e3:.1f} ms, "
                  f"max {latency['max'] * 1e3:.1f} ms (target p99 < 50 ms)."]
    if memory:
        procs = [k for k in memory if k != "processed"]
        peak = {k: max(v for _, v in memory[k]) for k in procs}
        early = {k: max(v for t, v in memory[k] if t <= 5.0) for k in procs}
        lines += ["", "### Memory under overload (source unthrottled, CPU-bound bolt, tracking on)", "",
                  "| process | RSS after 5 s (MiB) | peak RSS (MiB) |", "| --- | ---: | ---: |"]
        lines += [f"| {k} | {early[k]:.0f} | {peak[k]:.0f} |" for k in procs]
        lines += ["", "max_spout_pending (20,000 tuples here) bounds what is in flight, so memory levels off "
                      "instead of growing with the backlog."]
    versions = ", ".join(f"{d} {importlib.metadata.version(d)}" for d in ("pykka", "pyzmq", "msgpack")
                         if peers._version(d))
    lines += ["", f"`python bench/throughput.py` on {dt.date.today()}: {os.cpu_count()} CPUs, Python "
                  f"{platform.python_version()}, {versions}; input {sum(expected.values()):,} words "
                  f"({len(expected):,} distinct); whole bench {time.perf_counter() - started:.0f} s."]
    return "\n".join(lines)


def plot(rounds: list[dict[str, Run]] | None, scale: dict[str, Any] | None) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    if rounds:
        names = [n for n in (ESAULT_2W, ESAULT_2W_DRIVER, ESAULT_2W_OFF, ESAULT_1P, *PEERS)
                 if any(n in r for r in rounds)]
        rates = [(median_of(rounds, n) or 0) / 1e6 for n in names]
        axes[0].barh([n.replace(", ", "\n", 1) for n in names], rates, color="#4c72b0")
        axes[0].axvline(TARGET / 1e6, color="red", linestyle="--", label="target")
        axes[0].set_xlabel("M words/s (median)")
        axes[0].set_title("word count, 2M words")
        axes[0].invert_yaxis()
        axes[0].legend()
    if scale:
        r = scale["rates"]
        axes[1].bar([str(n) for n in r], [v / 1e3 for v in r.values()], color="#55a868")
        axes[1].set_xlabel("SPUs of the CPU-bound bolt (2 worker processes)")
        axes[1].set_ylabel("k tuples/s")
        axes[1].set_title("scale-out")
    fig.tight_layout()
    FIGURE.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(FIGURE, dpi=90)
    return True


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--words", type=int, default=10_000_000, help="input words (several checkpoint intervals)")
    ap.add_argument("--repeat", type=int, default=3, help="rounds of the word-count comparison")
    ap.add_argument("--only", choices=["wordcount", "scaleout", "latency", "memory"])
    ap.add_argument("--variants", action="store_true", help="also spouts in the driver, tracking off, one process")
    ap.add_argument("--no-write", action="store_true", help="print only; leave docs/ as it is")
    args = ap.parse_args()
    started = time.perf_counter()
    wanted = lambda section: args.only in (None, section)  # noqa: E731
    with tempfile.TemporaryDirectory(prefix="esault-throughput-") as tmp:
        path = make_input(Path(tmp) / "words.txt", words=args.words)
        expected = oracle(path)
        rounds = wordcount_rounds(path, expected, args.repeat, args.variants) if wanted("wordcount") else None
        scale = latency = memory = None
        with LocalCluster(workers=2) as cluster:
            if wanted("scaleout"):
                rates = {n: scaleout.run_fixed(cluster, n, 150_000, 300) for n in (1, 2, 4)}
                elastic = scaleout.run_elastic(cluster, rates[1], 300)
                peak_workers = elastic.peak_workers
                scale = {"rates": rates, "elastic": elastic, "peak_workers": peak_workers}
                print(f"scale-out {rates}; elastic {elastic.timeline}", flush=True)
            if wanted("latency"):
                latency = latency_at(cluster, path, 0.7)
                print(f"latency {latency}", flush=True)
            if wanted("memory"):
                memory = memory_under_overload(cluster)
                print("memory " + ", ".join(f"{k} {max(v for _, v in s):.0f} MiB" for k, s in memory.items()
                                            if k != "processed"), flush=True)
        text = report(path, expected, rounds, scale, latency, memory, started)
        text += ("\n\nWhere a word's time goes, stage by stage with flame graphs: `python bench/profile_wordcount.py` "
                 "(the sections below).")
        print("\n" + text)
        if not args.no_write:
            if plot(rounds, scale):
                text += f"\n\n![throughput and scale-out]({FIGURE.relative_to(DOC.parent)})"
            write_section(DOC, "throughput", text)


if __name__ == "__main__":
    main()
