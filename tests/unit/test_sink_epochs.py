"""The exactly-once sink's two-phase commit per checkpoint epoch, at the file level (pyarrow, no JVM).

The writer's stage()/publish() and the commit log's records, then a SparkSink driven the way the
runtime drives it under guarantee="exactly_once": process(), on_checkpoint(e) (stage: durable, not
visible), on_checkpoint_complete(e) (publish), open() with restored_epoch (recover), abandon()
(rollback), close() (normal stop). Waits are on futures, events and threads with timeouts.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pyarrow as pa
import pytest

from esault.dsl.context import TopologyContext
from esault.errors import SinkError
from esault.testing import wait_until
from spark_sink import SparkSink
from spark_sink.commit_log import CommitLog
from spark_sink.failpoints import FAILPOINT_ENV, InjectedCrash, StepFailpoint
from spark_sink.layout import TablePaths, epoch_batch_id, instance_writer_id
from spark_sink.stager import ArrowStager
from spark_sink.writer import BatchWriter
from sink_epoch_parts import A, B, C, feed, open_sink, rows_in, table_dir

WRITER = instance_writer_id("job", "sink", 0)


# -- helpers --------------------------------------------------------------------------


def arrow(rows: list[tuple[str, int]]) -> pa.Table:
    return pa.table({"word": pa.array([w for w, _ in rows], pa.string()), "n": pa.array([n for _, n in rows])})


class GateStager:
    """ArrowStager that can hold a stage() until the test opens the gate, or fail a chosen call."""

    name = "gate"

    def __init__(self, hold: bool = False, fail_calls: tuple[int, ...] = ()) -> None:
        self.gate = threading.Event()
        if not hold:
            self.gate.set()
        self.entered = threading.Event()
        self.calls = 0
        self.fail_calls = fail_calls

    def stage(self, table: pa.Table, directory: Path) -> None:
        self.calls += 1
        self.entered.set()
        assert self.gate.wait(30), "the test never opened the gate"
        if self.calls in self.fail_calls:
            raise OSError(f"injected stage failure (call {self.calls})")
        ArrowStager().stage(table, directory)


def checkpoint(sink: SparkSink, epoch: int) -> None:
    sink.on_checkpoint(epoch).result(30)


def commit_log(tmp_path: Path) -> CommitLog:
    return CommitLog(TablePaths(table_dir(tmp_path)).commit_log(WRITER))


def states_by_epoch(tmp_path: Path) -> dict[int, set[str]]:
    log = commit_log(tmp_path)
    try:
        out: dict[int, set[str]] = {}
        for rec in log.records():
            out.setdefault(rec.epoch, set()).add(rec.state)
        return out
    finally:
        log.close()


def states_by_epoch_open(sink: SparkSink) -> dict[int, set[str]]:
    """The commit log's states per epoch, read from the open sink's own writer."""
    out: dict[int, set[str]] = {}
    for rec in sink._writer.log.records():
        out.setdefault(rec.epoch, set()).add(rec.state)
    return out


# -- the writer: stage, publish, recovery ------------------------------------------------------


def test_a_staged_batch_is_durable_but_invisible_until_published_and_publishing_again_is_a_no_op(tmp_path):
    w = BatchWriter(tmp_path, WRITER, ArrowStager())
    batch = epoch_batch_id(WRITER, 1, 0)
    assert w.stage(batch, w.next_seq, f"esault_batch={batch}", arrow(A), 1)
    assert rows_in(tmp_path) == []
    assert (w.paths.staging / batch).is_dir()
    rec = w.log.get(batch)
    assert (rec.state, rec.epoch, rec.rows) == ("staged", 1, 2)
    assert w.publish(batch) == 2
    assert rows_in(tmp_path) == sorted(A) and w.log.get(batch).state == "committed"
    assert w.publish(batch) == 0, "a committed batch is not published twice"
    assert not w.stage(batch, w.next_seq, f"esault_batch={batch}", arrow(A), 1), "nor staged again"
    w.close()
    again = BatchWriter(tmp_path, WRITER, ArrowStager())  # a restarted writer agrees
    assert again.publish(batch) == 0 and again.log.get(batch).epoch == 1
    again.close()
    assert rows_in(tmp_path) == sorted(A)


def test_a_publish_cut_short_after_begin_is_rolled_forward_on_open_not_aborted(tmp_path):
    """'begin' is written only after the epoch's checkpoint completed: dropping the batch would lose rows."""
    w = BatchWriter(tmp_path, WRITER, ArrowStager(), failpoint=StepFailpoint("begun", "raise"))
    batch = epoch_batch_id(WRITER, 1, 0)
    w.stage(batch, w.next_seq, f"esault_batch={batch}", arrow(A), 1)
    with pytest.raises(InjectedCrash):
        w.publish(batch)
    assert w.log.get(batch).state == "begun" and rows_in(tmp_path) == []
    w.close()
    again = BatchWriter(tmp_path, WRITER, ArrowStager())
    assert again.stats.recovered.rolled_forward == (batch,)
    assert again.log.get(batch).state == "committed"
    again.close()
    assert rows_in(tmp_path) == sorted(A)


