"""Word count, the eSault paper's experiment: sentences -> split -> count -> Spark table.

Run it:  esault run examples/wordcount.py
The running counts land in the Spark table `word_counts` (Parquet under
<data_dir>/wordcount/warehouse); the run ends by printing a Spark SQL top-5.
The spout is replayable and deterministic (seeded), so a run can be checked
against a plain collections.Counter over the same sentences (see `oracle`).
"""

from __future__ import annotations

import collections
import itertools
import json
import os
import random
import time
from pathlib import Path
from typing import Any, Iterator

from esault import Bolt, ReplayingSpout, TopologyBuilder

VOCABULARY_SIZE = 2000


def sentence_stream(seed: int = 42, words_per_sentence: int = 10,
                    vocabulary: int = VOCABULARY_SIZE) -> Iterator[str]:
    """The deterministic input, endless: the same seed gives the same sentences in every process."""
    rnd = random.Random(seed)
    words = [f"word{i}" for i in range(vocabulary)]
    # A Zipf-like skew: a few words are hot, as in real text.
    cumulative = list(itertools.accumulate(1.0 / (rank + 1) for rank in range(vocabulary)))
    while True:
        yield " ".join(rnd.choices(words, cum_weights=cumulative, k=words_per_sentence))


def make_sentences(total: int, seed: int = 42) -> list[str]:
    """The first `total` sentences of the stream."""
    return list(itertools.islice(sentence_stream(seed), total))


def oracle(total: int, seed: int = 42) -> collections.Counter:
    """What a correct run must count."""
    return collections.Counter(w for s in make_sentences(total, seed) for w in s.split())


class SentenceSpout(ReplayingSpout):
    """Emits `total` seeded sentences (msg_id = position), at most `rate` per second if given."""

    def __init__(self, total: int = 20000, seed: int = 42, rate: float | None = None) -> None:
        super().__init__()
        self.total = total
        self.seed = seed
        self.rate = rate
        self.position = 0

    def open(self, context: Any) -> None:
        self.stream = sentence_stream(self.seed)
        self.started: float | None = None

    def next_tuple(self) -> None:
        end = min(self.position + 32, self.total)
        if self.rate is not None:
            now = time.monotonic()
            if self.started is None:
                self.started = now
            end = min(end, int((now - self.started) * self.rate) + 1)
        stream = self.stream
        for i in range(self.position, end):  # replays come from ReplayingSpout's pending store
            self.emit(None, next(stream), msg_id=i)
        self.position = max(self.position, end)
        if self.position >= self.total:
            self.finish()

    def snapshot_position(self) -> int:
        """Sentences emitted so far: the stream is deterministic, so this is all a restart needs."""
        return self.position

    def restore_position(self, position: int) -> None:
        self.position = int(position)
        self.stream = sentence_stream(self.seed)
        for _ in range(self.position):
            next(self.stream)
        if self.rate is not None:  # the rate limit goes on from here, not from zero
            self.started = time.monotonic() - self.position / self.rate


class SplitBolt(Bolt):
    """Sentence -> (word, 1) per word."""

    def process(self, tup: Any) -> None:
        emit = self.emit
        for word in tup.value.split():
            emit(word, 1)


class CountBolt(Bolt):
    """One PE per word: its state is the word's count; emits the running count."""

    def open(self, context: Any) -> None:
        self.count = 0

    def process(self, tup: Any) -> None:
        self.count += tup.value
        self.emit(self.key, self.count)


class LatestCountsBolt(Bolt):
    """Keeps the highest running count per word; writes them to <data_dir>/wordcount.json on close."""

    def open(self, context: Any) -> None:
        self.counts: dict[str, int] = {}
        self.path = str(Path(context.data_dir) / "wordcount.json")  # a str: checkpointed with the counts

    def process(self, tup: Any) -> None:
        if tup.value > self.counts.get(tup.key, 0):
            self.counts[tup.key] = tup.value

    def close(self) -> None:
        path = Path(self.path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.counts, sort_keys=True))


