"""KafkaSource and KafkaSink against a real Kafka-protocol broker (Tansu, started by the kafka_broker fixture).

What the broker cannot show is said where it matters: Tansu shows aborted records to read_committed
readers, so the sink only ever commits (it produces a checkpoint's records once it completed); it refuses
CreatePartitions, so new partitions of a running job are not tested here (docs/CONNECTORS.md).
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from esault import JobConfig, LocalCluster, TopologyBuilder
from esault.connectors import KafkaSource
from esault.errors import UnitStartError
from esault.testing import CollectorBolt, collected, reset_collected, run_to_completion, wait_until

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))  # eo_parts imports wordcount
import eo_parts  # noqa: E402
import kafka_parts  # noqa: E402

pytestmark = pytest.mark.system


@pytest.fixture(autouse=True)
def _fresh_collectors():
    """CollectorBolt lists live in this process: each test starts with none."""
    reset_collected()
    yield
    reset_collected()


def eo_config(tmp_path: Path, **changes) -> JobConfig:
    return JobConfig(data_dir=tmp_path / "data", elasticity=False, checkpoint_interval=0.3,
                     message_timeout=300.0, **changes)


def test_a_bounded_source_reads_every_record_of_four_partitions_once_and_the_job_finishes_by_itself(kafka_broker):
    kafka_broker.create_topic("orders", 4)
    records = [(f"k{i % 10}", json.dumps({"n": i}), i % 4) for i in range(3000)]
    kafka_broker.produce("orders", records)
    b = TopologyBuilder("kafka-bounded")
    b.set_spout("orders", KafkaSource, 3, params={"topic": "orders", "bootstrap": kafka_broker.bootstrap,
                                                  "key": "utf-8", "value": "json", "end": "end"})
    b.set_bolt("c", CollectorBolt).shuffle_grouping("orders")
    result = run_to_completion(b, workers="in-process", timeout=60)  # no stop: the job ends by itself
    got = sorted(v["n"] for _, v in result["c"])
    assert got == list(range(3000))
    assert {k for k, _ in result["c"]} == {f"k{i}" for i in range(10)}


def test_record_output_carries_topic_partition_offset_timestamp_and_headers(kafka_broker):
    from confluent_kafka import Producer

    kafka_broker.create_topic("clicks", 2)
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap})
    for i in range(6):
        producer.produce("clicks", key=b"u", value=f"c{i}".encode(), partition=i % 2, timestamp=1_700_000_000_000 + i,
                         headers=[("trace", f"t{i}".encode())])
    assert producer.flush(10) == 0
    b = TopologyBuilder("kafka-records")
    b.set_spout("clicks", KafkaSource, params={"topic": "clicks", "bootstrap": kafka_broker.bootstrap,
                                               "value": "utf-8", "output": "record", "end": "end"})
    b.set_bolt("c", CollectorBolt).shuffle_grouping("clicks")
    result = run_to_completion(b, workers="in-process", timeout=60)
    by_value = {v["value"]: v for _, v in result["c"]}
    assert sorted(by_value) == [f"c{i}" for i in range(6)]
    for i in range(6):
        r = by_value[f"c{i}"]
        assert (r["topic"], r["partition"], r["offset"]) == ("clicks", i % 2, i // 2)
        assert r["timestamp"] == 1_700_000_000_000 + i
        assert r["headers"] == [["trace", f"t{i}".encode()]]


def test_a_poison_record_goes_to_dead_letters_with_its_topic_partition_and_offset_and_the_partition_goes_on(
        kafka_broker, tmp_path):
    kafka_broker.create_topic("events", 1)
    kafka_broker.produce("events", [(None, b'{"n": 1}'), (None, b"not json"), (None, b'{"n": 3}')])
    b = TopologyBuilder("kafka-poison")
    b.set_spout("events", KafkaSource, params={"topic": "events", "bootstrap": kafka_broker.bootstrap,
                                               "value": "json", "end": "end"})
    b.set_bolt("c", CollectorBolt).shuffle_grouping("events")
    config = JobConfig(data_dir=tmp_path / "data", elasticity=False)
    result = run_to_completion(b, workers="in-process", timeout=60, config=config, check=False)
    assert [v for _, v in result["c"]] == [{"n": 1}, {"n": 3}]
    letters = [json.loads(line) for line in (tmp_path / "data" / "kafka-poison" / "dead_letters.jsonl")
               .read_text().splitlines()]
    assert len(letters) == 1
    assert letters[0]["msg_id"] == {"topic": "events", "partition": 0, "offset": 1}
    assert "JSONDecodeError" in letters[0]["error"] and "offset 1" in letters[0]["error"]


def test_the_plain_read_by_runs_emits_what_the_per_record_read_emits_tombstones_and_a_poison_record_included(
        kafka_broker, tmp_path):
    """output="value" reads a partition's fetched run at once (accept_run, a codec's decode_many); output="record"
    takes each record on its own. Over the same topic, with null keys, null values and a poison record in the
    middle of a run, both give the same (key, value) pairs and dead-letter the same record."""
    kafka_broker.create_topic("mix", 2)
    records = [(None if i % 7 == 0 else f"k{i % 5}", None if i % 11 == 0 else json.dumps({"n": i}), i % 2)
               for i in range(400)]
    records[201] = ("k1", "not json", 1)
    kafka_broker.produce("mix", records)
    b = TopologyBuilder("kafka-runs")
    params = {"bootstrap": kafka_broker.bootstrap, "key": "utf-8", "value": "json", "end": "end"}
    b.set_spout("named", KafkaSource, params={"topic": "mix", **params})  # runs keyed by partition
    b.set_spout("pattern", KafkaSource, params={"topic": "^mi.*", **params})  # runs keyed by (topic, partition)
    b.set_spout("each", KafkaSource, params={"topic": "mix", "output": "record", **params})
    for name in ("named", "pattern", "each"):
        b.set_bolt(f"c_{name}", CollectorBolt, params={"name": name}).shuffle_grouping(name)
    config = JobConfig(data_dir=tmp_path / "data", elasticity=False)
    result = run_to_completion(b, workers="in-process", timeout=60, config=config, check=False)
    each = sorted(((k, v["value"]) for k, v in result["c_each"]), key=repr)
    expected = sorted(((k, None if v is None else json.loads(v)) for k, v, _ in records if v != "not json"),
                      key=repr)
    assert each == expected
    assert sorted(result["c_named"], key=repr) == expected
    assert sorted(result["c_pattern"], key=repr) == expected
    letters = [json.loads(line) for line in (tmp_path / "data" / "kafka-runs" / "dead_letters.jsonl")
               .read_text().splitlines()]
    assert sorted(letter["unit"] for letter in letters) == ["each", "named", "pattern"]
    assert {json.dumps(letter["msg_id"]) for letter in letters} == {
        json.dumps({"topic": "mix", "partition": 1, "offset": 100})}


def test_an_unreachable_broker_fails_the_job_at_start_within_the_connect_timeout_naming_the_address(tmp_path):
    from esault.testing.server_process import free_port

    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    b = TopologyBuilder("kafka-nobroker")
    b.set_spout("orders", KafkaSource, params={"topic": "orders", "bootstrap": address, "connect_timeout": 2.0})
    b.set_bolt("c", CollectorBolt).shuffle_grouping("orders")
    started = time.monotonic()
    with LocalCluster() as cluster, pytest.raises(UnitStartError, match=f"no Kafka broker answered at '{address}'"):
        cluster.submit(b.build(), JobConfig(data_dir=tmp_path / "data", elasticity=False))
    assert time.monotonic() - started < 15


def test_an_unknown_topic_is_an_error_naming_it_and_create_true_makes_it(kafka_broker, tmp_path):
    kafka_broker.create_topic("present", 1)
    b = TopologyBuilder("kafka-unknown")
    b.set_spout("orders", KafkaSource, params={"topic": "absent", "bootstrap": kafka_broker.bootstrap})
    b.set_bolt("c", CollectorBolt).shuffle_grouping("orders")
    with LocalCluster() as cluster, pytest.raises(UnitStartError, match="topic 'absent' does not exist"):
        cluster.submit(b.build(), JobConfig(data_dir=tmp_path / "data", elasticity=False))
    b = TopologyBuilder("kafka-create")
    b.set_spout("orders", KafkaSource, params={"topic": "made", "bootstrap": kafka_broker.bootstrap,
                                               "create": True, "partitions": 3, "end": "end"})
    b.set_bolt("c", CollectorBolt).shuffle_grouping("orders")
    run_to_completion(b, workers="in-process", timeout=60)
    from confluent_kafka.admin import AdminClient

    topics = AdminClient({"bootstrap.servers": kafka_broker.bootstrap}).list_topics(timeout=10).topics
    assert len(topics["made"].partitions) == 3


def test_each_completed_checkpoint_commits_the_source_offsets_to_its_consumer_group(kafka_broker, tmp_path):
    from confluent_kafka import Consumer, TopicPartition

    kafka_broker.create_topic("logs", 2)
    kafka_broker.produce("logs", [(None, f"{i}", i % 2) for i in range(200)])
    b = TopologyBuilder("kafka-commit")
    b.set_spout("logs", KafkaSource, params={"topic": "logs", "bootstrap": kafka_broker.bootstrap,
                                             "group": "lag-watch"})  # tails: never finishes by itself
    b.set_bolt("c", CollectorBolt).shuffle_grouping("logs")
    reader = Consumer({"bootstrap.servers": kafka_broker.bootstrap, "group.id": "lag-watch"})
    with LocalCluster() as cluster:
        job = cluster.submit(b.build(), eo_config(tmp_path))
        try:
            wait_until(lambda: len(collected("c")) == 200, 30, message="every record read")

            def committed():
                tps = reader.committed([TopicPartition("logs", 0), TopicPartition("logs", 1)], timeout=5)
                return [tp.offset for tp in tps]

            wait_until(lambda: committed() == [100, 100], 30, message="offsets committed after a checkpoint")
        finally:
            job.stop()
            reader.close()


def test_a_keyed_count_from_four_partitions_into_a_kafka_topic_is_exact(kafka_broker, tmp_path):
    kafka_broker.create_topic("words", 4)
    kafka_broker.create_topic("counts", 2)
    records = kafka_parts.words(4000)
    kafka_broker.produce("words", records)
    topology = kafka_parts.build("kafka-count", kafka_broker.bootstrap, "words", "counts")
    with LocalCluster(workers=2) as cluster:
        job = cluster.submit(topology, eo_config(tmp_path))
        assert job.wait(120), job.status()
        job.stop()
    output = kafka_broker.read("counts")
    assert kafka_parts.running_counts(output) == kafka_parts.exact_counts(records)


@pytest.mark.parametrize("max_skew", [None, 50], ids=["plain", "aligned"])
def test_a_stopped_job_restarted_on_its_data_dir_resumes_after_its_checkpoint_with_nothing_twice(
        kafka_broker, tmp_path, max_skew):
    """Aligned: records wait in the source's buffers, which are not in its position: read again after."""
    kafka_broker.create_topic("words", 4)
    kafka_broker.create_topic("counts", 1)
    records = kafka_parts.words(3000)
    kafka_broker.produce("words", records)
    topology = kafka_parts.build("kafka-restart", kafka_broker.bootstrap, "words", "counts", pace=0.003,
                                 max_records=50, max_pending=100, max_skew=max_skew)
    with LocalCluster(workers=2) as cluster:
        job = cluster.submit(topology, eo_config(tmp_path))
        wait_until(lambda: job.checkpoints.stats.completed >= 2, 60, message="two checkpoints")
        job.stop()  # mid-stream: a final checkpoint ends the spouts at its barrier
        first = kafka_parts.running_counts(kafka_broker.read("counts"))
        assert 0 < sum(map(len, first.values())) < len(records), "the first run did not stop mid-stream"
        job = cluster.submit(topology, eo_config(tmp_path))  # same data_dir: resumes at the checkpoint
        assert job.wait(120), job.status()
        job.stop()
    assert kafka_parts.running_counts(kafka_broker.read("counts")) == kafka_parts.exact_counts(records)