def test_a_log_written_before_epochs_existed_reads_as_before(tmp_path):
    path = tmp_path / "w.log"
    path.write_bytes(b'{"op":"begin","batch":"w.0","seq":0,"path":"p","rows":1}\n{"op":"commit","batch":"w.0"}\n'
                     b'{"op":"begin","batch":"w.1","seq":1,"path":"q","rows":2}\n')
    log = CommitLog(path)
    assert log.is_committed("w.0") and log.get("w.0").epoch is None
    assert [r.batch for r in log.unfinished()] == ["w.1"]
    assert log.staged() == [] and log.unpublished() == []
    log.close()


# -- the sink: the runtime's hooks --------------------------------------------------------------


def test_rows_are_staged_at_the_barrier_and_published_only_when_the_checkpoint_completes(tmp_path):
    sink = open_sink(tmp_path)
    assert sink.snapshot_state() == {"rows_accepted": 0}, \
        "the sink's state is its staged epochs and how many rows the checkpoints sent it, not PE attributes"
    feed(sink, A)
    checkpoint(sink, 1)
    assert rows_in(table_dir(tmp_path)) == []
    assert states_by_epoch_open(sink) == {1: {"staged"}}
    sink.on_checkpoint_complete(1)
    sink.wait_epochs(30)
    assert rows_in(table_dir(tmp_path)) == sorted(A)
    sink.on_checkpoint_complete(1)  # again: idempotent
    checkpoint(sink, 2)  # an epoch with no rows stages nothing
    sink.on_checkpoint_complete(2)
    sink.close()
    assert rows_in(table_dir(tmp_path)) == sorted(A)
    assert sink.stats()["rows_committed"] == 2


@pytest.mark.parametrize("restored, expected", [(None, []), (1, sorted(A)), (2, sorted(A + B)),
                                                (3, sorted(A + B + C))])
def test_open_publishes_staged_epochs_up_to_the_restored_checkpoint_and_aborts_the_rest(
        tmp_path, restored, expected):
    sink = open_sink(tmp_path, spu_id=1)
    for epoch, rows in ((1, A), (2, B), (3, C)):
        feed(sink, rows)
        checkpoint(sink, epoch)
    sink.abandon()  # died before any checkpoint completion reached it
    assert rows_in(table_dir(tmp_path)) == []
    again = open_sink(tmp_path, restored=restored, spu_id=2)  # a new SPU: same writer (per instance)
    again.wait_epochs(30)
    again.close()
    assert rows_in(table_dir(tmp_path)) == expected
    states = states_by_epoch(tmp_path)
    for epoch in (1, 2, 3):
        assert states[epoch] == ({"committed"} if restored is not None and epoch <= restored else {"aborted"})
    staging = TablePaths(table_dir(tmp_path)).staging
    assert [p.name for p in staging.iterdir()] == [], "aborted epochs' staging is deleted"


