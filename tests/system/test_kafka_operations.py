"""Operating a Kafka job against a real broker (Tansu, started by the kafka_broker fixture): the consumer
lag per partition on /metrics, the shipped dashboard and the controllers' snapshot; a broker that stops
answering shown in the job's status; event time taken from the record."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from esault import JobConfig, LocalCluster, TopologyBuilder
from esault.api import ControlApi
from esault.connectors import KafkaSource
from esault.control import Controller
from esault.metrics import start_metrics_server
from esault.testing import CollectorBolt, collected, reset_collected, run_to_completion, wait_until
from esault.windows import is_late

sys.path.insert(0, str(Path(__file__).resolve().parent))
import kafka_parts  # noqa: E402
from prometheus_server import DASHBOARDS, PrometheusServer, dashboard_queries, with_grafana_variables  # noqa: E402

pytestmark = pytest.mark.system


def eo_config(tmp_path: Path, **changes) -> JobConfig:
    return JobConfig(data_dir=tmp_path / "data", elasticity=False, checkpoint_interval=0.3,
                     message_timeout=300.0, **changes)


class SnapshotRecorder(Controller):
    """Keeps the backlog each snapshot shows for one unit; decides nothing."""

    interval = 0.2

    def __init__(self, unit: str) -> None:
        self.unit = unit
        self.backlogs: list[int] = []

    def decide(self, snapshot):
        self.backlogs.append(snapshot.unit(self.unit).backlog)
        return []


def kafka_lag_query() -> str:
    """The shipped dashboard's consumer-lag panel query, Grafana variables filled in."""
    queries = [expr for path in sorted(DASHBOARDS.glob("*.json"))
               for title, expr in dashboard_queries(path, annotations=False) if "esault_kafka_consumer_lag" in expr]
    assert len(queries) == 1, f"the dashboards should have one Kafka lag query, found {queries}"
    return with_grafana_variables(queries[0])


def lag_by_partition(result: list[dict]) -> dict[int, float]:
    return {int(r["metric"]["partition"]): float(r["value"][1]) for r in result if r["metric"].get("topic") == "words"}


def test_consumer_lag_per_partition_reaches_the_dashboard_and_the_controllers_snapshot_then_drains_to_zero(
        kafka_broker, tmp_path):
    """Spouts on a worker process (their lag reaches the driver's /metrics in heartbeats), a paced count
    behind them: the lag builds per partition, a real Prometheus answers the dashboard's query with one
    series per partition, a controller's snapshot reads the same lag as the spout unit's backlog, and once
    every record is read each partition's lag is 0 and the output exact."""
    kafka_broker.create_topic("words", 4)
    kafka_broker.create_topic("counts", 2)
    records = kafka_parts.words(3000)
    kafka_broker.produce("words", records)
    topology = kafka_parts.build("kafka-lag", kafka_broker.bootstrap, "words", "counts", pace=0.01, end=None,
                                 max_records=20, max_pending=40, spout_placement="worker")
    server = start_metrics_server(port=0)
    recorder = SnapshotRecorder("words")
    try:
        with LocalCluster(workers=1) as cluster, \
                PrometheusServer([f"127.0.0.1:{server.port}"], scrape_interval=0.5) as prometheus:
            job = cluster.submit(topology, eo_config(tmp_path))
            try:
                job.add_controller(recorder)
                query = kafka_lag_query()
                building = wait_until(lambda: (lags := lag_by_partition(prometheus.query(query)))
                                      and len(lags) == 4 and all(v > 0 for v in lags.values()) and lags, 30,
                                      message="a lag series above 0 for each of the 4 partitions")
                assert set(building) == {0, 1, 2, 3} and sum(building.values()) <= 3000
                wait_until(lambda: any(b > 0 for b in recorder.backlogs), 30,
                           message="the controller's snapshot showing the lag as the spout's backlog")
                assert max(recorder.backlogs) <= 3000
                wait_until(lambda: len(kafka_broker.read("counts")) == 3000, 60, message="every record counted")
                wait_until(lambda: (lags := lag_by_partition(prometheus.query(query)))
                           and set(lags) == {0, 1, 2, 3} and not any(lags.values()), 30,
                           message="each partition's lag back to 0 once every record was read")
                wait_until(lambda: recorder.backlogs and recorder.backlogs[-1] == 0, 30,
                           message="the snapshot's backlog back to 0")
            finally:
                job.stop()
    finally:
        server.stop()
    output = kafka_broker.read("counts")
    assert kafka_parts.running_counts(output) == kafka_parts.exact_counts(records)