def test_kill_9_of_a_worker_mid_stream_leaves_the_output_topic_and_the_spark_table_exact(kafka_broker, tmp_path,
                                                                                     monkeypatch):
    from esault.connectors.transaction_journal import JOURNAL_ENV

    monkeypatch.setenv(JOURNAL_ENV, str(tmp_path / "journal"))  # the sinks' transactions, for a mismatch
    kafka_broker.create_topic("words", 4)
    kafka_broker.create_topic("counts", 2)
    records = kafka_parts.words(4000)
    kafka_broker.produce("words", records)
    topology = kafka_parts.build("kafka-kill", kafka_broker.bootstrap, "words", "counts", pace=0.003,
                                 max_records=50, max_pending=100, spout_placement="worker", table="kafka_counts")
    with LocalCluster(workers=3, heartbeat_timeout=1.0) as cluster:
        job = cluster.submit(topology, eo_config(tmp_path))
        wait_until(lambda: job.checkpoints.stats.completed >= 2, 60, message="two checkpoints")
        hosts = {w: set(spus) for w, spus in cluster.registry.spus_on.items()}
        victim = max(hosts, key=lambda w: (bool(hosts[w] & set(job.spus("words"))),
                                           bool(hosts[w] & set(job.spus("count"))), len(hosts[w])))
        os.kill(cluster.registry.pids[victim], signal.SIGKILL)
        cluster.pool.spawn("r1")
        wait_until(lambda: len(job.checkpoints.stats.recoveries) >= 1, 60, message="the rollback")
        assert job.wait(120), job.status()
        job.stop()
    kafka_parts.assert_counts_exact(kafka_broker, "counts", records, tmp_path / "journal")
    assert eo_parts.table_rows(job.data_dir / "warehouse", "kafka_counts") == kafka_parts.exact_counts(records)


