"""Job.wait() on real actors in one process: it polls cheaply while spouts read, and still sees the end."""

from __future__ import annotations

import threading
import time
from typing import Any

from esault import JobConfig, LocalCluster, TopologyBuilder
from esault.testing import CollectorBolt, ListSpout, collected, reset_collected


class GatedSpout(ListSpout):
    """Emits its items once `gate` is set, then finishes: a source still reading until the test says so."""

    gate = threading.Event()

    def next_tuple(self) -> None:
        if self.gate.is_set():
            super().next_tuple()


def topology(name: str, items: list[list[Any]]) -> TopologyBuilder:
    b = TopologyBuilder(name)
    b.set_spout("src", GatedSpout, params={"items": items})
    b.set_bolt("out", CollectorBolt, params={"name": name}).global_grouping("src")
    return b


def counting_lists(job: Any) -> list[float]:
    """Spies on the job's asks for its spout SPUs (one ask per spout unit each): when each list was taken."""
    taken: list[float] = []
    ask = job._spout_spu_ids

    def listed() -> list[int]:
        taken.append(time.monotonic())
        return ask()

    job._spout_spu_ids = listed
    return taken


def test_wait_lists_the_spouts_at_most_every_max_age_while_they_read_then_sees_them_finish(tmp_path):
    GatedSpout.gate.clear()
    reset_collected("gated")
    items = [[f"k{i}", i] for i in range(40)]
    with LocalCluster() as cluster:
        job = cluster.submit(topology("gated", items).build(), JobConfig(data_dir=tmp_path))
        try:
            taken = counting_lists(job)
            started = time.monotonic()
            assert not job.wait(1.0)  # the spouts are still reading: not complete
            waited = time.monotonic() - started
            # Before: one list per 10 ms poll (~100 here). Now at most one per SPOUT_LIST_MAX_AGE (0.2 s).
            assert 1 <= len(taken) <= waited / 0.1, (len(taken), waited)
            GatedSpout.gate.set()
            assert job.wait(30.0)
            assert sorted(tup[1] for tup in collected("gated")) == list(range(40))
        finally:
            job.stop()

