"""Benchmark: what a checkpoint's read of the PEs' states does to the keyed loop's speed afterwards.

    python bench/loop_after_snapshot.py [--keys 50000] [--tuples 1000000] [--rounds 5] [--no-write]

A word count's count SPU runs every tuple through KeyedProcessing._process_keyed
(the PE lookup, the dirty stamp, `pe.process(view)`). Until 2026-11-27 the
checkpoint read each changed PE's state through `pe.__dict__`, which made CPython
3.11 keep a dict for that PE from then on, and the loop's `pe.process` lost its
specialisation for it: under 2 s checkpoints nearly every live PE had one after
the first checkpoint. The runtime's reader now asks `object.__getstate__`,
which looks at the dict only when it holds something (datapath/state_slots.py).

Three states of the same PEs (the bench's CountWord, a Zipf(1.1) stream over
`--keys` words), timed on the real loop taking turns every 50,000 tuples:
never read; read by a snapshot (the runtime's own `_encode_pes`); read through
`pe.__dict__` as the reader did before. Single-threaded, in this process.
"""

from __future__ import annotations

import argparse
import itertools
import platform
import random
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from _report import publish  # noqa: E402
from esault_wordcount import CountWord  # noqa: E402
from snapshot_encode import encoding_part  # noqa: E402
from esault.clock import SystemClock  # noqa: E402
from esault.datapath.keyed import KeyedProcessing  # noqa: E402
from esault.datapath.pending_snapshot import PendingSnapshot  # noqa: E402

MODES = ("never read", "read by a snapshot", "read through __dict__ (before)")


def zipf_stream(keys: list[str], tuples: int, seed: int = 7) -> list[str]:
    weights = list(itertools.accumulate(1.0 / rank ** 1.1 for rank in range(1, len(keys) + 1)))
    return random.Random(seed).choices(keys, cum_weights=weights, k=tuples)


def keyed_loop(keys: list[str], mode: str) -> KeyedProcessing:
    """The processing part of a count SPU under exactly_once over `keys`' PEs (made, so stamped dirty), read as
    `mode` says: snapshot_encode's encoding part, with what the batch loop uses besides."""
    part = encoding_part(CountWord, keys)
    part._pending, part._view = None, SimpleNamespace(source="", key=None, value=None)
    part.job = SimpleNamespace(clock=SystemClock())
    part.sampler = SimpleNamespace(record_many=lambda keys: None)
    if mode == MODES[1]:
        stamped = part.pes.end_period()
        part._encode_pes(PendingSnapshot(None, stamped, len(stamped), part.pes.last_period), stamped)  # type: ignore[arg-type]
    elif mode == MODES[2]:
        for pe in part.pes.active.values():
            pe.__dict__  # noqa: B018 - what the checkpoint's reader did
    return part


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--keys", type=int, default=50_000)
    ap.add_argument("--tuples", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    keys = [f"word{i}" for i in range(args.keys)]
    stream = zipf_stream(keys, args.tuples)
    values = [1] * len(stream)
    chunk = 50_000  # the three loops take turns a chunk at a time: this VM's speed drifts within seconds
    times: dict[str, list[float]] = {mode: [] for mode in MODES}
    for round_ in range(args.rounds):
        parts = {mode: keyed_loop(keys, mode) for mode in MODES}
        for part in parts.values():
            part._process_keyed("s", stream[:10_000], values[:10_000])  # the loop's bytecode specialises
        order = MODES if round_ % 2 == 0 else MODES[::-1]
        for start in range(0, len(stream), chunk):
            keys_, values_ = stream[start:start + chunk], values[start:start + chunk]
            for mode in order:
                started = time.perf_counter()
                parts[mode]._process_keyed("s", keys_, values_)
                times[mode].append((time.perf_counter() - started) / len(keys_))
        for part in parts.values():
            assert sum(pe.count for pe in part.pes.active.values()) == sum(map(len, keys)) + 10_000 + len(stream)
    ratios = {mode: statistics.median(t / b for t, b in zip(times[mode], times[MODES[0]])) for mode in MODES}
    lines = ["| the PEs' states | per tuple (median chunk) | vs never read (median of chunk ratios) |",
             "| --- | ---: | ---: |"]
    lines += [f"| {mode} | {statistics.median(times[mode]) * 1e9:.0f} ns | {ratios[mode]:.2f} |" for mode in MODES]
    text = (f"### The keyed loop after a checkpoint read its PEs\n\n`python bench/loop_after_snapshot.py` on "
            f"{time.strftime('%Y-%m-%d')}: {args.keys:,} CountWord PEs, {args.tuples:,} Zipf(1.1) tuples through "
            f"`KeyedProcessing._process_keyed`, {args.rounds} rounds, the three taking turns every 50,000 tuples, "
            f"one thread, Python {platform.python_version()}.\n\n" + "\n".join(lines))
    publish("loop-after-snapshot", text, write=not args.no_write)


if __name__ == "__main__":
    main()
