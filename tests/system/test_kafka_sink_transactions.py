"""KafkaSink's two-phase commit against a real broker: staged at the barrier, one transaction per completed
checkpoint, a marker committed with it, recovery on open, fencing; and the sink in jobs under each guarantee.

Tansu shows aborted records to read_committed readers, so a crash *inside* a transaction (after produce,
before the commit) cannot be shown exact on it; the sink's design keeps that window to the commit call
itself (records are produced only once their checkpoint completed). The kill -9 tests here cut the
protocol at the steps around it: after staging, and after the commit before the stage file is deleted.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from esault import JobConfig, TopologyBuilder
from esault.connectors import KafkaSink
from esault.connectors.kafka_transactions import TransactionalPublisher
from esault.connectors.staging import EpochStage
from esault.testing import ListSpout, run_to_completion, wait_until

pytestmark = pytest.mark.system

ROOT = Path(__file__).resolve().parents[2]


def publisher(broker, stage_dir: Path, restored: int | None, name: str = "esault.test.sink.i0",
              timeout: float = 10.0):
    import confluent_kafka

    p = TransactionalPublisher(confluent_kafka, {"bootstrap.servers": broker.bootstrap}, name, "out",
                               EpochStage(stage_dir), restored, timeout=timeout)
    if restored is not None:
        p.resume()  # what KafkaSink does once the restored state is in (nothing said about what was staged)
    return p


def records(*values: str) -> list[list]:
    return [["out", -1, None, v.encode(), None, 0] for v in values]


def values(broker) -> list[str]:
    return sorted(r["value"].decode() for r in broker.read("out"))


@pytest.fixture
def out(kafka_broker):
    kafka_broker.create_topic("out", 1)
    return kafka_broker


def test_staged_epochs_reach_the_topic_only_once_their_checkpoint_completes(out, tmp_path):
    p = publisher(out, tmp_path / "stage", None)
    p.stage_epoch(1, records("a", "b")).result(10)
    p.stage_epoch(2, records("c")).result(10)
    assert values(out) == []
    p.publish_through(1).result(10)
    assert values(out) == ["a", "b"]
    p.publish_through(2).result(10)
    assert values(out) == ["a", "b", "c"]
    assert EpochStage(tmp_path / "stage").epochs() == []
    p.close(10)


def test_a_reopened_writer_publishes_the_staged_epochs_its_restored_checkpoint_covers_and_drops_later_ones(
        out, tmp_path):
    p = publisher(out, tmp_path / "stage", None)
    for epoch, value in ((1, "a"), (2, "b"), (3, "c")):
        p.stage_epoch(epoch, records(value)).result(10)
    p.publish_through(1).result(10)
    p.abandon()  # a rollback: epochs 2 and 3 stay staged
    again = publisher(out, tmp_path / "stage", restored=2)  # checkpoint 2 completed, 3 did not
    assert again.wait_idle(10)
    assert values(out) == ["a", "b"]
    assert EpochStage(tmp_path / "stage").epochs() == []
    again.close(10)


def test_an_epoch_committed_before_a_crash_left_its_stage_file_is_not_published_twice(out, tmp_path):
    stage = EpochStage(tmp_path / "stage")
    p = publisher(out, tmp_path / "stage", None)
    p.stage_epoch(1, records("a")).result(10)
    p.publish_through(1).result(10)
    p.abandon()
    stage.write(1, records("a"))  # as if the process died between the commit and the file's deletion
    again = publisher(out, tmp_path / "stage", restored=1)
    assert again.wait_idle(10)
    assert values(out) == ["a"]
    assert stage.epochs() == []
    again.close(10)


def test_a_newer_writer_with_the_same_transactional_id_fences_the_older_one(out, tmp_path):
    """The old writer's commit is refused (Kafka: ProducerFenced; Tansu: it never answers, and the call times
    out): logged, the epoch kept staged, none of its records visible, even to read_uncommitted."""
    old = publisher(out, tmp_path / "old", None, timeout=2.0)
    new = publisher(out, tmp_path / "new", None)
    old.stage_epoch(1, records("zombie")).result(10)
    old.publish_through(1).result(60)
    assert old.published == [] and EpochStage(tmp_path / "old").epochs() == [1]
    assert out.read("out", isolation="read_uncommitted") == []
    new.stage_epoch(1, records("live")).result(10)
    new.publish_through(1).result(10)
    assert values(out) == ["live"]
    old.abandon()
    new.close(10)


def test_a_fresh_start_resets_the_marker_so_epoch_numbers_starting_again_are_published(out, tmp_path):
    first = publisher(out, tmp_path / "stage", None)
    first.stage_epoch(7, records("old run")).result(10)
    first.publish_through(7).result(10)
    first.close(10)
    fresh = publisher(out, tmp_path / "stage", None)  # --fresh: epochs count from 1 again
    fresh.stage_epoch(1, records("new run")).result(10)
    fresh.publish_through(1).result(10)
    assert values(out) == ["new run", "old run"]
    fresh.close(10)


_CRASHING_WRITER = textwrap.dedent("""
    import sys
    sys.path.insert(0, {root!r})
    import confluent_kafka
    from esault.connectors.kafka_sink import _failpoint
    from esault.connectors.kafka_transactions import TransactionalPublisher
    from esault.connectors.staging import EpochStage
    p = TransactionalPublisher(confluent_kafka, {{"bootstrap.servers": {bootstrap!r}}}, "esault.test.sink.i0", "out",
                               EpochStage({stage!r}), None, 10.0, failpoint=_failpoint())
    p.stage_epoch(1, [["out", -1, None, b"a", None, 0]]).result(10)
    p.stage_epoch(2, [["out", -1, None, b"b", None, 0]]).result(10)
    p.publish_through(2).result(30)
    print("not killed")