def status_lines(address: str) -> str:
    """What `esault status ADDRESS` prints (the CLI in a process of its own, as a user runs it)."""
    done = subprocess.run([sys.executable, "-m", "esault.cli", "status", address, "--timeout", "10"],
                          capture_output=True, text=True, timeout=60, env=env_with_this_tree())
    assert done.returncode == 0, done.stderr
    return done.stdout


def page_text(cluster: LocalCluster) -> str:
    """The driver's web page as headless Chromium renders it from the REST API (the DOM, its entities decoded)."""
    import html
    import shutil

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "Chromium is needed for this check: apt-get install chromium (.ci/run does)"
    api = ControlApi(lambda: cluster.jobs).start()
    try:
        dom = subprocess.run([chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--dump-dom",
                              "--virtual-time-budget=5000", api.url], capture_output=True, text=True, timeout=120)
    finally:
        api.stop()
    return html.unescape(dom.stdout)


def env_with_this_tree() -> dict[str, str]:
    repo = str(Path(__file__).resolve().parents[2])
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (repo, os.environ.get("PYTHONPATH", "")) if p)}


@pytest.mark.parametrize("placement", ["driver", "worker"])
def test_a_broker_that_stops_answering_shows_as_a_wait_in_the_log_and_the_status_then_clears_with_nothing_lost(
        kafka_broker, tmp_path, caplog, placement):
    """SIGSTOP the broker under a running job: its sockets stay open and nothing answers. The spout SPU's
    status says 'waiting for broker ADDRESS since ...' (a spout on a worker: through its heartbeats), so
    does `esault status` and, for a spout in this process, the log; once the broker answers again the
    wait clears and every record is read once."""

    reset_collected()
    caplog.set_level(logging.WARNING, logger="esault.connectors.kafka")
    kafka_broker.create_topic("ticks", 2)
    kafka_broker.produce("ticks", [(None, f"{i}", i % 2) for i in range(100)])
    b = TopologyBuilder("kafka-wait")
    b.set_spout("ticks", KafkaSource, params={"topic": "ticks", "bootstrap": kafka_broker.bootstrap,
                                              "value": "utf-8", "refresh_interval": 0.5}, placement=placement)
    b.set_bolt("c", CollectorBolt).shuffle_grouping("ticks")
    wanted = f"waiting for broker {kafka_broker.bootstrap} since "

    def waiting() -> list[str]:
        return job.status()["units"]["ticks"].get("waiting", [])

    with LocalCluster(workers=1) as cluster:
        job = cluster.submit(b.build(), eo_config(tmp_path))
        try:
            wait_until(lambda: len(collected("c")) == 100, 30, message="the first records read")
            assert waiting() == []
            kafka_broker.pause()
            try:
                shown = wait_until(waiting, 30, message="the status showing the wait")
                assert len(shown) == 1 and shown[0].startswith(wanted), shown
                since = time.strptime(shown[0][len(wanted):], "%Y-%m-%dT%H:%M:%SZ")
                assert abs(time.mktime(since) - time.mktime(time.gmtime())) < 60
                spu_fields = [s.get("waiting") for s in job.status()["units"]["ticks"]["spus"].values()]
                assert spu_fields == shown
                assert wanted in status_lines(cluster.address)
                assert wanted in page_text(cluster), "the web page shows the wait in the spout's panel"
                if placement == "driver":
                    assert f"waiting for broker {kafka_broker.bootstrap}" in caplog.text
            finally:
                kafka_broker.resume()
            wait_until(lambda: waiting() == [], 30, message="the wait cleared once the broker answers")
            if placement == "driver":
                assert "no longer waiting" in caplog.text
            assert wanted not in status_lines(cluster.address)
            kafka_broker.produce("ticks", [(None, f"{i}", i % 2) for i in range(100, 200)])
            wait_until(lambda: len(collected("c")) >= 200, 60, message="the records after the pause")
        finally:
            job.stop()
    assert sorted(int(v) for _, v in collected("c")) == list(range(200))
    reset_collected()


BASE_MS = 1_700_000_000_000


