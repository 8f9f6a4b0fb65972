"""Naive sliding windows vs key windows: windows created, throughput and memory (PAPER_NOTES section 7).

    python bench/windows.py [--n 10000] [--seed 1]

One single-threaded run of each window core on the same input, as a window
bolt's SPU runs it: every tuple goes to its key's state (add), and every
`tick` tuples every key with pending windows advances to the SPU's watermark
(max timestamp - out-of-orderness). Input: n tuples over 200 s of event time
(ms timestamps, out of order by up to 50 ms), non-uniform keys: 5 very active
keys take 70% of the tuples, 2000 rare keys share the rest. Sliding windows of
10 s with slides of 1 s, 100 ms and 10 ms (slide/size 1/10, 1/100, 1/1000).

- windows created: naive: window accumulators created (one per key and window
  holding data); key windows: evaluations (one per change point, <= 2n);
- results emitted: what the bolt would send downstream;
- throughput: tuples/s through add + advance;
- memory: peak accumulators held across all keys (sampled at every tick) and
  peak msgpack bytes of all key states (what a checkpoint or a move carries,
  sampled at 10 ticks).
Prints a table; writes docs/results/windows.md and docs/figures/windows.png.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

from esault.aggregates import Sum  # noqa: E402
from esault.transport.codec import encode  # noqa: E402
from esault.windows import KeyWindows, Sliding, WatermarkTracker, WindowSet  # noqa: E402

SIZE = 10_000
SLIDES = [1_000, 100, 10]
SPAN = 200_000
BOUND = 50
TICK = 200
HOT, RARE, HOT_SHARE = 5, 2000, 0.7


def make_input(n: int, seed: int) -> list[tuple[str, int, int]]:
    """(key, ts, value) in arrival order: ts grows with position, out of order by up to BOUND."""
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        key = f"hot{rnd.randrange(HOT)}" if rnd.random() < HOT_SHARE else f"rare{rnd.randrange(RARE)}"
        ts = max(0, i * SPAN // n - rnd.randint(0, BOUND))
        out.append((key, ts, rnd.randint(1, 100)))
    return out


def run(core, items, count_created) -> dict:
    """Drive one core over the input; return its counts, time and memory."""
    states: dict = {}
    pending: set = set()
    tracker = WatermarkTracker(BOUND)
    created = emitted = 0
    peak_accs = peak_bytes = 0
    sample_every = max(1, len(items) // TICK // 10)
    started = time.perf_counter()
    measuring = 0.0
    for i, (key, ts, value) in enumerate(items):
        state = states.get(key)
        if state is None:
            state = states[key] = core.new_state()
        tracker.observe(ts)
        before = len(state["w"]) if count_created else 0
        emitted += len(core.add(state, ts, value))
        if count_created:
            created += len(state["w"]) - before
        pending.add(key)
        if i % TICK == TICK - 1:
            wm = tracker.watermark
            for k in list(pending):
                out = core.advance(states[k], wm)
                emitted += len(out)
                if not count_created:
                    created += len(out)
                if not core.pending(states[k]):
                    pending.discard(k)
            t0 = time.perf_counter()
            peak_accs = max(peak_accs, sum(accumulators(core, states[k]) for k in pending))
            if (i // TICK) % sample_every == 0:
                peak_bytes = max(peak_bytes, sum(len(encode(states[k])) for k in pending))
            measuring += time.perf_counter() - t0
    for k in list(pending):
        out = core.advance(states[k], math.inf)
        emitted += len(out)
        if not count_created:
            created += len(out)
    seconds = time.perf_counter() - started - measuring
    return {"created": created, "emitted": emitted, "tuples_per_s": len(items) / seconds, "seconds": seconds,
            "peak_accs": peak_accs, "peak_bytes": peak_bytes}


def accumulators(core, state) -> int:
    return len(state["w"]) if isinstance(core, WindowSet) else core.live_accumulators(state)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    items = make_input(args.n, args.seed)
    rows = []
    for slide in SLIDES:
        naive = run(WindowSet(Sliding(SIZE, slide), Sum()), items, count_created=True)
        keyw = run(KeyWindows(SIZE, slide, Sum()), items, count_created=False)
        rows.append((slide, naive, keyw))
        print(f"slide/size 1/{SIZE // slide}: naive {naive['created']:,} windows {naive['seconds']:.1f} s, "
              f"key windows {keyw['created']:,} windows {keyw['seconds']:.1f} s", flush=True)
    table = render(rows, args)
    print(table)
    (ROOT / "docs" / "results").mkdir(parents=True, exist_ok=True)
    (ROOT / "docs" / "results" / "windows.md").write_text(table + "\n")
    plot(rows)


def render(rows, args) -> str:
    lines = [
        f"`python bench/windows.py --n {args.n} --seed {args.seed}`: {args.n:,} tuples, {HOT} keys with "
        f"{HOT_SHARE:.0%} of them and {RARE} rare keys, sliding windows of {SIZE} ms, Sum, watermark bound "
        f"{BOUND} ms, advance every {TICK} tuples; one Python thread.",
        "",
        "| slide/size | variant | windows created | per tuple | results emitted | tuples/s | peak accumulators "
        "| peak state bytes |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for slide, naive, keyw in rows:
        for name, r in (("naive sliding", naive), ("key windows", keyw)):
            lines.append(f"| 1/{SIZE // slide} | {name} | {r['created']:,} | {r['created'] / args.n:.1f} | "
                         f"{r['emitted']:,} | {r['tuples_per_s']:,.0f} | {r['peak_accs']:,} | {r['peak_bytes']:,} |")
    lines.append("")
    lines.append("| slide/size | windows created, naive / key | throughput, key / naive | peak state bytes, naive / key |")
    lines.append("| --- | ---: | ---: | ---: |")
    for slide, naive, keyw in rows:
        lines.append(f"| 1/{SIZE // slide} | {naive['created'] / keyw['created']:.1f}x | "
                     f"{keyw['tuples_per_s'] / naive['tuples_per_s']:.1f}x | "
                     f"{naive['peak_bytes'] / max(1, keyw['peak_bytes']):.1f}x |")
    return "\n".join(lines)


def plot(rows) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no figure")
        return
    labels = [f"1/{SIZE // slide}" for slide, _, _ in rows]
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.6))
    for ax, field, title in zip(axes, ("created", "tuples_per_s", "peak_bytes"),
                                ("windows created", "tuples/s", "peak state bytes")):
        x = range(len(rows))
        ax.bar([i - 0.2 for i in x], [r[1][field] for r in rows], 0.4, label="naive sliding")
        ax.bar([i + 0.2 for i in x], [r[2][field] for r in rows], 0.4, label="key windows")
        ax.set_xticks(list(x), labels)
        ax.set_yscale("log")
        ax.set_title(title)
        ax.set_xlabel("slide / size")
    axes[0].legend()
    fig.tight_layout()
    path = ROOT / "docs" / "figures" / "windows.png"
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