def test_a_restart_from_the_same_checkpoint_never_writes_an_epoch_twice(tmp_path):
    sink = open_sink(tmp_path)
    feed(sink, A)
    checkpoint(sink, 1)
    sink.on_checkpoint_complete(1)
    sink.close()
    for spu_id in (2, 3):
        again = open_sink(tmp_path, restored=1, spu_id=spu_id)
        again.on_checkpoint_complete(1)
        again.close()
    assert rows_in(table_dir(tmp_path)) == sorted(A)


@pytest.mark.parametrize("restored, expected", [(None, []), (1, sorted(A)), (2, sorted(A + B)),
                                                (3, sorted(A + B + C))])
def test_open_at_an_older_checkpoint_retracts_the_epochs_published_after_it_and_the_replay_writes_them_once(
        tmp_path, restored, expected):
    """A restart that falls back from a damaged checkpoint (or starts afresh) restores an epoch older than
    what was published: the replay writes those epochs' rows again, so they must leave the table first."""
    sink = open_sink(tmp_path)
    for epoch, rows in ((1, A), (2, B), (3, C)):
        feed(sink, rows)
        checkpoint(sink, epoch)
    sink.on_checkpoint_complete(3)
    sink.close()
    again = open_sink(tmp_path, restored=restored, spu_id=2)
    again.wait_epochs(30)
    assert rows_in(table_dir(tmp_path)) == expected
    replayed = [rows for epoch, rows in ((1, A), (2, B), (3, C)) if restored is None or epoch > restored]
    for epoch, rows in enumerate(replayed, start=7):  # epochs are never reused: the replay's are new
        feed(again, rows)
        checkpoint(again, epoch)
        again.on_checkpoint_complete(epoch)
    again.close()
    assert rows_in(table_dir(tmp_path)) == sorted(A + B + C)
    states = states_by_epoch(tmp_path)
    assert all(states[e] == {"retracted"} for e in (1, 2, 3) if restored is None or e > restored)


def test_a_retraction_cut_short_after_its_log_record_is_finished_by_the_next_open(tmp_path):
    sink = open_sink(tmp_path)
    feed(sink, A)
    checkpoint(sink, 1)
    sink.on_checkpoint_complete(1)
    sink.close()
    log = commit_log(tmp_path)
    (batch,) = [r.batch for r in log.records()]
    log.retract(batch)  # the process died before the directory left the table
    log.close()
    assert rows_in(table_dir(tmp_path)) == sorted(A)
    again = open_sink(tmp_path, restored=1, spu_id=2)
    again.wait_epochs(30)
    again.close()
    assert rows_in(table_dir(tmp_path)) == []


def test_abandon_publishes_nothing_more_and_releases_the_commit_log_at_once(tmp_path):
    stager = GateStager(hold=True)
    sink = open_sink(tmp_path, engine=stager)
    feed(sink, A)
    staged = sink.on_checkpoint(1)  # held in the stager
    assert stager.entered.wait(30)
    sink.on_checkpoint_complete(1)  # queued behind the stage: must not run
    feed(sink, B)  # buffered: must not be staged
    done = threading.Thread(target=sink.abandon)
    done.start()
    stager.gate.set()
    done.join(30)
    assert not done.is_alive()
    assert staged.result(0) is None  # the step in progress finished its one batch
    assert rows_in(table_dir(tmp_path)) == [], "nothing published after abandon()"
    assert states_by_epoch(tmp_path) == {1: {"staged"}}, "the lock is free; epoch 1 waits for the next open"
    assert stager.calls == 1
    again = open_sink(tmp_path, restored=None, spu_id=2)
    again.close()
    assert rows_in(table_dir(tmp_path)) == [] and states_by_epoch(tmp_path) == {1: {"aborted"}}


