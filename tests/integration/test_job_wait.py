"""Job.wait() on real actors in one process: it polls cheaply while spouts read, and still sees the end."""

from __future__ import annotations

import threading
from typing import Any

from esault import JobConfig, LocalCluster, TopologyBuilder
from esault.job.completion_watch import SPOUT_LIST_MAX_AGE
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


def spy(job: Any) -> dict[str, int]:
    """Counts wait()'s polls (each asks whether a spout still reads) and its lists of the spout SPUs (each an
    ask per spout unit), through the job's own methods."""
    counts = {"polls": 0, "lists": 0}
    watch = job.completion
    still_reading, list_spouts = watch.some_spout_still_reading, watch.spout_spu_ids

    def polled(spus: list[int]) -> bool:
        counts["polls"] += 1
        return still_reading(spus)

    def listed() -> list[int]:
        counts["lists"] += 1
        return list_spouts()

    watch.some_spout_still_reading, watch.spout_spu_ids = polled, listed
    return counts


def test_wait_lists_the_spouts_at_most_every_max_age_while_they_read_then_sees_them_finish(tmp_path):
    GatedSpout.gate.clear()
    reset_collected("gated")
    items = [[f"k{i}", i] for i in range(40)]
    with LocalCluster() as cluster:
        job = cluster.submit(topology("gated", items).build(), JobConfig(data_dir=tmp_path))
        try:
            counts = spy(job)
            waited = 1.0
            assert not job.wait(waited)  # the spouts are still reading: not complete
            # Before: a list on every 10 ms poll (~100). Now one per SPOUT_LIST_MAX_AGE (0.2 s), whatever the
            # machine's speed: the bound is by time, not by the polls a slow machine makes fewer of.
            assert counts["polls"] >= 20, counts
            assert counts["lists"] >= 1, counts
            assert counts["lists"] <= waited / SPOUT_LIST_MAX_AGE + 2, counts
            GatedSpout.gate.set()
            assert job.wait(30.0)
            assert sorted(tup[1] for tup in collected("gated")) == list(range(40))
        finally:
            job.stop()