RATE_ENV = "WORDCOUNT_RATE"


def rate_from_env() -> float | None:
    """Sentences per second from $WORDCOUNT_RATE (unset: as fast as the topology goes).

    The compose stack sets it so that its run lasts long enough for Prometheus (a 5 s scrape)
    and Grafana to see it; at full speed the 20000 sentences are done between two scrapes.
    """
    value = os.environ.get(RATE_ENV, "").strip()
    if not value:
        return None
    try:
        rate = float(value)
    except ValueError:
        rate = 0.0
    if not rate > 0:
        raise ValueError(f"{RATE_ENV}={value!r} is not a positive number of sentences per second; "
                         f"set it to e.g. 500, or unset it to run at full speed")
    return rate


SPARK_TABLE = "word_counts"
JOB_DEFAULTS = {"message_timeout": 120.0}
"""The sink acks after a commit, and the first commit waits for the JVM: allow for it."""


def build_topology(total: int = 20000, seed: int = 42, rate: float | None = None,
                   split_parallelism: int = 1, count_parallelism: int = 2, sink: str | None = "spark",
                   chain: bool = True):
    """sink: "spark" (the default: rows into a Spark table), "pyarrow" (same table, no JVM) or None.
    rate: sentences per second; None: $WORDCOUNT_RATE if set (rate_from_env), else full speed."""
    if rate is None:
        rate = rate_from_env()
    builder = TopologyBuilder("wordcount")
    # Sink acks wait for commits, so let enough sentences be in flight to fill a batch.
    builder.set_spout("sentences", SentenceSpout, params={"total": total, "seed": seed, "rate": rate},
                      max_pending=20000)
    # With the spout's parallelism and not elastic, split runs chained into the spout's SPUs (no hop) and
    # scales with them; chain=False parts them, and lets split scale on SPUs of its own.
    builder.set_bolt("split", SplitBolt, split_parallelism, chain=chain,
                     elastic=not chain).shuffle_grouping("sentences")
    builder.set_bolt("count", CountBolt, count_parallelism).key_grouping("split")
    builder.set_bolt("latest", LatestCountsBolt).global_grouping("count")
    if sink is not None:
        from spark_sink import SparkSink

        # The sink's latency is Spark's commit time, not CPU: more SPUs would not help it.
        builder.set_bolt("spark", SparkSink, elastic=False, params={
            "table": SPARK_TABLE, "schema": "word STRING, count BIGINT",
            "key_column": "word", "value_column": "count",
            "batch_rows": 50_000, "batch_seconds": 5.0, "engine": sink,
        }).shuffle_grouping("count")
    return builder.build()


def summarize(job: Any) -> str:
    """Printed by `esault run` after the job: totals and the top words."""
    path = Path(job.data_dir) / "wordcount.json"
    if path.exists():
        counts = json.loads(path.read_text())
        top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
        lines = [f"word count: {sum(counts.values())} words, {len(counts)} distinct; top 5:"]
        lines += [f"  {word:<12} {count}" for word, count in top]
    else:  # a worker on another host (or container) ran 'latest' and wrote the file on its own disk
        lines = [f"word count: {path} is not on this host (the worker that ran 'latest' wrote it on its own disk)"]
    if "spark" in job.final_status.get("units", {}) if job.final_status else False:
        from spark_sink import analytics

        warehouse = analytics.default_warehouse(job.data_dir)
        rows = analytics.top_k(SPARK_TABLE, k=5, key="word", value="count", agg="max", warehouse=warehouse)
        lines.append(f"Spark SQL over table {SPARK_TABLE} ({warehouse}):")
        lines.append(f"  SELECT word, MAX(count) FROM {SPARK_TABLE} GROUP BY word ORDER BY 2 DESC LIMIT 5")
        lines.append(analytics.format_rows(rows, ("word", "count")))
    return "\n".join(lines)