def test_abandon_ends_a_stage_in_progress_at_the_next_batch(tmp_path):
    stager = GateStager(hold=True)
    sink = SparkSink(table="t", schema="word STRING, n BIGINT", key_column="word", value_column="n",
                     engine=stager, warehouse=tmp_path / "wh", partition_by="word")
    sink.open(TopologyContext("job", "sink", spu_id=1, data_dir=tmp_path, guarantee="exactly_once"))
    feed(sink, A)  # two partitions: two batches
    staged = sink.on_checkpoint(1)
    assert stager.entered.wait(30)
    done = threading.Thread(target=sink.abandon)
    done.start()
    wait_until(lambda: sink._epochs._stop.is_set(), 30, message="abandon() began")
    stager.gate.set()
    done.join(30)
    assert not done.is_alive()
    with pytest.raises(SinkError, match="was stopped"):
        staged.result(0)
    assert stager.calls == 1, "the second partition's batch was not written"


def test_close_publishes_nothing_outside_a_completed_checkpoint_and_says_what_it_dropped(tmp_path):
    sink = open_sink(tmp_path)
    feed(sink, A)
    checkpoint(sink, 1)
    sink.on_checkpoint_complete(1)
    feed(sink, B)  # after the last checkpoint: a restart produces these again
    checkpoint(sink, 2)
    feed(sink, C)
    with pytest.raises(SinkError, match=r"1 row\(s\) arrived after the job's final checkpoint and were not "
                                        r"written.*Emit final results from the bolt's finish\(\)"):
        sink.close()  # checkpoint 2 never completed, C was never staged
    assert rows_in(table_dir(tmp_path)) == sorted(A)
    again = open_sink(tmp_path, restored=1, spu_id=2)  # the commit log was released before the error
    again.close()
    assert rows_in(table_dir(tmp_path)) == sorted(A)


def test_close_waits_for_the_publishes_already_requested(tmp_path):
    stager = GateStager(hold=True)
    sink = open_sink(tmp_path, engine=stager)
    feed(sink, A)
    sink.on_checkpoint(1)
    assert stager.entered.wait(30)
    sink.on_checkpoint_complete(1)
    opener = threading.Timer(0.05, stager.gate.set)  # lets close() start while the stage is still held
    opener.start()
    sink.close()
    opener.join()
    assert rows_in(table_dir(tmp_path)) == sorted(A)


def test_close_gives_up_after_close_timeout_and_releases_the_log_when_the_step_ends(tmp_path):
    stager = GateStager(hold=True)
    sink = open_sink(tmp_path, engine=stager, close_timeout=0.05)
    feed(sink, A)
    sink.on_checkpoint(1)
    assert stager.entered.wait(30)
    sink.close()  # returns although the stage is held
    with pytest.raises(SinkError, match="locked by another live sink writer"):
        commit_log(tmp_path)
    stager.gate.set()
    wait_until(lambda: _log_is_free(tmp_path), 30, message="commit log released after the step ended")


def _log_is_free(tmp_path: Path) -> bool:
    try:
        commit_log(tmp_path).close()
    except SinkError:
        return False
    return True


@pytest.mark.parametrize("partition_by", [[], "word"])
def test_a_failed_stage_keeps_its_rows_for_the_next_checkpoint_and_leaves_no_partial_epoch(
        tmp_path, partition_by):
    """The runtime lets the next checkpoint retry: epoch 1's rows must be in it, once."""
    stager = GateStager(fail_calls=(1,) if partition_by == [] else (2,))  # partitioned: the 2nd batch fails
    sink = SparkSink(table="t", schema="word STRING, n BIGINT", key_column="word", value_column="n",
                     engine=stager, warehouse=tmp_path / "wh", partition_by=partition_by)
    sink.open(TopologyContext("job", "sink", spu_id=1, data_dir=tmp_path, guarantee="exactly_once"))
    feed(sink, A)
    with pytest.raises(OSError, match="injected stage failure"):
        checkpoint(sink, 1)
    feed(sink, B)
    checkpoint(sink, 2)
    sink.on_checkpoint_complete(2)
    sink.close()
    assert rows_in(table_dir(tmp_path)) == sorted(A + B)
    assert states_by_epoch(tmp_path).get(1, {"aborted"}) == {"aborted"}


