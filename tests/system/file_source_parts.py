"""Parts of the shared text file tests: a paced TextFileSpout whose instance 0 can be held at one step of
the shared-ranges protocol (asked for a block, granted one, reading one), so a test can kill -9 its worker
there. Worker processes import this by module name (tests/system is on their path)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from esault import TextFileSpout, TopologyBuilder

import eo_parts
import wordcount  # examples/, on sys.path in the tests and their workers

STEPS = ("asked", "granted", "reading")
"""asked: its request is sent, no answer handled; granted: a block is leased to it, not recorded yet;
reading: a leased block is half read."""


class GatedTextFileSpout(TextFileSpout):
    """At most `rate` lines/s per instance (`rate0` for instance 0). Instance 0 of the first launch holds at
    its `after`-th `step` once a checkpoint completed (so the rollback restores a position with blocks read):
    it writes its process id to `<gate>.reached`, then waits while the file `gate` exists. Under at_least_once
    (no checkpoints) it holds at its `after`-th `step` at once."""

    def __init__(self, path: str, gate: str = "", step: str = "", after: int = 4, rate: float = 600.0,
                 rate0: float | None = None, **kwargs: Any) -> None:
        super().__init__(path, **kwargs)
        self.gate, self.step, self.after, self.rate, self.rate0 = gate, step, after, rate, rate0
        self._seen = {s: 0 for s in STEPS}
        self._lines = 0
        self._started: float | None = None
        self._completed = 0

    def open(self, context: Any) -> None:
        super().open(context)
        self._gated = bool(self.gate) and context.instance == 0 and context.restored_epoch is None
        self._needs_checkpoint = context.guarantee == "exactly_once"
        if self.rate0 is not None and context.instance == 0:
            self.rate = self.rate0
        self._record = Path(context.data_dir) / f"lines-read-{context.instance}.txt"

    def close(self) -> None:
        self._record.write_text(str(self._lines))
        super().close()

    def on_checkpoint_complete(self, epoch: int, position: Any) -> None:
        self._completed += 1

    def _at(self, step: str) -> None:
        if not self._gated or step != self.step or (self._needs_checkpoint and not self._completed):
            return
        self._seen[step] += 1
        if self._seen[step] == self.after and not os.path.exists(self.gate + ".reached"):
            # Written whole, then renamed: the test reads the pid as soon as the name exists.
            Path(self.gate + ".reached.tmp").write_text(str(os.getpid()))
            os.replace(self.gate + ".reached.tmp", self.gate + ".reached")
            eo_parts.hold_while(self.gate)

    def _ask(self) -> None:
        super()._ask()
        self._at("asked")

    def on_range(self, start: Any, end: Any, error: str) -> None:
        self._at("granted")
        super().on_range(start, end, error)

    def next_tuple(self) -> None:
        now = time.monotonic()
        if self._started is None:
            self._started = now
        if self._lines > self.rate * (now - self._started):
            return  # paced: the runtime calls again at the next tick
        if self._block_start is not None and self._end - self._file.tell() < (self._end - self._block_start) // 2:
            self._at("reading")
        before = self._file.tell()
        super().next_tuple()
        if self._file.tell() != before:
            self._lines += self.chunk_lines


def write_words(path: Path, lines: int) -> dict[str, int]:
    """A file of `lines` sentences of uneven length, each with a word of its own (so a line read by nobody
    shows, however many times other lines came); returns the oracle's word counts."""
    counts: dict[str, int] = {}
    rows = []
    for i in range(lines):
        words = [f"w{(i * 7 + j * 13) % 97}" for j in range(1 + i % 9)] + [f"u{i}"]
        rows.append(" ".join(words))
        for w in words:
            counts[w] = counts.get(w, 0) + 1
    path.write_text("\n".join(rows) + "\n")
    return counts


def lines(name: str, path: Path, gate: str, step: str, after: int, rate: float, rate0: float | None = None):
    """A builder with the spout both topologies share: 2 shared instances on the workers, 2 KiB blocks."""
    builder = TopologyBuilder(name)
    builder.set_spout("lines", GatedTextFileSpout, 2, placement="worker", params={
        "path": str(path), "chunk_lines": 5, "block_bytes": 2048, "gate": gate, "step": step, "after": after,
        "rate": rate, "rate0": rate0})
    return builder


def build(name: str, path: Path, gate: str = "", step: str = "", after: int = 4, rate: float = 600.0,
          rate0: float | None = None):
    """lines (2 shared instances on the workers) -> split (chained) -> count -> latest."""
    builder = lines(name, path, gate, step, after, rate, rate0)
    builder.set_bolt("split", wordcount.SplitBolt, 2, elastic=False).shuffle_grouping("lines")
    builder.set_bolt("count", eo_parts.PlainCountBolt, 2, elastic=False, pe_idle_timeout=None).key_grouping("split")
    builder.set_bolt("latest", wordcount.LatestCountsBolt, elastic=False).global_grouping("count")
    return builder.build()


def build_collected(name: str, path: Path, gate: str = "", step: str = "", after: int = 4, rate: float = 600.0):
    """lines (2 shared instances on the workers) -> a collector in the driver (esault.testing): stateless
    between the spout and the test, so a lost worker loses nothing at_least_once cannot replay."""
    from esault.testing import CollectorBolt

    builder = lines(name, path, gate, step, after, rate)
    builder.set_bolt("out", CollectorBolt, params={"name": name}).global_grouping("lines")
    return builder.build()
