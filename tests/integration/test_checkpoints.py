"""Checkpoints in one process (real actors): the rewind requirement, periodic epochs, restart, idle keys."""

from __future__ import annotations

from typing import Any

import pytest

from esault import Bolt, Spout, TopologyBuilder
from esault.errors import ConfigError
from esault.testing import CollectorBolt, ListSpout, wait_until


class ForwardOnlySpout(Spout):
    def next_tuple(self) -> None:
        self.emit("k", 1, msg_id=1)
        self.finish()


def one_spout_topology(spout_cls, name: str = "fwd"):
    builder = TopologyBuilder(name)
    builder.set_spout("src", spout_cls)
    builder.set_bolt("out", CollectorBolt, params={"name": name}).global_grouping("src")
    return builder.build()


def test_exactly_once_refuses_a_spout_that_cannot_rewind_naming_it_and_the_ways_out(cluster, config):
    with pytest.raises(ConfigError, match=r"spout 'src' \(ForwardOnlySpout\) cannot rewind.*snapshot_position\(\) "
                                          r"and restore_position\(\).*guarantee='at_least_once'"):
        cluster.submit(one_spout_topology(ForwardOnlySpout), config)
    job = cluster.submit(one_spout_topology(ForwardOnlySpout), config.replace(guarantee="at_least_once"))
    assert job.wait(30)


