"""Benchmark: what a keyed snapshot costs per changed key on the SPU's thread, the loop against the careful path.

    python bench/snapshot_encode.py [--keys 45000] [--rounds 7] [--no-write]

A word count's count SPU encodes ~45k changed keys at every checkpoint
(docs/PERFORMANCE.md, issue #31): KeyedProcessing._encode_pes, the loop with
everything in locals, against _encode_pe per key (the careful path, which the
loop used for every key before). Both encode the same PEs (state {"count": n},
and a state with a list of 5 words) into the same rows; the rows must be equal.
Rounds interleave the two; the best round of each is taken. Single-threaded,
in this process: the figure is the SPU's own time, not the job's.
"""

from __future__ import annotations

import argparse
import platform
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
from esault.datapath.pe_class import bucket_of_key, pe_class  # noqa: E402
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


def encoding_part(cls: type, keys: list[str]) -> KeyedProcessing:
    """The encoding half of a KeyedProcessing over `keys`' PEs (made, so stamped dirty)."""
    klass = pe_class(cls, print, print, None, None)

    def make(key: str) -> Any:
        pe = klass()
        pe.key, pe._esault_bucket = key, bucket_of_key(key)
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
    text = (f"### A keyed snapshot's encoding per changed key\n\n`python bench/snapshot_encode.py` on "
            f"{time.strftime('%Y-%m-%d')}: {args.keys:,} PEs, best of {args.rounds} interleaved rounds, one thread, "
            f"Python {platform.python_version()}.\n\n" + "\n".join(lines))
    publish("snapshot-encode", text, write=not args.no_write)


if __name__ == "__main__":
    main()
