"""Spout.partition_status() on running SPUs: a partitioned source's rows reach Job.status() per SPU and per
unit, checked (a malformed row is dropped and logged, a raising hook counts a user error); any other spout,
and every bolt, shows no partitions."""

from __future__ import annotations

import logging
from typing import Any

from esault import TopologyBuilder
from esault.testing import CollectorBolt, ListSpout, wait_until


class PartitionedSpout(ListSpout):
    """Reports two partitions of its own per instance, and one row that is no row."""

    def open(self, context: Any) -> None:
        self.instance = context.instance

    def partition_status(self) -> list:
        i = self.instance
        return [("orders", 2 * i + 1, 10, 30, 20, True), ("orders", 2 * i, 5 + self.position, 25, 20, False),
                ["orders", "not a number", 0, 0, 0, False]]


class BrokenPartitionsSpout(ListSpout):
    def partition_status(self) -> list:
        raise RuntimeError("the source lost its partitions")


def test_a_sources_partitions_show_per_spu_and_per_unit_and_other_units_show_none(cluster, config, caplog):
    caplog.set_level(logging.WARNING, logger="esault")
    items = [[f"k{i}", i] for i in range(20)]
    b = TopologyBuilder("partitions")
    b.set_spout("src", PartitionedSpout, 2, params={"items": items})
    b.set_spout("plain", ListSpout, params={"items": items})
    b.set_spout("broken", BrokenPartitionsSpout, params={"items": items})
    b.set_bolt("out", CollectorBolt, params={"name": "partitions"}).shuffle_grouping("src") \
        .shuffle_grouping("plain").shuffle_grouping("broken")
    job = cluster.submit(b.build(), config)
    try:
        assert job.wait(60), job.status()
        status = wait_until(lambda: (s := job.status())["units"]["src"].get("partitions") and
                            all(p["offset"] == 25 for p in s["units"]["src"]["partitions"] if not p["idle"]) and s,
                            30, message="each instance's partitions after it emitted its 20 items")
        src = status["units"]["src"]
        spus = sorted(src["spus"])
        assert len(spus) == 2
        by_spu = {spu: src["spus"][spu]["partitions"] for spu in spus}
        for spu, rows in by_spu.items():
            assert [(r["topic"], r["idle"]) for r in rows] == [("orders", False), ("orders", True)]
            assert rows[0] == {"topic": "orders", "partition": rows[1]["partition"] - 1, "offset": 25,
                               "end_offset": 25, "lag": 20, "idle": False}
        assert sorted(r["partition"] for rows in by_spu.values() for r in rows) == [0, 1, 2, 3]
        assert src["partitions"] == sorted(({**r, "spu": spu} for spu, rows in by_spu.items() for r in rows),
                                           key=lambda r: r["partition"]), "the unit lists them all, with their SPU"
        assert "malformed row(s), dropped" in caplog.text
        for unit in ("plain", "broken", "out"):
            assert "partitions" not in status["units"][unit]
            assert not any("partitions" in row for row in status["units"][unit]["spus"].values())
        assert status["units"]["broken"]["user_errors"] >= 1
        assert "partition_status() raised RuntimeError" in caplog.text
    finally:
        job.stop()