@pytest.mark.parametrize("event_time", ["timestamp", "field:at"])
def test_event_time_from_the_record_timestamp_or_a_field_drives_a_window_with_no_timestamp_method(
        kafka_broker, event_time):
    """Records over 30 s of event time on 2 partitions; a WindowBolt with no timestamp() of its own counts
    them per key per second. With event_time="timestamp" the time is the record's (the value is a plain
    string); with "field:at" it is the json field, while the records' own timestamps all say now."""
    from confluent_kafka import Producer


    kafka_broker.create_topic("clicks", 2)
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap})
    expected: dict[tuple[str, int], int] = {}
    for i in range(600):
        at = BASE_MS + i * 50 + (i % 7) * 10
        key = f"u{i % 3}"
        window = at - at % 1000
        expected[(key, window)] = expected.get((key, window), 0) + 1
        if event_time == "timestamp":
            producer.produce("clicks", key=key.encode(), value=f"c{i}".encode(), partition=i % 2, timestamp=at)
        else:
            producer.produce("clicks", key=key.encode(), value=f'{{"at": {at}, "n": {i}}}'.encode(), partition=i % 2)
    assert producer.flush(30) == 0
    b = TopologyBuilder("kafka-event-time")
    b.set_spout("clicks", KafkaSource, params={
        "topic": "clicks", "bootstrap": kafka_broker.bootstrap, "key": "utf-8",
        "value": "utf-8" if event_time == "timestamp" else "json", "end": "end", "event_time": event_time})
    b.set_bolt("count", kafka_parts.DefaultTimeCount, pe_idle_timeout=None).key_grouping("clicks")
    b.set_bolt("c", CollectorBolt).shuffle_grouping("count")
    result = run_to_completion(b, workers="in-process", timeout=60)
    assert not [v for _, v in result["c"] if is_late(v)]
    got = {(k, v["start"]): v["result"] for k, v in result["c"]}
    assert got == expected


def test_a_join_of_two_kafka_topics_uses_the_record_timestamps_as_event_time_with_the_joins_default_time_field(
        kafka_broker):
    """Orders and payments keyed by order id, json values without any time field: event_time="timestamp"
    gives each its record's timestamp in "ts", where the join's default time="ts" reads it. A payment 200 ms
    after its order joins it; one 5 s after does not (the window is 1 s)."""
    from confluent_kafka import Producer


    for topic in ("orders", "payments"):
        kafka_broker.create_topic(topic, 2)
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap})
    for i in range(40):
        at = BASE_MS + i * 10_000
        producer.produce("orders", key=f"o{i}".encode(), value=f'{{"id": "o{i}", "amount": {i}}}'.encode(),
                         partition=i % 2, timestamp=at)
        late = 5_000 if i % 4 == 0 else 200  # every 4th payment comes too late to join
        producer.produce("payments", key=f"o{i}".encode(), value=f'{{"id": "o{i}", "paid": true}}'.encode(),
                         partition=i % 2, timestamp=at + late)
    assert producer.flush(30) == 0
    b = TopologyBuilder("kafka-join-time")
    for topic in ("orders", "payments"):
        b.set_spout(topic, KafkaSource, params={"topic": topic, "bootstrap": kafka_broker.bootstrap, "key": "utf-8",
                                                "value": "json", "end": "end", "event_time": "timestamp"})
    b.join("j", "orders", "payments", on="id", window=1_000)
    b.set_bolt("c", CollectorBolt).shuffle_grouping("j")
    result = run_to_completion(b, workers="in-process", timeout=60)
    pairs = sorted((v["left"]["id"], v["right"]["ts"] - v["left"]["ts"]) for _, v in result["c"])
    assert pairs == sorted((f"o{i}", 200) for i in range(40) if i % 4)


def test_a_record_without_its_event_time_field_goes_to_dead_letters_naming_the_field_and_the_rest_go_on(
        kafka_broker, tmp_path):
    import json

    kafka_broker.create_topic("events", 1)
    kafka_broker.produce("events", [(None, b'{"at": 5, "n": 1}'), (None, b'{"n": 2}'), (None, b'{"at": "soon"}'),
                                    (None, b'{"at": 7.5, "n": 3}')])
    b = TopologyBuilder("kafka-no-time")
    b.set_spout("events", KafkaSource, params={"topic": "events", "bootstrap": kafka_broker.bootstrap,
                                               "value": "json", "end": "end", "event_time": "field:at"})
    b.set_bolt("c", CollectorBolt).shuffle_grouping("events")
    config = JobConfig(data_dir=tmp_path / "data", elasticity=False)
    result = run_to_completion(b, workers="in-process", timeout=60, config=config, check=False)
    assert [v for _, v in result["c"]] == [{"at": 5, "n": 1, "ts": 5}, {"at": 7.5, "n": 3, "ts": 7.5}]
    letters = [json.loads(line) for line in (tmp_path / "data" / "kafka-no-time" / "dead_letters.jsonl")
               .read_text().splitlines()]
    assert [letter["msg_id"]["offset"] for letter in letters] == [1, 2]
    assert all("no number in field 'at'" in letter["error"] for letter in letters)
