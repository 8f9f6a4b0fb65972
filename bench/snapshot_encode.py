"""Benchmark: what a keyed snapshot costs per changed key on the SPU's thread, the loop against the careful path.

    python bench/snapshot_encode.py [--keys 45000] [--rounds 7] [--no-write]

A word count's count SPU encodes ~45k changed keys at every checkpoint
(docs/PERFORMANCE.md, issue #31): KeyedProcessing._encode_pes, the loop with
everything in locals, against _encode_pe per key (the careful path, which the
loop used for every key before). Both encode the same PEs (state {"count": n},
and a state with a list of 5 words) into the same rows; the rows must be equal.
Rounds interleave the two; the best round of each is taken. Single-threaded,
in this process: the figure is the SPU's own time, not the job's.

Then where a key's time goes in the loop, as a live count SPU meets its PEs:
100k PEs made in a random order, 45k of them changed, listed in a random
order, encoded in slices of 1024. Steps are added one at a time, each a copy
of the loop with less in it, taking turns a round at a time: walking the list
(the stamp check and clear, the key and bucket, an append to the bucket's
list), then reading the state too, then the whole entry (the loop as it runs);
beside them the loop on PEs whose buckets are ints of their own, as they were
before each bucket number became one shared int (datapath/pe_class.py), and the
batch loop's gate, which encodes a pending PE on its own when a batch meets it
before its slice does (~10k of a count SPU's ~45k keys per checkpoint).
"""

from __future__ import annotations

import argparse
import platform
import random
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from _report import publish  # noqa: E402
from esault import Bolt  # noqa: E402
from esault.datapath.keyed import KeyedProcessing  # noqa: E402
from esault.checkpoint.store import bucket_of  # noqa: E402
from esault.datapath.pe_class import bucket_of_key, pe_class  # noqa: E402
from esault.keyhash import key_hash  # noqa: E402
from esault.datapath.pe_manager import PeManager  # noqa: E402
from esault.datapath.pending_snapshot import PendingSnapshot  # noqa: E402
from esault.transport.codec import encoder, raw_encoder  # noqa: E402


class Count(Bolt):
    def open(self, context: Any) -> None:
        self.count = 0


class Recent(Bolt):
    def open(self, context: Any) -> None:
        self.count = 0
        self.recent: list[str] = []


def encoding_part(cls: type, keys: list[str], bucket: Callable[[Any], int] = bucket_of_key) -> KeyedProcessing:
    """The encoding half of a KeyedProcessing over `keys`' PEs (made, so stamped dirty); `bucket` gives each PE's
    bucket as the SPU does (bucket_of_key: one shared int per bucket)."""
    klass = pe_class(cls, print, print, None, None)

    def make(key: str) -> Any:
        pe = klass()
        pe.key, pe._esault_bucket = key, bucket(key)
        pe.open(None)
        pe.count = len(key)
        if cls is Recent:
            pe.recent = [key] * 5
        return pe

    pes = PeManager(make, per_key=True, idle_timeout=None, track_touched=True)
    for key in keys:
        pes.create(key)
    part = KeyedProcessing.__new__(KeyedProcessing)
    part.pes, part.spu = pes, SimpleNamespace(state_is_dict=True, read_state=klass._esault_read_state)
    part._state_of = lambda key, pe: pe.snapshot_state()  # the careful path of a PE with state slots
    part._packer, part._pack = encoder(), raw_encoder()
    part.stats, part._snapshot_seconds, part._gate_calls = SimpleNamespace(snapshot_us=0), 0.0, 0
    return part


def per_key_path(part: KeyedProcessing) -> Callable[[PendingSnapshot, list], None]:
    def encode(pending: PendingSnapshot, dirty: list) -> None:
        for pe in dirty:
            part._encode_pe(pending, pe.key, pe)
    return encode


def timed(encode: Callable[[PendingSnapshot, list], None], pes: PeManager) -> tuple[float, list]:
    stamp = object()  # every PE changed in the epoch: it carries the snapshot's stamp until encoded
    dirty = list(pes.active.values())  # the epoch's dirty list: the PEs themselves (PeManager.marked)
    for pe in dirty:
        pe._esault_mark = stamp
    pending = PendingSnapshot(None, dirty, 1024, stamp)  # type: ignore[arg-type]
    started = time.perf_counter()
    encode(pending, dirty)
    return time.perf_counter() - started, pending.rows()


