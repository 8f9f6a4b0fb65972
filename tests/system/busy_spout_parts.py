"""A word count whose spout runs pure Python for seconds in open() or in one next_tuple(): user code that
holds the GIL and its thread (no sleep), in the driver, where the heartbeats to the workers come from.

Worker processes import this by module name (tests/system is on their path).
"""

from __future__ import annotations

import time
from typing import Any

from esault import TopologyBuilder
from esault.dsl.topology import Topology

import wordcount  # examples/, on sys.path in the tests and their workers


def spin(seconds: float) -> int:
    """Busy Python for `seconds`: never sleeps, so the thread keeps running bytecode the whole time."""
    end = time.monotonic() + seconds
    turns = 0
    while time.monotonic() < end:
        turns += 1
    return turns


class BusySentenceSpout(wordcount.SentenceSpout):
    """SentenceSpout that spins `open_seconds` in open() (then raises if `fail_open`), and `next_seconds` in the
    first next_tuple() called once `busy_at` sentences were emitted (-1: never)."""

    def __init__(self, open_seconds: float = 0.0, next_seconds: float = 0.0, busy_at: int = -1,
                 fail_open: bool = False, **kwargs: Any):
        super().__init__(**kwargs)
        self.fail_open = fail_open
        self.open_seconds = open_seconds
        self.next_seconds = next_seconds
        self.busy_at = busy_at

    def open(self, context: Any) -> None:
        super().open(context)
        spin(self.open_seconds)
        if self.fail_open:
            raise ConnectionError("the source refused us after a long open()")
        self.spun = False

    def next_tuple(self) -> None:
        if not self.spun and 0 <= self.busy_at <= self.position:
            self.spun = True
            spin(self.next_seconds)
        super().next_tuple()


def build(name: str, total: int, rate: float | None = None, **busy: Any) -> Topology:
    """busy sentences (in the driver) -> split (2 SPUs on the workers) -> count (2, key-grouped) -> latest."""
    builder = TopologyBuilder(name)
    builder.set_spout("sentences", BusySentenceSpout, params={"total": total, "seed": 5, "rate": rate, **busy})
    builder.set_bolt("split", wordcount.SplitBolt, 2, elastic=False).shuffle_grouping("sentences")
    builder.set_bolt("count", wordcount.CountBolt, 2, elastic=False).key_grouping("split")
    builder.set_bolt("latest", wordcount.LatestCountsBolt, elastic=False).global_grouping("count")
    return builder.build()