def test_a_failed_publish_is_retried_at_the_next_completion(tmp_path, monkeypatch):
    monkeypatch.setenv(FAILPOINT_ENV, "begun:raise:1")
    sink = open_sink(tmp_path)
    feed(sink, A)
    checkpoint(sink, 1)
    sink.on_checkpoint_complete(1)
    with pytest.raises(InjectedCrash):
        sink.wait_epochs(30)
    feed(sink, B)
    checkpoint(sink, 2)
    sink.on_checkpoint_complete(2)
    sink.close()
    assert rows_in(table_dir(tmp_path)) == sorted(A + B)


def test_at_least_once_keeps_acking_after_commit(tmp_path):
    """guarantee='at_least_once' takes the batch path: no epochs, on_checkpoint returns None."""
    from esault.testing.harness import BoltHarness

    params = {"table": "t", "schema": "word STRING, n BIGINT", "key_column": "word", "value_column": "n",
              "engine": "pyarrow", "warehouse": tmp_path / "wh", "partition_by": [], "batch_rows": 2}
    with BoltHarness(SparkSink, params, data_dir=tmp_path, guarantee="at_least_once") as h:
        assert h.bolt.on_checkpoint(1) is None
        for word, n in A:
            h.feed(word, n)
        h.wait_acked(2, timeout=30)
    assert rows_in(table_dir(tmp_path)) == sorted(A)


def test_each_staged_epoch_is_one_observation_of_the_commit_time_histogram(tmp_path):
    from esault.metrics import REGISTRY

    def commits() -> float:
        return REGISTRY.get_sample_value("esault_sink_commit_seconds_count", {"topology": "job", "table": "t"}) or 0.0

    sink = open_sink(tmp_path)
    before = commits()
    feed(sink, A)
    sink.on_checkpoint(1).result(30)
    sink.on_checkpoint(2).result(30)  # no rows since epoch 1: nothing staged, nothing observed
    feed(sink, B)
    sink.on_checkpoint(3).result(30)
    assert commits() == before + 2
    sink.close()


def slow_spark_session(monkeypatch) -> tuple[threading.Event, threading.Event]:
    """The sink's Spark session starts only once `gate` is set; `starting` is set as the start begins."""
    starting, gate = threading.Event(), threading.Event()

    def slow_session(*_args, **_kwargs):
        starting.set()
        assert gate.wait(30)
        return object()

    monkeypatch.setattr("spark_sink.bolt.get_session", slow_session)
    return starting, gate


def test_abandon_while_spark_starts_frees_the_commit_log_at_once_and_the_start_then_touches_nothing(
        tmp_path, monkeypatch):
    """A rollback must not wait out a JVM start (tens of seconds with a cluster's executors): the start runs
    on a thread of its own and touches no commit log, so abandon() returns at once, the next instance opens
    the log meanwhile, and the start, once through, does nothing for the abandoned instance."""
    starting, gate = slow_spark_session(monkeypatch)
    catalog: list[str] = []
    monkeypatch.setattr(SparkSink, "_ensure_catalog", lambda self, meta: catalog.append(self.writer_id))
    first = open_sink(tmp_path)
    feed(first, A)
    first.on_checkpoint(1).result(30)
    first.abandon()  # epoch 1 staged, for the next instance's start to resolve
    sink = open_sink(tmp_path, engine="spark")
    assert starting.wait(30)
    done = threading.Thread(target=sink.abandon)
    done.start()
    done.join(30)
    assert not done.is_alive(), "abandon() waited for Spark's start"
    again = open_sink(tmp_path, restored=None, spu_id=2)  # the log is free while the old start still runs
    again.close()
    assert states_by_epoch(tmp_path) == {1: {"aborted"}}
    engine = next(t for t in threading.enumerate() if t.name == f"spark-start-{sink.writer_id}")
    gate.set()
    engine.join(30)
    assert not engine.is_alive()
    assert catalog == [], "the abandoned instance registered nothing once Spark was up"
    assert states_by_epoch(tmp_path) == {1: {"aborted"}} and rows_in(table_dir(tmp_path)) == []


