"""Which source instance reads which partition, and how far (issue 52, "partitions in plain sight"): a
4-partition topic on a real broker (Tansu) read by 2 KafkaSource instances on a worker process, its rows in
job.status(), `esault status`, GET /api/jobs/J/units and the web page in a headless Chromium."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from esault import JobConfig, LocalCluster, TopologyBuilder
from esault.api import ControlApi
from esault.api.client import call
from esault.connectors import KafkaSink, KafkaSource
from esault.connectors.partitions import owned
from esault.testing import wait_until

sys.path.insert(0, str(Path(__file__).resolve().parent))
import kafka_parts  # noqa: E402
from test_kafka_operations import status_lines  # noqa: E402
from test_web_page import BROWSER, CHROMIUM  # noqa: E402

pytestmark = pytest.mark.system

PER_PARTITION = 400
BASE_MS = 1_700_000_000_000


def build(bootstrap: str):
    """words (4 partitions, the last one empty) -> KafkaSource x2 on event time (idle after 1 s) -> a paced
    keyed count -> KafkaSink: records wait on the broker while the count works through them."""
    b = TopologyBuilder("kafka-partitions")
    b.set_spout("words", KafkaSource, 2, params={
        "topic": "words", "bootstrap": bootstrap, "key": "utf-8", "value": "utf-8", "max_records": 20,
        "event_time": "timestamp", "idle_timeout": 1.0}, max_pending=40, placement="worker")
    b.set_bolt("count", kafka_parts.PacedCountBolt, 2, params={"pace": 0.005}, elastic=False,
               pe_idle_timeout=None).key_grouping("words")
    b.set_bolt("out", KafkaSink, params={"bootstrap": bootstrap, "topic": "counts", "key": "utf-8",
                                         "value": "json"}, elastic=False).shuffle_grouping("count")
    return b.build()


def rows_by_partition(status: dict) -> dict[int, dict]:
    return {row["partition"]: row for row in status["units"]["words"].get("partitions", [])}


def page_rows(dom: str) -> list[list[str]]:
    """The cells of each row of the web page's partition table."""
    match = re.search(r'<table class="partitions">(.*?)</table>', dom, re.S)
    assert match, "the spout's panel has a partition table"
    rows = re.findall(r"<tr>(.*?)</tr>", match.group(1), re.S)
    return [re.findall(r"<td[^>]*>(.*?)</td>", row) for row in rows if "<td" in row]


def test_each_instances_partitions_with_offsets_lag_and_idleness_show_in_status_cli_rest_and_the_page(
        kafka_broker, tmp_path):
    kafka_broker.create_topic("words", 4)
    kafka_broker.create_topic("counts", 2)
    kafka_broker.produce("words", [(f"w{i % 30}", str(i), i % 3, BASE_MS + i) for i in range(3 * PER_PARTITION)])
    every = [("words", p) for p in range(4)]
    mine = {frozenset(owned(every, i, 2)) for i in range(2)}
    config = JobConfig(data_dir=tmp_path / "data", elasticity=False, checkpoint_interval=0.3, message_timeout=300.0)
    with LocalCluster(workers=1) as cluster:
        job = cluster.submit(build(kafka_broker.bootstrap), config)
        api = ControlApi(lambda: cluster.jobs).start()
        try:
            lagging = wait_until(
                lambda: (rows := rows_by_partition(job.status())) and len(rows) == 4
                and [rows[p]["end_offset"] for p in range(4)] == [PER_PARTITION] * 3 + [0]
                and sum(r["lag"] for r in rows.values()) > 0 and rows, 30,
                message="the 4 partitions in the status with their end offsets, records waiting in the written ones")
            for p, row in lagging.items():
                assert row["topic"] == "words" and row["lag"] == row["end_offset"] - row["offset"], row
                assert row["idle"] is False or row["lag"] == 0, "a partition with records waiting is not idle"
            assert lagging[3]["end_offset"] == 0 and lagging[3]["offset"] == 0, "the empty partition"
            spus = job.status()["units"]["words"]["spus"]
            assert len(spus) == 2
            assert {frozenset((r["topic"], r["partition"]) for r in row["partitions"]) for row in spus.values()} == mine
            assert {r["spu"] for r in lagging.values()} == set(spus)
            assert job.status()["units"]["count"].get("partitions") is None, "a bolt shows no partitions"

            cli = status_lines(cluster.address)
            for p in range(4):
                assert re.search(rf"^    SPU \d+ words\[{p}\] offset \d+, end \d+, lag \d+", cli, re.M), cli

            drained = wait_until(
                lambda: (rows := rows_by_partition(job.status())) and len(rows) == 4
                and all(r["lag"] == 0 and r["idle"] for r in rows.values()) and rows, 90,
                message="every partition read to its end (lag 0), then idle after idle_timeout")
            assert [drained[p]["offset"] for p in range(4)] == [PER_PARTITION] * 3 + [0]
            assert [drained[p]["end_offset"] for p in range(4)] == [PER_PARTITION] * 3 + [0]

            cli = status_lines(cluster.address)
            for p in range(4):
                done = PER_PARTITION if p < 3 else 0
                assert re.search(rf"^    SPU \d+ words\[{p}\] offset {done}, end {done}, lag 0, idle$", cli, re.M), cli

            units = call(api.url, f"/api/jobs/{job.name}/units")["units"]
            listed = units["words"]["partitions"]
            assert [(r["partition"], r["offset"], r["end_offset"], r["lag"], r["idle"]) for r in listed] == \
                [(p, PER_PARTITION if p < 3 else 0, PER_PARTITION if p < 3 else 0, 0, True) for p in range(4)]
            assert sorted(r for row in units["words"]["spus"].values() for r in map(str, row["partitions"])) == \
                sorted(str({k: v for k, v in r.items() if k != "spu"}) for r in listed)
            assert "partitions" not in units["count"]

            assert CHROMIUM, "Chromium is needed for this test: apt-get install chromium (.ci/run does)"
            dom = subprocess.run([*BROWSER, "--dump-dom", api.url], capture_output=True, text=True, timeout=120).stdout
            assert dom.count('<table class="partitions">') == 1, "only the Kafka spout's panel has one"
            assert page_rows(dom) == [[str(r["spu"]), "words", str(r["partition"]), str(r["offset"]),
                                       str(r["end_offset"]), "0", "idle"] for r in listed]
        finally:
            api.stop()
            job.stop()