DRIVER = """
import sys
sys.path[:0] = {paths!r}
import kafka_parts
from esault import JobConfig, LocalCluster
with LocalCluster(workers=2, heartbeat_timeout=2.0) as cluster:
    job = cluster.submit(kafka_parts.build("kafka-driver", {bootstrap!r}, "words", "counts", pace=0.003,
                                           max_records=50, max_pending=100),
                         JobConfig(data_dir={data!r}, elasticity=False, checkpoint_interval=0.3))
    print(" ".join(str(p.pid) for p in cluster.pool.processes), flush=True)
    job.wait()
    job.stop()
"""


def test_kill_9_of_the_driver_mid_stream_then_a_restart_leaves_the_output_topic_exact(kafka_broker, tmp_path):
    """The spouts run in the driver (the default placement): they die with it; the restart resumes them at
    the last completed checkpoint's offsets, and the sinks publish what it covers."""
    kafka_broker.create_topic("words", 4)
    kafka_broker.create_topic("counts", 2)
    records = kafka_parts.words(4000)
    kafka_broker.produce("words", records)
    data = tmp_path / "data"
    here = Path(__file__).resolve().parent
    script = DRIVER.format(paths=[str(here.parents[1]), str(here)], bootstrap=kafka_broker.bootstrap,
                           data=str(data))
    eo_parts.kill_driver_after_checkpoints(script, data / "kafka-driver" / "checkpoints.sqlite")
    cut = kafka_parts.running_counts(kafka_broker.read("counts"))
    assert sum(map(len, cut.values())) < len(records), "the driver was not killed mid-stream"
    topology = kafka_parts.build("kafka-driver", kafka_broker.bootstrap, "words", "counts", pace=0.003,
                                 max_records=50, max_pending=100)
    with LocalCluster(workers=2) as cluster:
        job = cluster.submit(topology, JobConfig(data_dir=data, elasticity=False, checkpoint_interval=0.3))
        assert job.restored_from is not None and job.restored_from.kind == "checkpoint"
        assert job.wait(120), job.status()
        job.stop()
    assert kafka_parts.running_counts(kafka_broker.read("counts")) == kafka_parts.exact_counts(records)


