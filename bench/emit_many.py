"""Benchmark: a spout's batch into a key-grouped bolt, routed per pair against per batch.

    python bench/emit_many.py [--keys 100000] [--pairs 1000000] [--batch 1000] [--rounds 5] [--no-write]

A spout that emits batches (`Spout.emit_batch`: the Kafka source, the file
sources) straight into a key-grouped bolt routes each batch through the
output router's `emit_many` (datapath/emitter.py). It used to check the
batch's types, then call the SPU's emit() once per pair: a Python call, the
pair's types checked again and a cache lookup per pair. Now it looks every
key's buffer up in one C-level pass over the route's key -> buffer cache and
appends each pair to its buffer in one loop. Most of a pair's cost is that
lookup's cache misses (a 100k-key cache), which both paths pay. Both paths route the same Zipf(1.1) keys over 2
and 4 SPUs into real OutputRouter buffers, taking turns a chunk at a time
(this VM's speed drifts within seconds); the buffers must come out equal.
Single-threaded, in this process: the figure is the routing's own cost.
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
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from _report import publish  # noqa: E402
from esault.datapath.emitter import build_emit, build_emit_many  # noqa: E402
from esault.messages.handoff import RouteSpec  # noqa: E402
from esault.routing.interval_table import IntervalTable  # noqa: E402
from esault.routing.output_router import OutputRouter  # noqa: E402
from esault.transport.codec import _SIMPLE  # noqa: E402

PATHS = ("emit() per pair (before)", "emit_many, one pass per batch")


def router_over(spus: int) -> OutputRouter:
    """A sender's router with one key route over `spus` SPUs (a power of 2: equal hash intervals)."""
    table = IntervalTable(0)
    for _ in range(spus.bit_length() - 1):  # each SPU's interval in halves: 2, 4, 8 ... equal intervals
        for spu in list(table.spus()):
            table.split(spu, len(table))
    mailboxes = {spu: object() for spu in range(spus)}
    return OutputRouter(1, "source", [RouteSpec("count", "key", table.to_wire(), mailboxes, 1)])


def refuse(key: Any, value: Any) -> None:
    raise TypeError(f"the bench emits only simple values, got {key!r}, {value!r}")


def batch_paths(spus: int) -> dict[str, tuple[OutputRouter, Callable[[list, list], None]]]:
    """Each path's own router (so the two never share a cache) and its emit_many."""
    paths = {}
    for path in PATHS:
        router = router_over(spus)
        emit = build_emit(router, refuse)
        if path == PATHS[0]:  # the previous build_emit_many for a key route: the batch's types, then emit() per pair
            def per_pair(keys: list, values: list, emit: Callable[[Any, Any], None] = emit) -> None:
                if not _SIMPLE.issuperset(map(type, keys)) or not _SIMPLE.issuperset(map(type, values)):
                    for key, value in zip(keys, values):
                        refuse(key, value)
                for key, value in zip(keys, values):
                    emit(key, value)
            paths[path] = (router, per_pair)
        else:
            paths[path] = (router, build_emit_many(router, emit, refuse))
    return paths


def drained(router: OutputRouter) -> dict[int, list]:
    return {spu: list(buf) for spu, buf in router.routes[0].take()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--pairs", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=1000, help="pairs per emit_batch (a Kafka source's poll)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    vocabulary = [f"user-{i}" for i in range(args.keys)]
    weights = list(itertools.accumulate(1.0 / rank ** 1.1 for rank in range(1, args.keys + 1)))
    keys = random.Random(7).choices(vocabulary, cum_weights=weights, k=args.pairs)
    values = [b"payload-%d" % (i % 977) for i in range(args.pairs)]
    chunk = 50 * args.batch  # the paths take turns a chunk at a time
    rows = []
    for spus in (2, 4):
        times: dict[str, list[float]] = {path: [] for path in PATHS}
        for round_ in range(args.rounds):
            paths = batch_paths(spus)
            order = PATHS if round_ % 2 == 0 else PATHS[::-1]
            for start in range(0, args.pairs, chunk):
                for path in order:
                    router, emit_many = paths[path]
                    started = time.perf_counter()
                    for at in range(start, min(start + chunk, args.pairs), args.batch):
                        emit_many(keys[at:at + args.batch], values[at:at + args.batch])
                    times[path].append((time.perf_counter() - started) / min(chunk, args.pairs - start))
                outs = [drained(paths[path][0]) for path in PATHS]
                assert outs[0] == outs[1], "the two paths routed the batch differently"
        ratio = statistics.median(b / a for a, b in zip(times[PATHS[0]], times[PATHS[1]]))
        for path in PATHS:
            mine = statistics.median(t / a for a, t in zip(times[PATHS[0]], times[path]))
            rows.append(f"| {spus} | {path} | {statistics.median(times[path]) * 1e9:.0f} ns | {mine:.2f} |")
        print(f"{spus} SPUs: emit_many / per pair = {ratio:.2f}")
    text = (f"### A spout's batch into a key-grouped bolt\n\n`python bench/emit_many.py` on "
            f"{time.strftime('%Y-%m-%d')}: {args.pairs:,} Zipf(1.1) keys over {args.keys:,}, batches of "
            f"{args.batch:,} pairs (`Spout.emit_batch`), routed into real OutputRouter buffers, {args.rounds} rounds, "
            f"the two paths taking turns every {chunk:,} pairs, one thread, Python {platform.python_version()}; "
            "both fill the same buffers.\n\n"
            "| SPUs | path | per pair (median chunk) | vs emit() per pair (median of chunk ratios) |\n"
            "| ---: | --- | ---: | ---: |\n" + "\n".join(rows))
    publish("emit-many", text, write=not args.no_write)


if __name__ == "__main__":
    main()
