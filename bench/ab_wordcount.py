"""A/B the word count of two esault checkouts on this machine, interleaved, in one run.

For changes whose cost cannot be switched off (CurveZMQ: esault has no
plaintext mode), compare commits instead:

    git worktree add /tmp/before <rev>
    python bench/ab_wordcount.py /tmp/before . --rounds 4 --runs 2

Each round runs `--runs` word counts (2 worker processes, spouts in the
workers, tracking on, the throughput bench's 2M-word input) with checkout A,
then with checkout B, each in a fresh process whose PYTHONPATH is that
checkout, and prints words/s per run, medians and the per-round ratios B/A.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

RUNNER = """
import json, sys, tempfile, time
from pathlib import Path
root, path, runs, words = Path(sys.argv[1]).resolve(), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
sys.path[:0] = [str(root / "bench"), str(root)]
import esault, esault_wordcount
assert Path(esault.__file__).resolve().is_relative_to(root), esault.__file__
from esault import JobConfig, LocalCluster
rates = []
with LocalCluster(workers=2) as cluster:
    for _ in range(runs):
        topology = esault_wordcount.build(path, count_spus=2, spout_placement="worker")
        started = time.perf_counter()
        job = cluster.submit(topology, JobConfig(data_dir=Path(tempfile.mkdtemp()), acking=True, elasticity=False,
                                                 **({"guarantee": "at_least_once"} if "guarantee" in JobConfig.__dataclass_fields__ else {})))
        assert job.wait(600), job.status()
        rates.append(words / (time.perf_counter() - started))
        job.stop()
print(json.dumps(rates))
"""


def run_side(root: Path, path: Path, runs: int, words: int) -> list[float]:
    env = {**os.environ, "PYTHONPATH": str(root)}
    out = subprocess.run([sys.executable, "-c", RUNNER, str(root), str(path), str(runs), str(words)],
                         capture_output=True, text=True, env=env, cwd=tempfile.gettempdir(), timeout=1800)
    if out.returncode != 0:
        raise SystemExit(f"{root}: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("a", type=Path, help="checkout A (e.g. a git worktree of the commit before)")
    parser.add_argument("b", type=Path, help="checkout B")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--runs", type=int, default=2, help="word counts per side per round")
    parser.add_argument("--words", type=int, default=2_000_000)
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from wordcount_input import make_input

    path = make_input(Path(tempfile.mkdtemp()) / "words.txt", words=args.words)
    a_all: list[float] = []
    b_all: list[float] = []
    ratios = []
    for round_ in range(1, args.rounds + 1):
        a = run_side(args.a.resolve(), path, args.runs, args.words)
        b = run_side(args.b.resolve(), path, args.runs, args.words)
        a_all += a
        b_all += b
        ratios.append(statistics.mean(b) / statistics.mean(a))
        print(f"round {round_}: A {[round(x) for x in a]}, B {[round(x) for x in b]}, B/A {ratios[-1]:.2f}")
    print(f"| checkout | median words/s ({len(a_all)} runs) | range |\n| --- | ---: | ---: |")
    for name, rates in (("A " + str(args.a), a_all), ("B " + str(args.b), b_all)):
        print(f"| {name} | {statistics.median(rates):,.0f} | {min(rates):,.0f} - {max(rates):,.0f} |")
    print(f"per-round B/A: {', '.join(f'{r:.2f}' for r in ratios)}; mean {statistics.mean(ratios):.3f}")


if __name__ == "__main__":
    main()