def test_a_pattern_source_picks_up_a_topic_created_while_the_job_runs_each_record_once(kafka_broker, tmp_path):
    """Tansu refuses CreatePartitions, so new partitions are shown through a new topic of the pattern: the
    same metadata refresh and ownership rule assign both (esault.connectors.partitions)."""
    kafka_broker.create_topic("events-a", 2)
    kafka_broker.produce("events-a", [(None, f"a{i}", i % 2) for i in range(40)])
    b = TopologyBuilder("kafka-pattern")
    b.set_spout("events", KafkaSource, 2, params={"topic": "^events-.*", "bootstrap": kafka_broker.bootstrap,
                                                  "value": "utf-8", "refresh_interval": 0.2})
    b.set_bolt("c", CollectorBolt).shuffle_grouping("events")
    with LocalCluster() as cluster:
        job = cluster.submit(b.build(), eo_config(tmp_path))
        try:
            wait_until(lambda: len(collected("c")) == 40, 30, message="the first topic read")
            kafka_broker.create_topic("events-b", 3)
            kafka_broker.produce("events-b", [(None, f"b{i}", i % 3) for i in range(30)])
            wait_until(lambda: len(collected("c")) >= 70, 30, message="the new topic read")
            job.drain()
        finally:
            job.stop()
    values = sorted(v for _, v in collected("c"))
    assert values == sorted([f"a{i}" for i in range(40)] + [f"b{i}" for i in range(30)])


