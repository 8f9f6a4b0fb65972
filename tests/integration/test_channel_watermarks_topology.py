"""Watermarks per channel on real actors: a source that sends watermarks, a keyed bolt between, windows.

A merge of the bolt between retires one of the windows' input channels: its last watermark removes it, so the
windows go on firing on the others (held at its last value they would wait until the stop). A merge of the
window bolt moves keys with their windows. Every window is checked against the brute-force counts.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import pytest

from esault import Bolt, TopologyBuilder
from esault.testing import CollectorBolt, ListSpout, collected, wait_until
from esault.windows import EventTime, Tumbling, WindowBolt, is_late

GATE = threading.Event()
HALF_MS = 10_000
ITEMS = [[f"k{i % 10}", [i * 10, 1]] for i in range(2_000)]  # 20 s of event time, in order


class StampedSpout(ListSpout):
    """Its share of ITEMS (every instance-th), the second half held until GATE; its watermark is the newest
    timestamp it emitted."""

    def open(self, context: Any) -> None:
        self.items = self.items[context.instance::context.instances]
        self.first_half = sum(1 for _, v in self.items if v[0] < HALF_MS)
        self.newest = None

    def limit(self) -> int:
        return len(self.items) if GATE.is_set() else self.first_half

    def next_tuple(self) -> None:
        start = self.position
        super().next_tuple()
        if self.position > start:
            self.newest = self.items[self.position - 1][1][0]

    def watermark(self) -> float | None:
        return self.newest

    @classmethod
    def esault_emits_watermarks(cls, params: dict) -> bool:
        return True


class Between(Bolt):
    def process(self, tup: Any) -> None:
        self.emit(tup.key, tup.value)


class Counts(WindowBolt):
    window = Tumbling(size=1_000)
    aggregate = "count"
    time = EventTime(max_out_of_orderness=0)
    flush_on_close = True


def fired_from(start_ms: int) -> bool:
    return any(not is_late(v) and v["start"] >= start_ms for _, v in collected("wm-out"))


@pytest.mark.parametrize("merged", ["between", "windows"])
def test_a_merge_mid_stream_removes_the_retired_channel_and_every_window_stays_exact(cluster, config, merged):
    GATE.clear()
    b = TopologyBuilder(f"wm-merge-{merged}")
    b.set_spout("src", StampedSpout, 2, params={"items": ITEMS})
    b.set_bolt("between", Between, 2, elastic=False, pe_idle_timeout=None).key_grouping("src")
    b.set_bolt("windows", Counts, 2, elastic=False, pe_idle_timeout=None).key_grouping("between")
    b.set_bolt("out", CollectorBolt, params={"name": "wm-out"}).shuffle_grouping("windows")
    job = cluster.submit(b.build(), config)
    wait_until(lambda: fired_from(8_000), 30, message="windows of the first half fired")
    result = job.merge(merged, job.spus(merged)[0])
    assert result.moved_keys > 0
    GATE.set()
    # before the stop (whose flush would fire everything): the watermark moves on without the retired SPU
    wait_until(lambda: fired_from(18_000), 30, message="windows of the second half fired before the stop")
    assert job.wait(60), job.status()
    job.stop()
    out = collected("wm-out")
    assert not [v for _, v in out if is_late(v)]
    got = {(k, v["start"]): v["result"] for k, v in out}
    assert len(got) == len(out), "a window fired twice"
    assert got == dict(Counter((k, v[0] - v[0] % 1_000) for k, v in ITEMS))
