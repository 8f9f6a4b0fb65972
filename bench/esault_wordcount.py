"""The benchmark's word count on esault: file lines -> split (chained) -> count per word -> final counts.

A module of its own (not the bench script) so worker processes import its
classes by name. Shaped like the peers' word count (bench/peers.py): one PE
per word keeps the running count as its state; the final counts leave when
the job stops (each PE's close() emits its count to one driver-side bolt that
writes them to <data_dir>/final_counts.json), like Bytewax's count_final.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from esault import Bolt, TopologyBuilder
from esault.dsl.sources import TextFileSpout


class SplitWords(Bolt):
    """line -> (word, 1) per word; shuffle-grouped from the spout, so it runs chained into it."""

    def process(self, tup: Any) -> None:
        emit = self.emit
        for word in tup.value.split():
            emit(word, 1)


class CountWord(Bolt):
    """One PE per word: its count is its state; the final count is emitted when the job stops."""

    def open(self, context: Any) -> None:
        self.count = 0

    def process(self, tup: Any) -> None:
        self.count += tup.value

    def close(self) -> None:
        self.emit(self.key, self.count)


class FinalCounts(Bolt):
    """Collects the final counts in the driver and writes them as JSON on close()."""

    esault_placement = "driver"

    def open(self, context: Any) -> None:
        self.counts: dict[str, int] = {}
        self.path = str(Path(context.data_dir) / "final_counts.json")  # a str: checkpointable state

    def process(self, tup: Any) -> None:
        self.counts[tup.key] = self.counts.get(tup.key, 0) + tup.value

    def close(self) -> None:
        Path(self.path).write_text(json.dumps(self.counts))


class TimedLines(TextFileSpout):
    """TextFileSpout at a fixed rate (lines per second), each line as [emit time, line]."""

    def __init__(self, path: str, rate: float, chunk_lines: int = 16, block_bytes: int = 1 << 20) -> None:
        super().__init__(path, chunk_lines, block_bytes=block_bytes)
        self.rate = rate
        self.sent = 0
        self.started: float | None = None

    def next_tuple(self) -> None:
        now = time.monotonic()
        if self.started is None:
            self.started = now
        if self.sent >= (now - self.started) * self.rate:
            return  # ahead of the rate: the runtime calls again on its next tick
        super().next_tuple()

    def values(self, lines: list[str]) -> list:
        self.sent += len(lines)
        stamp = time.time()
        return [[stamp, line] for line in lines]


class SplitTimed(Bolt):
    """[emit time, line] -> (word, emit time) per word (a float: a scalar value costs the least to emit)."""

    def process(self, tup: Any) -> None:
        stamp, line = tup.value
        emit = self.emit
        for word in line.split():
            emit(word, stamp)


class LatencyProbeCount(CountWord):
    """CountWord that samples the latency from the spout's emit of every 50th tuple it processes."""

    _seen = 0
    _samples: list[tuple[float, float]] = []  # (emit time, latency); per process: the first PE to close hands them on

    def process(self, tup: Any) -> None:
        stamp = tup.value
        self.count += 1
        cls = LatencyProbeCount
        cls._seen += 1
        if cls._seen % 50 == 0:
            cls._samples.append((stamp, time.time() - stamp))

    def close(self) -> None:
        samples, LatencyProbeCount._samples = LatencyProbeCount._samples, []
        self.emit(self.key, [self.count, samples])


class LatencySamples(FinalCounts):
    """FinalCounts for [count, samples] values; writes the samples to latency.json too."""

    def open(self, context: Any) -> None:
        super().open(context)
        self.samples: list[tuple[float, float]] = []

    def process(self, tup: Any) -> None:
        count, samples = tup.value
        self.counts[tup.key] = self.counts.get(tup.key, 0) + count
        self.samples.extend(samples)

    def close(self) -> None:
        super().close()
        (Path(self.path).parent / "latency.json").write_text(json.dumps(self.samples))


def build(path: str, count_spus: int = 2, chunk_lines: int = 64, spout_placement: str | None = None,
          spouts: int | None = None) -> Any:
    """spout_placement="worker" (with spouts = count_spus by default) reads the file in the workers."""
    spouts = spouts or (count_spus if spout_placement == "worker" else 1)
    builder = TopologyBuilder("wc_bench")
    builder.set_spout("lines", TextFileSpout, spouts, params={"path": path, "chunk_lines": chunk_lines},
                      max_pending=20_000, placement=spout_placement)
    builder.set_bolt("split", SplitWords, spouts, elastic=False).shuffle_grouping("lines")  # chained: one per spout SPU
    builder.set_bolt("count", CountWord, count_spus, elastic=False).key_grouping("split")
    builder.set_bolt("final", FinalCounts, elastic=False).global_grouping("count")
    return builder.build()


def build_timed(path: str, rate_lines: float, count_spus: int = 2, spout_placement: str | None = "worker") -> Any:
    """The latency topology: `rate_lines` lines per second in all (split over the spout instances)."""
    spouts = count_spus if spout_placement == "worker" else 1
    builder = TopologyBuilder("wc_bench")
    builder.set_spout("lines", TimedLines, spouts, params={"path": path, "rate": rate_lines / spouts},
                      max_pending=20_000, placement=spout_placement)
    builder.set_bolt("split", SplitTimed, spouts, elastic=False).shuffle_grouping("lines")  # chained, as above
    builder.set_bolt("count", LatencyProbeCount, count_spus, elastic=False).key_grouping("split")
    builder.set_bolt("final", LatencySamples, elastic=False).global_grouping("count")
    return builder.build()


def latency_samples(data_dir: Path, warmup: float = 0.0) -> list[float]:
    """Latencies (s) of the sampled tuples emitted at least `warmup` seconds after the first one."""
    pairs = json.loads((Path(data_dir) / "wc_bench" / "latency.json").read_text())
    if not pairs:
        return []
    start = min(stamp for stamp, _ in pairs)
    return [latency for stamp, latency in pairs if stamp - start >= warmup]


def final_counts(data_dir: Path) -> dict[str, int]:
    return json.loads((Path(data_dir) / "wc_bench" / "final_counts.json").read_text())