def test_at_least_once_commits_the_acked_offsets_to_the_group_and_a_restart_from_them_reads_the_rest(
        kafka_broker, tmp_path):
    from confluent_kafka import Consumer, TopicPartition

    kafka_broker.create_topic("jobs", 2)
    kafka_broker.produce("jobs", [(None, f"{i}", i % 2) for i in range(100)])

    def topology():
        b = TopologyBuilder("kafka-alo")
        b.set_spout("jobs", KafkaSource, params={"topic": "jobs", "bootstrap": kafka_broker.bootstrap,
                                                 "value": "utf-8", "group": "alo", "start": "committed"})
        b.set_bolt("c", CollectorBolt).shuffle_grouping("jobs")
        return b.build()

    config = JobConfig(data_dir=tmp_path / "data", elasticity=False, guarantee="at_least_once")
    reader = Consumer({"bootstrap.servers": kafka_broker.bootstrap, "group.id": "alo"})
    committed = lambda: [tp.offset for tp in reader.committed([TopicPartition("jobs", 0), TopicPartition("jobs", 1)],
                                                              timeout=5)]
    try:
        with LocalCluster() as cluster:
            job = cluster.submit(topology(), config)
            wait_until(lambda: len(collected("c")) == 100, 30, message="every record read")
            job.stop()  # close() commits what the last acks settled
            assert committed() == [50, 50]
            kafka_broker.produce("jobs", [(None, f"{i}", i % 2) for i in range(100, 140)])
            reset_collected()
            job = cluster.submit(topology(), config)  # no checkpoints: it starts from the group's offsets
            wait_until(lambda: len(collected("c")) == 40, 30, message="the new records read")
            job.drain()
            job.stop()
        assert sorted(int(v) for _, v in collected("c")) == list(range(100, 140))
    finally:
        reader.close()


def test_a_paused_broker_makes_the_source_wait_and_say_so_then_go_on_with_nothing_lost(kafka_broker, tmp_path,
                                                                                       caplog):
    import logging
    import threading

    caplog.set_level(logging.WARNING, logger="esault.connectors.kafka")
    kafka_broker.create_topic("ticks", 2)
    kafka_broker.produce("ticks", [(None, f"{i}", i % 2) for i in range(100)])
    b = TopologyBuilder("kafka-pause")
    b.set_spout("ticks", KafkaSource, params={"topic": "ticks", "bootstrap": kafka_broker.bootstrap,
                                              "value": "utf-8", "refresh_interval": 0.5})
    b.set_bolt("c", CollectorBolt).shuffle_grouping("ticks")
    with LocalCluster() as cluster:
        job = cluster.submit(b.build(), eo_config(tmp_path))
        try:
            wait_until(lambda: len(collected("c")) == 100, 30, message="the first records read")
            paused = time.monotonic()
            kafka_broker.pause()  # SIGSTOP for 10 s (the case): sockets stay open, nothing answers
            try:
                wait_until(lambda: "did not answer a metadata request" in caplog.text, 30,
                           message="the source saying it waits")
                # the pause itself, not synchronisation: 10 s from SIGSTOP, while checkpoints go on
                threading.Event().wait(max(0.0, 10.0 - (time.monotonic() - paused)))
            finally:
                kafka_broker.resume()
            wait_until(lambda: "answer again" in caplog.text, 30, message="the source seeing the broker back")
            kafka_broker.produce("ticks", [(None, f"{i}", i % 2) for i in range(100, 200)])
            wait_until(lambda: len(collected("c")) >= 200, 60, message="the records after the pause")
            job.drain()
        finally:
            job.stop()
    assert sorted(int(v) for _, v in collected("c")) == list(range(200))