def walk(read: Callable[[Any], Any] | None = None) -> Callable[[PendingSnapshot, list], None]:
    """The loop without its packing: each changed PE's stamp, key and bucket, and its state read by `read` (or
    the key again, when None: the walk alone), appended to its bucket's list."""
    def encode(pending: PendingSnapshot, pes: list) -> None:
        stamp, entries = pending.stamp, pending.entries
        rows = entries.get
        for pe in pes:
            if pe._esault_mark is not stamp:
                continue
            pe._esault_mark = None
            key = pe.key
            item = key if read is None else read(pe)
            row = rows(pe._esault_bucket)
            if row is None:
                entries[pe._esault_bucket] = [key, item]
            else:
                row.append(key)
                row.append(item)
    return encode


def gate(part: KeyedProcessing) -> Callable[[PendingSnapshot, list], None]:
    """The batch loop's gate: each pending PE encoded on its own as the loop meets it (_encode_now)."""
    def encode(pending: PendingSnapshot, pes: list) -> None:
        stamp, now = pending.stamp, part._encode_now
        for pe in pes:
            if pe._esault_mark is stamp:
                now(pending, pe.key, pe)
    return encode


def key_steps(rounds: int) -> list[str]:
    """Table rows: per key, each step of the loop added, on PEs met in a random order (module docstring)."""
    rng = random.Random(3)
    words = [f"word{i}" for i in range(100_000)]
    rng.shuffle(words)  # the PE table is filled in first-seen order, the heap in allocation order
    part = encoding_part(Count, words)
    own_ints = encoding_part(Count, words, bucket=lambda key: bucket_of(key_hash(key)))
    every = list(part.pes.active.values())
    every_own = list(own_ints.pes.active.values())
    steps = {"walk: stamp, key, bucket, list append": walk(),
             "+ read the state (object.__getstate__)": walk(part.spu.read_state),
             "+ pack key and state, one entry (the loop)": part._encode_pes,
             "the loop, each PE's bucket an int of its own (before 2026-11-27)": own_ints._encode_pes,
             "the batch loop's gate, a key at a time (_encode_now)": gate(part)}
    per_key: dict[str, list[float]] = {name: [] for name in steps}
    for round_ in range(rounds):
        chosen = rng.sample(range(len(every)), 45_000)
        for name in (list(steps) if round_ % 2 == 0 else list(steps)[::-1]):
            dirty = [(every_own if name.startswith("the loop, each") else every)[i] for i in chosen]
            stamp = object()
            for pe in dirty:
                pe._esault_mark = stamp
            pending = PendingSnapshot(None, dirty, 1024, stamp)  # type: ignore[arg-type]
            started = time.perf_counter()
            while pending.left:
                steps[name](pending, pending.take_slice())
            per_key[name].append((time.perf_counter() - started) / len(dirty))
    loop = per_key[list(steps)[2]]  # ratios within a round: this VM's speed drifts between rounds
    return [f"| {name} | {statistics.median(times) * 1e9:.0f} ns | "
            f"{statistics.median(t / w for t, w in zip(times, loop)):.2f} |" for name, times in per_key.items()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--keys", type=int, default=45_000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    keys = [f"word{i}" for i in range(args.keys)]
    lines = ["| state | careful path, per key | the loop, per key | loop / careful | 45k keys by the loop |",
             "| --- | ---: | ---: | ---: | ---: |"]
    for cls, label in ((Count, '{"count": n}'), (Recent, '{"count": n, "recent": [5 words]}')):
        part = encoding_part(cls, keys)
        best = {"careful": float("inf"), "loop": float("inf")}
        rows = {}
        for _ in range(args.rounds):
            for name, encode in (("careful", per_key_path(part)), ("loop", part._encode_pes)):
                seconds, rows[name] = timed(encode, part.pes)
                best[name] = min(best[name], seconds)
        assert rows["careful"] == rows["loop"], "the loop must write the rows the careful path writes"
        careful, loop = (best[n] / len(keys) * 1e9 for n in ("careful", "loop"))
        lines.append(f"| `{label}` | {careful:.0f} ns | {loop:.0f} ns | {loop / careful:.2f} | "
                     f"{loop * 45_000 / 1e6:.1f} ms |")
    steps = key_steps(args.rounds)
    text = (f"### A keyed snapshot's encoding per changed key\n\n`python bench/snapshot_encode.py` on "
            f"{time.strftime('%Y-%m-%d')}: {args.keys:,} PEs, best of {args.rounds} interleaved rounds, one thread, "
            f"Python {platform.python_version()}.\n\n" + "\n".join(lines)
            + "\n\nWhere a key's time goes in the loop, on PEs met as a live SPU meets them (100k PEs made in a random "
            f"order, 45k changed, in a random order; median of {args.rounds} rounds, the steps taking turns):\n\n"
            "| the loop with | per key (median round) | of the loop's (median of the rounds' ratios) |\n"
            "| --- | ---: | ---: |\n" + "\n".join(steps))
    publish("snapshot-encode", text, write=not args.no_write)


if __name__ == "__main__":
    main()