def test_an_exactly_once_spark_sink_stages_and_publishes_while_its_session_starts_and_registers_the_table_after(
        tmp_path, monkeypatch):
    """No checkpoint waits for a JVM: until the session is up the epochs are staged with pyarrow (the same
    layout) and published by rename; once it is, the table goes into Spark's catalog, on the committer thread."""
    starting, gate = slow_spark_session(monkeypatch)
    catalog: list[str] = []
    monkeypatch.setattr(SparkSink, "_ensure_catalog",
                        lambda self, meta: catalog.append(threading.current_thread().name))
    monkeypatch.setattr("spark_sink.catalog.refresh_table", lambda spark, table: None)
    sink = open_sink(tmp_path, engine="spark")
    assert starting.wait(30)
    feed(sink, A)
    sink.on_checkpoint(1).result(10)  # while the session is still starting
    sink.on_checkpoint_complete(1)
    sink.wait_epochs(10)
    assert sorted(rows_in(table_dir(tmp_path))) == sorted(A)
    assert catalog == [] and sink._spark is None
    gate.set()
    wait_until(lambda: catalog, 10, message="the table registered once the session is up")
    assert catalog[0].startswith(f"spark-sink-{sink.writer_id}"), "registered on the committer thread"
    sink.close()


def test_at_the_end_the_rows_published_are_the_rows_the_committed_checkpoints_sent_the_sink(tmp_path):
    """The end-of-run audit: after the final checkpoint, the writer's published rows equal the rows its
    checkpoints sent it, counted in the sink's checkpointed state (restored with it after a restart)."""
    sink = open_sink(tmp_path)
    feed(sink, A)
    checkpoint(sink, 1)
    state = sink.snapshot_state()
    sink.on_checkpoint_complete(1)
    sink.close()  # nothing missing: no error
    assert state == {"rows_accepted": 2}
    again = open_sink(tmp_path, restored=1)
    again.restore_state(state)
    feed(again, B)
    checkpoint(again, 2)
    assert again.snapshot_state() == {"rows_accepted": 2 + len(B)}
    again.on_checkpoint_complete(2)
    again.close()  # the first instance's rows and its own: every one there


def test_a_published_batch_gone_from_the_table_fails_the_end_of_run_audit_with_the_numbers(tmp_path):
    from esault.errors import OutputMissing

    sink = open_sink(tmp_path)
    feed(sink, A + B)
    checkpoint(sink, 1)
    sink.on_checkpoint_complete(1)
    sink.wait_epochs(30)
    [batch] = [r.batch for r in sink._writer.log.committed()]
    sink._writer.log.retract(batch)  # as a wrong retraction would: the table no longer holds epoch 1's rows
    with pytest.raises(OutputMissing, match=r"the checkpoints up to epoch 1 sent it 4 row\(s\) and the table at "
                                            r".* holds 0 of them: 4 row\(s\) missing") as raised:
        sink.close()
    assert raised.value.missing_rows == 4


def test_no_audit_without_a_known_baseline_or_after_a_stop_short_of_its_last_checkpoint(tmp_path):
    older = open_sink(tmp_path)
    feed(older, A)
    checkpoint(older, 1)
    older.on_checkpoint_complete(1)
    older.close()
    restored = open_sink(tmp_path, restored=1)  # a checkpoint of an older esault: no rows_accepted in its state
    feed(restored, B)
    checkpoint(restored, 2)
    restored.on_checkpoint_complete(2)
    restored.close()  # nothing known to compare with: no error
    short = open_sink(tmp_path, restored=2, table="t")
    short.restore_state({"rows_accepted": 4})
    feed(short, C)
    checkpoint(short, 3)  # epoch 3 never completes: the stop came without its final checkpoint
    short.close()