def test_the_test_broker_starts_on_another_port_when_its_port_was_taken_before_it_bound(monkeypatch):
    import socket

    from esault.testing import kafka as kafka_testing
    from esault.testing import server_process

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        ports = iter([taken.getsockname()[1]])
        real = server_process.free_port
        monkeypatch.setattr(server_process, "free_port", lambda host="127.0.0.1": next(ports, None) or real(host))
        with kafka_testing.KafkaBroker() as broker:
            assert broker.port != taken.getsockname()[1]
            broker.create_topic("t", 1)


def test_a_setting_librdkafka_refuses_fails_the_job_at_start_naming_the_config_param(kafka_broker, tmp_path):
    kafka_broker.create_topic("orders", 1)
    b = TopologyBuilder("kafka-badconfig")
    b.set_spout("orders", KafkaSource, params={"topic": "orders", "bootstrap": kafka_broker.bootstrap,
                                               "config": {"fetch.min.bytes": "lots"}})
    b.set_bolt("c", CollectorBolt).shuffle_grouping("orders")
    with LocalCluster() as cluster, pytest.raises(UnitStartError, match="librdkafka refused the consumer settings"):
        cluster.submit(b.build(), JobConfig(data_dir=tmp_path / "data", elasticity=False))


@pytest.mark.parametrize("max_skew", [None, 100])
def test_event_time_alignment_keeps_partitions_read_at_different_speeds_from_making_records_late(
        kafka_broker, tmp_path, max_skew):
    """Four partitions over the same 15 s of record time; one source reads them all. librdkafka hands over
    one partition's fetch before the next, so without alignment the source's records leave out of time
    order by far more than the window's 200 ms bound (a window that fires between two partitions takes the
    later ones' records as late: whether a tick falls there is timing, so the order itself is checked);
    with max_skew (within the bound) they leave within it, and every record is counted on time."""
    from confluent_kafka import Producer

    from esault.windows import is_late

    kafka_broker.create_topic("stamped", 4)
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap, "linger.ms": 20})
    for p in range(4):
        for j in range(1500):
            producer.produce("stamped", key=b"k", value=b"x", partition=p, timestamp=1_700_000_000_000 + j * 10)
    assert producer.flush(30) == 0
    params = {"topic": "stamped", "bootstrap": kafka_broker.bootstrap, "key": "utf-8", "output": "record",
              "end": "end"}
    if max_skew is not None:
        params["max_skew"] = max_skew
    b = TopologyBuilder("kafka-aligned")
    b.set_spout("stamped", KafkaSource, params=params)
    b.set_bolt("count", kafka_parts.RecordTimeCount, pe_idle_timeout=None).key_grouping("stamped")
    b.set_bolt("c", CollectorBolt).shuffle_grouping("count")
    b.set_bolt("left", CollectorBolt).shuffle_grouping("stamped")  # the source's output, in its order
    result = run_to_completion(b, workers="in-process", timeout=60)
    stamps = [v["timestamp"] for _, v in result["left"]]
    assert len(stamps) == 6000
    behind = max(high - ts for high, ts in zip(itertools.accumulate(stamps, max), stamps))
    if max_skew is None:
        assert behind > 200, f"the partitions were read evenly (a record {behind} ms behind): this run shows nothing"
    else:
        assert behind <= max_skew, f"a record left the aligned source {behind} ms behind one before it"
        late = [v for _, v in result["c"] if is_late(v)]
        assert not late, f"{len(late)} records late, e.g. {late[:3]}"
        on_time = sum(v["result"] for _, v in result["c"] if not is_late(v))
        assert on_time == 6000


def test_entering_a_started_broker_keeps_that_one_broker_and_stop_ends_it():
    from esault.testing.kafka import KafkaBroker

    broker = KafkaBroker().start()
    first = broker.process
    with broker as entered:
        assert entered.process is first and first.poll() is None
        entered.create_topic("t", 1)
    assert first.poll() is not None  # stopped: no second broker was left running
