"""Word count with a hot word, two ways: TAG grouping (two-stage aggregate) or plain key grouping.

Run it:  esault run examples/hot_keys.py            # TAG: partial counts per SPU, merged per word
         esault run examples/hot_keys.py --threads  # (any esault run option works)
Set HOT_KEYS_GROUPING=key (or partial_key, shuffle) in the environment to compare plans.

The sentences are wordcount's (Zipf-like: "word0" is ~13% of all words) with
one word made hotter still: a fifth of the words are "the". Under key grouping
"the" lives in one PE on one SPU, however many SPUs there are; under
`aggregate(...).tag_grouping(...)` its tuples spread over the SPUs measured
fastest and the final stage merges the partial counts, with the same result
(docs/GROUPING.md).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from esault import Bolt, TopologyBuilder
from esault.aggregates import Count

import wordcount  # examples/ is on sys.path when esault run loads this file

GROUPINGS = ("tag", "partial_key", "shuffle", "key")


class HotSplitBolt(Bolt):
    """Sentence -> (word, 1) per word, plus ("the", 1) for every fourth word: one very hot key."""

    def process(self, tup: Any) -> None:
        emit = self.emit
        for i, word in enumerate(tup.value.split()):
            emit(word, 1)
            if i % 4 == 3:
                emit("the", 1)


def oracle(total: int, seed: int = 42) -> dict[str, int]:
    counts = wordcount.oracle(total, seed)
    counts["the"] = sum(len(s.split()) // 4 for s in wordcount.make_sentences(total, seed))
    return dict(counts)


def build_topology(total: int = 20000, seed: int = 42, parallelism: int = 4, grouping: str | None = None):
    grouping = grouping or os.environ.get("HOT_KEYS_GROUPING", "tag")
    if grouping not in GROUPINGS:
        raise ValueError(f"HOT_KEYS_GROUPING={grouping!r}: use one of {', '.join(GROUPINGS)}")
    builder = TopologyBuilder("hot-keys")
    builder.set_spout("sentences", wordcount.SentenceSpout, params={"total": total, "seed": seed})
    builder.set_bolt("split", HotSplitBolt).shuffle_grouping("sentences")
    counts = builder.aggregate("count", Count(), parallelism=parallelism)
    getattr(counts, f"{grouping}_grouping")("split")
    builder.set_bolt("latest", wordcount.LatestCountsBolt).global_grouping("count")
    return builder.build()


def summarize(job: Any) -> str:
    """Printed by `esault run`: the top words and how the first stage's SPUs shared the tuples."""
    path = Path(job.data_dir) / "wordcount.json"
    counts = json.loads(path.read_text()) if path.exists() else {}
    top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:3]
    units = (job.final_status or {}).get("units", {})
    first = units.get("count_partial") or units.get("count") or {}
    shares = sorted((s["processed"] for s in first.get("spus", {}).values()), reverse=True)
    lines = [f"{sum(counts.values())} words, {len(counts)} distinct; top: "
             + ", ".join(f"{w} {c}" for w, c in top),
             f"tuples per first-stage SPU: {shares}"]
    return "\n".join(lines)
