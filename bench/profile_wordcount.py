"""Benchmark: where each nanosecond of a word goes in the word count on 2 worker processes.

    python bench/profile_wordcount.py                      # 10M words, both guarantees; writes docs/
    python bench/profile_wordcount.py --label before --words 2000000 --no-write

The word count of bench/throughput.py (TextFileSpout in the workers, split
chained, count per word on 2 SPUs, exactly-once and at-least-once). While each
job runs, py-spy samples both worker processes at 250 Hz for `--seconds`, only
the thread holding the GIL (`--gil`: a worker is one interpreter, so the GIL is
what its threads share), and writes a flame graph per worker to docs/figures/.
The samples are sorted into stages (bench/profile_stages.py) and each stage's
share of both workers' samples is applied to the workers' CPU time per word,
measured from /proc over the whole run (submit -> job done). What runs without
the GIL (zmq's I/O, SQLite's writes) is in the CPU time but not in the samples,
so the stages' nanoseconds are an approximation of the GIL time they cost.
Needs py-spy (`pip install py-spy`) and permission to attach to child processes.
"""

from __future__ import annotations

import argparse
import collections
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import esault_wordcount  # noqa: E402
from _report import write_section  # noqa: E402
from profile_stages import STAGES, stage_samples  # noqa: E402
from esault import JobConfig, LocalCluster  # noqa: E402
from wordcount_input import make_input, oracle  # noqa: E402

DOC = ROOT / "docs" / "PERFORMANCE.md"
FIGURES = ROOT / "docs" / "figures"
RATE = 250


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def spy(pid: int, seconds: float, fmt: str, out: Path) -> subprocess.Popen:
    return subprocess.Popen(["py-spy", "record", "--nonblocking", "--gil", "-r", str(RATE), "-d", str(max(1, round(seconds))),
                             "-f", fmt, "-o", str(out), "-p", str(pid)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def profile_one(cluster: LocalCluster, path: Path, expected: collections.Counter, guarantee: str, seconds: float,
                label: str, scratch: Path, svg: bool) -> dict:
    workers = {f"w{i + 1}": p.pid for i, p in enumerate(cluster.pool.processes)}
    data = Path(tempfile.mkdtemp(prefix="esault-profile-"))
    before = {k: cpu_seconds(p) for k, p in workers.items()}
    started = time.perf_counter()
    job = cluster.submit(esault_wordcount.build(str(path), count_spus=2, spout_placement="worker"),
                         JobConfig(data_dir=data, elasticity=False, guarantee=guarantee))
    time.sleep(1.0)  # past the SPUs' start: profile the steady state
    spies = []
    for name, pid in workers.items():
        spies.append(spy(pid, seconds, "raw", scratch / f"{guarantee}.{name}.raw"))
        if svg:
            FIGURES.mkdir(parents=True, exist_ok=True)
            spies.append(spy(pid, seconds, "flamegraph", FIGURES / f"profile_{label}_{guarantee}_{name}.svg"))
    for p in spies:
        p.wait(seconds + 60)
    finished = job.wait(600)
    elapsed = time.perf_counter() - started
    cpu = sum(cpu_seconds(p) - before[k] for k, p in workers.items())
    job.stop()
    words = sum(expected.values())
    exact = finished and esault_wordcount.final_counts(data) == expected
    samples: collections.Counter = collections.Counter()
    for name in workers:
        raw = scratch / f"{guarantee}.{name}.raw"
        if raw.exists():
            samples.update(stage_samples(raw.read_text().splitlines()))
    return {"guarantee": guarantee, "words_per_s": words / elapsed, "cpu_ns_per_word": cpu / words * 1e9,
            "samples": samples, "gil_share": sum(samples.values()) / (RATE * seconds * len(workers)), "exact": exact}


def table(runs: list[dict], label: str, words: int, seconds: float) -> str:
    head = "| stage | " + " | ".join(f"{r['guarantee']} ns/word | share" for r in runs) + " |"
    lines = [head, "| --- |" + " ---: | ---: |" * len(runs)]
    for stage in STAGES:
        cells = []
        for r in runs:
            total = sum(r["samples"].values()) or 1
            share = r["samples"][stage] / total
            cells.append(f"{share * r['cpu_ns_per_word']:.0f} | {share:.1%}")
        lines.append(f"| {stage} | " + " | ".join(cells) + " |")
    lines.append("| **all (worker CPU per word)** | " + " | ".join(
        f"**{r['cpu_ns_per_word']:.0f}** | 100%" for r in runs) + " |")
    rates = "; ".join(f"{r['guarantee']} {r['words_per_s']:,.0f} words/s, counts exact {r['exact']}, GIL held "
                      f"{r['gil_share']:.0%} of the sampled time" for r in runs)
    return (f"### Where a word's time goes: {label}\n\n"
            f"`python bench/profile_wordcount.py --label {label}` on {time.strftime('%Y-%m-%d')}: {words:,} Zipf words, "
            f"2 worker processes, py-spy --gil at {RATE} Hz for {seconds:g} s per worker per run, "
            f"{os.cpu_count()} CPUs, Python {platform.python_version()}. {rates}. Flame graphs: "
            + ", ".join(f"[{r['guarantee']} {w}](figures/profile_{label}_{r['guarantee']}_{w}.svg)"
                        for r in runs for w in ("w1", "w2")) + ".\n\n" + "\n".join(lines))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--words", type=int, default=10_000_000)
    ap.add_argument("--seconds", type=int, default=4)
    ap.add_argument("--label", default="after")
    ap.add_argument("--guarantees", default="exactly_once,at_least_once")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="esault-profile-"))
    path = make_input(scratch / "words.txt", words=args.words)
    expected = oracle(path)
    with LocalCluster(workers=2) as cluster:
        runs = [profile_one(cluster, path, expected, g, args.seconds, args.label, scratch, not args.no_write)
                for g in args.guarantees.split(",")]
    text = table(runs, args.label, args.words, args.seconds)
    print(text)
    if not args.no_write:
        write_section(DOC, f"profile-{args.label}", text)


if __name__ == "__main__":
    main()