def test_a_stopped_job_restarted_on_its_data_dir_resumes_where_its_final_checkpoint_ended(cluster, config):
    import threading

    from esault.testing import collected
    from topology_parts import GATES, GatedListSpout, SequenceCheckBolt

    items = [(f"k{i % 7}", i // 7 + 1) for i in range(700)]
    GATES["resume"] = threading.Event()

    def build():
        builder = TopologyBuilder("resume")
        builder.set_spout("src", GatedListSpout, params={"items": items, "gate": "resume", "hold_at": 350})
        builder.set_bolt("check", SequenceCheckBolt, 2).key_grouping("src")
        builder.set_bolt("out", CollectorBolt, params={"name": "resume"}).global_grouping("check")
        return builder.build()

    job = cluster.submit(build(), config.replace(checkpoint_interval=0.2))
    wait_until(lambda: len(collected("resume")) == 350, 30, message="the first half")
    wait_until(lambda: job.checkpoints.stats.completed >= 2, 30, message="two periodic checkpoints")
    job.stop()
    assert job.checkpoints.stats.last_epoch is not None
    gone = job.checkpoints.stats.last_epoch + 100  # never recorded, as a compacted-away one
    with pytest.raises(ConfigError, match=rf"no completed checkpoint {gone} in .*compacted away.*recorded: \["):
        cluster.submit(build(), config.replace(restore_from=gone))
    GATES["resume"].set()
    job = cluster.submit(build(), config.replace(checkpoint_interval=0.2))
    assert job.restored_from is not None and job.restored_from.kind == "final"
    assert job.wait(30)
    job.stop()
    got = collected("resume")
    assert len(got) == 700, "nothing twice, nothing missing"
    # every key's sequence continued where the first run stopped: its PE state was restored
    assert all(in_order for _, (_, in_order) in got)


def test_a_checkpoint_begun_after_a_rollback_was_queued_fails_at_once_instead_of_recording_a_broken_layout(
        cluster, config):
    """A worker's death queues a rollback and aborts the checkpoint in flight; one that begins just after (the
    abort already past) must fail too, or it waits for SPUs that died, or records the layout being discarded."""
    job = cluster.submit(one_spout_topology(_Endless, "queued"),
                         config.replace(checkpoint_interval=60.0))
    assert job.checkpoint(30) is not None  # the job checkpoints normally
    with job._recovery_lock:
        job._recovering += 1  # what Job._recover does first, before its abort and its queued rollback
    try:
        assert job.checkpoints.checkpoint() is None
        assert job.checkpoints.collector.aborted == "a rollback is queued"
    finally:
        with job._recovery_lock:
            job._recovering -= 1
    assert job.checkpoint(30) is not None
    job.stop()


class _Endless(ListSpout):
    """A rewindable spout that never runs dry (checkpoints have something to cut)."""

    def __init__(self) -> None:
        super().__init__([("k", i) for i in range(100000)], per_call=8)


class RunningCountBolt(Bolt):
    """Per-key PE: counts its key's tuples and emits the count so far."""

    def open(self, context: Any) -> None:
        self.count = 0

    def process(self, tup: Any) -> None:
        self.count += 1
        self.emit(self.key, self.count)


def test_a_job_restored_from_an_older_savepoint_never_reads_the_later_checkpoints_it_abandoned(cluster, config):
    """Savepoint at E, more input (a later final checkpoint F changes keys k0-k4), restore from E: the restored
    job changes only k5-k9 and stops (checkpoint N stores only those). A restart from N must read k0-k4 as at
    E, not as at F: N's rows are incremental, and F's rows lie between E and N."""
    import threading

    from esault.testing import collected
    from topology_parts import GATES, GatedListSpout

    keys = [f"k{i}" for i in range(10)]
    first = [(k, 1) for k in keys] * 3  # every key counts 3 at the savepoint E
    abandoned = [(k, 1) for k in keys[:5]] * 5  # k0-k4 count 8 on the abandoned timeline
    restored = [(k, 1) for k in keys[5:]] * 2  # k5-k9 count 5 on the restored one
    last = [(k, 1) for k in keys]
    GATES["rewind"] = threading.Event()

    def build(name: str, items: list):
        builder = TopologyBuilder("rewind")
        builder.set_spout("src", GatedListSpout, params={"items": items, "gate": "rewind", "hold_at": len(first)})
        builder.set_bolt("count", RunningCountBolt, 2).key_grouping("src")
        builder.set_bolt("out", CollectorBolt, params={"name": name}).global_grouping("count")
        return builder.build()

    def counts(name: str) -> dict:
        return {k: max(n for key, n in collected(name) if key == k) for k in {key for key, _ in collected(name)}}

    config = config.replace(checkpoint_interval=60.0)
    job = cluster.submit(build("first", first + abandoned), config)
    wait_until(lambda: len(collected("first")) == len(first), 30, message="the input before the savepoint")
    savepoint = job.savepoint(timeout=30)
    assert savepoint is not None
    GATES["rewind"].set()
    assert job.wait(30)
    job.stop()
    assert counts("first") == {**{k: 8 for k in keys[:5]}, **{k: 3 for k in keys[5:]}}
    assert job.checkpoints.stats.last_epoch > savepoint, "a later checkpoint is stored"

    job = cluster.submit(build("restored", first + restored), config.replace(restore_from=savepoint))
    assert job.restored_from.epoch == savepoint
    assert f"restoring checkpoint {savepoint} (savepoint)" in job.checkpoints.rewound, "it says what it forgets"
    assert job.wait(30)
    job.stop()
    assert counts("restored") == {k: 5 for k in keys[5:]}, "the restore started from the savepoint's counts"

    job = cluster.submit(build("last", first + restored + last), config)
    assert job.restored_from.epoch > savepoint
    assert job.wait(30)
    job.stop()
    assert counts("last") == {**{k: 4 for k in keys[:5]}, **{k: 6 for k in keys[5:]}}, \
        "every key reads its state on the restored timeline"


def test_a_completed_job_whose_final_checkpoint_misses_the_end_of_its_input_fails_with_the_positions(cluster, config):
    """The end-of-run check: a job that read its input to the end (wait() returned True) must end with a final
    checkpoint that records the end of that input. Here a rollback to the start restarts the spout, its replay
    is held half way, and the job's completion check is made to lie (as any bug that reads a job complete too
    early would): the final checkpoint then ends the spout half way, and the run fails (exit 2) naming the
    checkpoint and where the spout stood, instead of passing with half its output."""
    import threading

    from esault.job.outcome import ExitCode, judge_run
    from esault.testing import collected
    from topology_parts import GATES, GatedListSpout

    items = [(f"k{i % 7}", i) for i in range(700)]
    GATES["net"] = threading.Event()
    GATES["net"].set()
    builder = TopologyBuilder("net")
    builder.set_spout("src", GatedListSpout, params={"items": items, "gate": "net", "hold_at": 350})
    builder.set_bolt("out", CollectorBolt, params={"name": "net"}).global_grouping("src")
    job = cluster.submit(builder.build(), config.replace(checkpoint_interval=3600.0))
    assert job.wait(30)
    GATES["net"].clear()  # the replay stops half way
    job.coordinator.run_task(lambda: job.roll_back_now(frozenset(), "a test's rollback")).result(30)
    assert job.checkpoints.stats.recoveries[-1].restored_epoch is None
    wait_until(lambda: len(collected("net")) >= 700 + 350, 30, message="the replay half way")
    job.wait = job._input_done = lambda *_: True  # a completion check that lies
    job.stop()
    assert not job.checkpoints.input_ended
    [failure] = job.failures
    epoch = job.checkpoints.stats.last_epoch
    assert f"the job read its input to the end, but its final checkpoint {epoch} ended the spouts before the " \
           "end (src[0] at 350)" in failure, failure
    assert "run the same command again: it resumes from checkpoint" in failure
    outcome = judge_run(job.final_status, True, timeout=None, duration=None, dead_letter_path="dead.jsonl")
    assert outcome.exit_code is ExitCode.NOT_STARTED and failure in outcome.problems


def test_a_rollback_to_the_start_reopens_every_spout_at_its_beginning_and_every_key_empty(cluster, config):
    """'checkpoint None' (no checkpoint completed yet) is the job's start again: the spout is opened afresh and
    reads from its first item, every key's PE starts from open() (a per-key sequence check sees 1, 2, 3 ... again,
    never a sequence that goes on from before), every SPU is a new one, and the job completes again from there
    with the whole output of a run that started at that moment."""
    import threading

    from esault.testing import collected
    from topology_parts import GATES, GatedListSpout, SequenceCheckBolt

    items = [(f"k{i % 7}", i // 7 + 1) for i in range(700)]  # each key's items are numbered 1, 2, 3 ...
    GATES["start"] = threading.Event()
    GATES["start"].set()
    builder = TopologyBuilder("start")
    builder.set_spout("src", GatedListSpout, params={"items": items, "gate": "start", "hold_at": 350})
    builder.set_bolt("check", SequenceCheckBolt, 2).key_grouping("src")
    builder.set_bolt("out", CollectorBolt, params={"name": "start"}).global_grouping("check")
    job = cluster.submit(builder.build(), config.replace(checkpoint_interval=3600.0))
    assert job.wait(30)
    before = set(job.spus("src")) | set(job.spus("check"))
    GATES["start"].clear()  # the replay holds half way
    job.coordinator.run_task(lambda: job.roll_back_now(frozenset(), "a test's rollback")).result(30)
    assert job.checkpoints.stats.recoveries[-1].restored_epoch is None
    assert not before & (set(job.spus("src")) | set(job.spus("check"))), "every SPU was relaunched"
    wait_until(lambda: len(collected("start")) >= 700 + 350, 30, message="the replay of the first half")
    replay = collected("start")[700:]
    assert all(in_order for _, (_, in_order) in replay), "a key went on from its state before the rollback"
    assert sorted(seq for _, (seq, _) in replay) == sorted(n for _, n in items[:350]), "the spout began again"
    assert not job.is_complete()
    GATES["start"].set()
    assert job.wait(30)
    job.stop()
    after = collected("start")[700:]
    assert sorted(after) == sorted((k, [n, True]) for k, n in items)
    assert job.checkpoints.input_ended and job.failures == []