""")


@pytest.mark.parametrize(("step", "restored", "expected"), [
    ("staged", 1, ["a"]),          # killed after staging epoch 1: its checkpoint completed, so it is published
    ("staged", None, []),          # ... on a fresh start nothing staged is published
    ("committed", 2, ["a", "b"]),  # killed after epoch 1's commit, before its file was deleted: not twice
    ("committed", 1, ["a"]),       # ... and epoch 2, whose checkpoint did not complete, is dropped
])
def test_kill_9_of_the_writer_at_a_step_then_a_reopen_leaves_each_record_once(out, tmp_path, step, restored,
                                                                               expected):
    script = _CRASHING_WRITER.format(root=str(ROOT), bootstrap=out.bootstrap, stage=str(tmp_path / "stage"))
    env = {**os.environ, "ESAULT_KAFKA_SINK_FAILPOINT": step}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == -9, done.stdout + done.stderr
    again = publisher(out, tmp_path / "stage", restored)
    assert again.wait_idle(10)
    assert values(out) == expected
    again.close(10)


def test_a_kill_9_that_cuts_the_commit_is_the_one_step_that_can_show_a_record_twice_and_the_journal_says_so(
        out, tmp_path, monkeypatch):
    """The explanation of a duplicate seen once when a worker hosting the KafkaSink was killed: the kill cut a
    transaction's commit; the next writer's init_transactions() aborted it and published the epoch again; Tansu
    shows aborted records to read_committed readers. Here the cut is made on purpose (a SIGKILL after the
    epoch's records were delivered into its transaction, before commit_transaction) and the journal
    (esault.connectors.transaction_journal) places every extra copy in that cut transaction."""
    from esault.connectors.transaction_journal import JOURNAL_ENV, explain_duplicates, read_journal

    journal = tmp_path / "journal"
    monkeypatch.setenv(JOURNAL_ENV, str(journal))
    script = _CRASHING_WRITER.format(root=str(ROOT), bootstrap=out.bootstrap, stage=str(tmp_path / "stage"))
    env = {**os.environ, "ESAULT_KAFKA_SINK_FAILPOINT": "committing"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == -9, done.stdout + done.stderr
    cut = read_journal(journal).cut
    assert [(t.epoch, t.transactional_id) for t in cut] == [(1, "esault.test.sink.i0")], cut
    again = publisher(out, tmp_path / "stage", 2)  # both checkpoints completed: epochs 1 and 2 are published
    assert again.wait_idle(10) and again.published == [1, 2]
    again.close(10)
    shown = out.read("out")
    report = explain_duplicates(shown, journal)
    assert sorted(r["value"].decode() for r in shown) in (["a", "b"], ["a", "a", "b"]), report
    if len(shown) == 3:  # this broker shows the aborted copy (Tansu does; Kafka hides it)
        assert report.startswith("every extra copy lies in a transaction whose commit was cut"), report
        first, second = sorted((r for r in shown if r["value"] == b"a"), key=lambda r: r["offset"])
        assert not read_journal(journal).find("out", 0, first["offset"]).committed, report
        assert read_journal(journal).find("out", 0, second["offset"]).committed, report


@pytest.mark.parametrize("step", ["produced", "committing"])
def test_a_broker_that_stops_answering_inside_a_transaction_delays_its_commit_and_never_aborts_it(
        out, tmp_path, step, caplog):
    """The broker is stopped (SIGSTOP) for 3 s right after an epoch's records were produced (before the marker
    is sent), or before the commit, while the step's timeout is 1 s. The same transaction is retried until the
    broker answers and commits once: giving it up would have it aborted by the next producer, and Tansu shows
    aborted records (each record twice once the epoch is published again)."""
    import confluent_kafka

    resumed = threading.Event()

    def stop_the_broker(at: str, epoch: int) -> None:
        if at == step and not resumed.is_set():
            out.pause()
            # the outage's length; the flag first: the publish may end as soon as the broker answers again
            threading.Timer(3.0, lambda: (resumed.set(), out.resume())).start()

    p = TransactionalPublisher(confluent_kafka, {"bootstrap.servers": out.bootstrap}, "esault.test.sink.i0", "out",
                               EpochStage(tmp_path / "stage"), None, timeout=1.0, failpoint=stop_the_broker)
    p.stage_epoch(1, records("a", "b")).result(10)
    with caplog.at_level("WARNING", logger="esault.connectors.kafka"):
        p.publish_through(1).result(60)
    assert resumed.is_set() and p.published == [1], (
        f"the publish gave its transaction up, or the broker answered while stopped: published "
        f"{p.published}, outage over: {resumed.is_set()}, broker process state: {out.state()!r}, "
        f"log: {caplog.text!r}")
    assert "epoch 1 waits for the broker" in caplog.text
    p.publish_through(1).result(10)  # what a later completion does: nothing left to publish
    p.close(10)
    assert values(out) == ["a", "b"]


def _sink_job(name: str, bootstrap: str, items: list) -> TopologyBuilder:
    b = TopologyBuilder(name)
    b.set_spout("s", ListSpout, params={"items": items})
    b.set_bolt("out", KafkaSink, params={"bootstrap": bootstrap, "topic": "out", "key": "utf-8",
                                         "value": "json"}).shuffle_grouping("s")
    return b


@pytest.mark.parametrize("guarantee", ["exactly_once", "at_least_once", "none"])
def test_a_job_writes_every_tuple_to_the_topic_once_under_each_guarantee(out, tmp_path, guarantee):
    items = [[f"k{i % 3}", {"n": i}] for i in range(500)]
    config = JobConfig(data_dir=tmp_path / "data", elasticity=False, guarantee=guarantee, checkpoint_interval=0.2)
    run_to_completion(_sink_job(f"kafka-sink-{guarantee}", out.bootstrap, items), workers="in-process",
                      config=config, timeout=60)
    got = sorted((r["key"].decode(), r["value"]) for r in out.read("out"))
    import json

    assert got == sorted((k, json.dumps(v, separators=(",", ":")).encode()) for k, v in items)


def test_a_sink_whose_topic_is_missing_fails_at_start_naming_it(out, tmp_path):
    b = TopologyBuilder("kafka-sink-missing")
    b.set_spout("s", ListSpout, params={"items": [["a", 1]]})
    b.set_bolt("out", KafkaSink, params={"bootstrap": out.bootstrap, "topic": "nowhere"}).shuffle_grouping("s")
    from esault.errors import RunIncomplete, UnitStartError

    with pytest.raises((UnitStartError, RunIncomplete), match="topic 'nowhere' does not exist"):
        run_to_completion(b, workers="in-process", timeout=30,
                          config=JobConfig(data_dir=tmp_path / "data", elasticity=False))


def _open_sink(broker, tmp_path: Path, instance: int = 0, restored: int | None = None) -> KafkaSink:
    from esault.dsl.context import TopologyContext

    sink = KafkaSink(bootstrap=broker.bootstrap, topic="out", key="utf-8", value="json")
    sink.open(TopologyContext(topology="t", unit="out", spu_id=7, data_dir=tmp_path, instance=instance,
                              instances=1, guarantee="exactly_once", restored_epoch=restored))
    return sink


def _successor_with_one_more_record(broker, tmp_path: Path, restored: int, state: dict) -> KafkaSink:
    """The instance restored from checkpoint `restored` (with its sink state): one more record, and the next
    checkpoint completed."""
    from esault.dsl.tuple import Tuple

    again = _open_sink(broker, tmp_path, restored=restored)
    again.restore_state(state)
    again.process(Tuple("k9", 9))
    again.snapshot_state()
    again.on_checkpoint(restored + 1).result(10)
    again.on_checkpoint_complete(restored + 1)
    return again


def test_the_sink_stages_a_checkpoints_records_at_its_barrier_and_produces_them_only_when_it_completes(
        out, tmp_path):
    """The mutation "publish at the barrier" fails here (the random kill -9 tests rarely cut between a
    barrier and its completion, as for the Spark sink: docs/GUARANTEES.md)."""
    from esault.dsl.tuple import Tuple

    sink = _open_sink(out, tmp_path)
    for i in range(3):
        sink.process(Tuple(f"k{i}", i))
    sink.on_checkpoint(1).result(10)
    sink.process(Tuple("late", 9))  # after the barrier: epoch 2's
    assert sink.wait_published(10) and values(out) == []
    sink.on_checkpoint_complete(1)
    assert sink.wait_published(10)
    assert values(out) == ["0", "1", "2"]
    sink.abandon()  # a rollback: "late" is replayed by the restored job, never produced from here
    again = _open_sink(out, tmp_path, restored=1)
    assert again.wait_published(10) and values(out) == ["0", "1", "2"]
    again.close()


@pytest.mark.parametrize("guarantee", ["exactly_once", "at_least_once"])
def test_a_sink_routes_records_to_a_topic_each_with_headers_and_timestamps(kafka_broker, tmp_path, guarantee):
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import kafka_parts

    for topic in ("even", "odd"):
        kafka_broker.create_topic(topic, 1)
    b = TopologyBuilder(f"kafka-route-{guarantee}")
    b.set_spout("s", ListSpout, params={"items": [[f"k{i}", i] for i in range(20)]})
    b.set_bolt("out", kafka_parts.RoutingSink, params={"bootstrap": kafka_broker.bootstrap,
                                                       "marker_topic": "even"}).shuffle_grouping("s")
    config = JobConfig(data_dir=tmp_path / "data", elasticity=False, guarantee=guarantee, checkpoint_interval=0.2)
    run_to_completion(b, workers="in-process", config=config, timeout=60)
    for topic, rest in (("even", 0), ("odd", 1)):
        records = kafka_broker.read(topic)
        assert sorted(int(r["value"]) for r in records) == [i for i in range(20) if i % 2 == rest]
        assert all(r["headers"] == [("parity", topic.encode())] for r in records)
        assert all(r["timestamp"] == 1_700_000_000_000 + int(r["value"]) for r in records)


def test_a_broker_that_does_not_start_a_transactional_producer_is_refused_naming_at_least_once(tmp_path):
    """No broker with transactions answers at the address: exactly_once is refused, never weakened."""
    import confluent_kafka

    from esault.errors import ConnectorError
    from esault.testing.server_process import free_port

    address = f"127.0.0.1:{free_port()}"
    with pytest.raises(ConnectorError, match=f"the broker at '{address}' did not start a transactional producer"
                                             r".*guarantee='at_least_once'"):
        TransactionalPublisher(confluent_kafka, {"bootstrap.servers": address}, "esault.t.i0", "out",
                               EpochStage(tmp_path / "stage"), None, timeout=2.0)


@pytest.mark.parametrize("emits_in", ["close", "finish"])
def test_what_a_bolt_emits_at_the_end_reaches_the_topic_from_finish_and_fails_the_run_from_close(
        out, tmp_path, emits_in):
    """exactly_once: close() runs after the final checkpoint, so its records cannot be produced exactly once:
    the sink drops them and the run fails saying so (it only warned, and the run passed); finish() runs
    before the final snapshot, inside the checkpoint, and its records reach the topic once."""
    import collections

    from esault.errors import RunIncomplete

    sys.path.insert(0, str(ROOT / "tests" / "integration"))
    from topology_parts import CountOnClose, CountOnFinish

    items = [[f"k{i % 3}", i] for i in range(60)]
    b = TopologyBuilder(f"kafka-sink-{emits_in}")
    b.set_spout("s", ListSpout, params={"items": items})
    b.set_bolt("count", CountOnFinish if emits_in == "finish" else CountOnClose, elastic=False).key_grouping("s")
    b.set_bolt("out", KafkaSink, elastic=False, params={"bootstrap": out.bootstrap, "topic": "out", "key": "utf-8",
                                                        "value": "json"}).shuffle_grouping("count")
    config = JobConfig(data_dir=tmp_path / "data", elasticity=False, checkpoint_interval=0.2)
    if emits_in == "close":
        with pytest.raises(RunIncomplete, match=r"finish\(\) or close\(\) raised 1 time\(s\) \(out 1\)"):
            run_to_completion(b, workers="in-process", config=config, timeout=60)
        assert out.read("out") == []
        return
    run_to_completion(b, workers="in-process", config=config, timeout=60)
    got = sorted((r["key"].decode(), int(r["value"])) for r in out.read("out"))
    assert got == sorted(collections.Counter(k for k, _ in items).items())


def test_a_run_whose_last_epoch_cannot_be_published_fails_with_the_count_missing(out, tmp_path):
    """The end-of-run audit (docs/GUARANTEES.md): one record is larger than the producer accepts, so its
    epoch's publish fails for good ("it stays staged and is retried at the next completed checkpoint"), and
    the final checkpoint has no later one to retry it. The run exited 0 with that epoch's records missing from
    the topic; it must fail, naming how many."""
    from esault.errors import RunIncomplete

    items = [[f"k{i}", "x" * (5000 if i == 299 else 1)] for i in range(300)]
    b = TopologyBuilder("kafka-sink-unpublishable")
    b.set_spout("s", ListSpout, params={"items": items})
    b.set_bolt("out", KafkaSink, params={"bootstrap": out.bootstrap, "topic": "out", "key": "utf-8", "value": "json",
                                         "config": {"message.max.bytes": 2000}}).shuffle_grouping("s")
    config = JobConfig(data_dir=tmp_path / "data", elasticity=False, checkpoint_interval=60)  # one epoch: the final
    with pytest.raises(RunIncomplete, match=r"exactly_once: 300 row\(s\) that committed checkpoints sent to sinks are not in their output"):
        run_to_completion(b, workers="in-process", config=config, timeout=60)
    assert out.read("out") == []


def test_a_restored_sink_whose_staged_epoch_was_lost_with_its_disk_fails_at_the_end(out, tmp_path):
    """A checkpoint completed, its epoch was staged, and the instance died before publishing it; its successor
    finds the stage directory empty (a worker on another host, a wiped disk): those records can never reach
    the topic. The successor publishes nothing past them (epoch 2 would move the marker over epoch 1), and its
    close() says so with the count."""
    from esault.dsl.tuple import Tuple
    from esault.errors import OutputMissing

    sink = _open_sink(out, tmp_path)
    for i in range(4):
        sink.process(Tuple(f"k{i}", i))
    state = sink.snapshot_state()
    sink.on_checkpoint(1).result(10)
    sink.abandon()  # died before checkpoint 1's completion reached it
    for f in (tmp_path / "kafka_sink").rglob("*.msgpack"):
        f.unlink()
    again = _successor_with_one_more_record(out, tmp_path, 1, state)
    with pytest.raises(OutputMissing, match=r"sent it 5 record\(s\) and its committed transactions hold 0: "
                                            r"5 record\(s\) missing\. 4 staged record\(s\) from epoch 1 on are "
                                            r"gone") as caught:
        again.close()
    assert caught.value.missing_rows == 5
    assert values(out) == []


def test_a_stage_file_lost_under_a_running_sink_is_not_published_past_and_stays_missing_after_a_crash(
        out, tmp_path):
    """Epoch 1's stage file goes (a store that dropped it) before its checkpoint completes; checkpoint 2
    completes. Publishing epoch 2 would move the marker over epoch 1, and after a crash the successor would
    count epoch 1 as published and exit 0 four records short (it did). Nothing is published past the hole,
    and the successor, restored from checkpoint 2, still finds it and fails with the count."""
    from esault.dsl.tuple import Tuple
    from esault.errors import OutputMissing

    sink = _open_sink(out, tmp_path)
    for i in range(4):
        sink.process(Tuple(f"k{i}", i))
    sink.snapshot_state()
    sink.on_checkpoint(1).result(10)
    for f in (tmp_path / "kafka_sink").rglob("*.msgpack"):
        f.unlink()
    sink.process(Tuple("k8", 8))
    state = sink.snapshot_state()
    sink.on_checkpoint(2).result(10)
    sink.on_checkpoint_complete(2)
    assert sink.wait_published(10)
    assert values(out) == []
    sink.abandon()  # the crash
    again = _successor_with_one_more_record(out, tmp_path, 2, state)
    with pytest.raises(OutputMissing, match=r"sent it 6 record\(s\) and its committed transactions hold 0: "
                                            r"6 record\(s\) missing") as caught:
        again.close()
    assert caught.value.missing_rows == 6
    assert values(out) == []


def test_a_restored_sink_that_publishes_what_it_owes_passes_the_audit(out, tmp_path):
    from esault.dsl.tuple import Tuple

    sink = _open_sink(out, tmp_path)
    for i in range(3):
        sink.process(Tuple(f"k{i}", i))
    state = sink.snapshot_state()
    sink.on_checkpoint(1).result(10)
    sink.abandon()
    again = _successor_with_one_more_record(out, tmp_path, 1, state)
    again.close()
    assert values(out) == ["0", "1", "2", "9"]


def test_a_publish_waiting_for_a_stopped_broker_does_not_hold_the_next_barriers_stage_write(out, tmp_path):
    """Staging and publishing run on threads of their own: with one thread, the stage write of the next barrier
    queued behind a publish that rode out a broker outage, its checkpoint timed out and the job rolled back
    (and the rollback's wait for that publish outlasted the SPU's stop timeout: the worker exited as stuck)."""
    import confluent_kafka

    outage = threading.Event()

    def stop_the_broker(at: str, epoch: int) -> None:
        if at == "produced" and not outage.is_set():
            out.pause()
            outage.set()  # after the pause: the test's resume() must not land between SIGSTOP and the stop

    p = TransactionalPublisher(confluent_kafka, {"bootstrap.servers": out.bootstrap}, "esault.test.sink.i0", "out",
                               EpochStage(tmp_path / "stage"), None, timeout=1.0, failpoint=stop_the_broker)
    try:
        p.stage_epoch(1, records("a")).result(10)
        publishing = p.publish_through(1)
        wait_until(outage.is_set, 30, message="the publish of epoch 1 reaching the broker's outage")
        p.stage_epoch(2, records("b")).result(10)  # on the old code: TimeoutError, behind the waiting publish
        assert not publishing.done()
    finally:
        out.resume()
    publishing.result(60)
    p.publish_through(2).result(30)
    p.close(10)
    assert values(out) == ["a", "b"]
