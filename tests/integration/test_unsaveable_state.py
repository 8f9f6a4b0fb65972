"""A state exactly_once must checkpoint that cannot be encoded fails the job at once (real actors, one process).

Every kind of checkpointed state goes through one mechanism (SenderActor.save_state / state_lost): a key's
PE state, a window's, a bolt instance that is not key grouped, a join chain SPU's, a spout's position. Under
exactly_once the job fails naming the owner, the attribute, its type and the fix, and no checkpoint
completes after it; at_least_once keeps running and logs what each loss costs.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import pytest

from esault import Bolt, TopologyBuilder, key_hash
from esault.checkpoint.store import CheckpointStore
from esault.testing import CollectorBolt, ListSpout, collected, wait_until
from esault.windows import EventTime, Tumbling, WindowBolt
from topology_parts import GATES, GatedListSpout

FIX = r"keep the attributes to str, bytes, int, float, bool, None and lists, tuples, sets or dicts of those"


class PathForBadKeys(Bolt):
    """Key-grouped: a key starting with "bad" keeps a pathlib.Path from open(), as a new user's PE might."""

    def open(self, context: Any) -> None:
        self.n = 0
        if str(self.key).startswith("bad"):
            self.path = Path(context.data_dir) / str(self.key)

    def process(self, tup: Any) -> None:
        self.n += 1
        self.emit(self.key, self.n)


class PathInstance(Bolt):
    """Not key grouped: one instance that keeps a Path."""

    def open(self, context: Any) -> None:
        self.out = Path(context.data_dir) / "out.txt"

    def process(self, tup: Any) -> None:
        self.emit(tup.key, tup.value)


class PathPositionSpout(ListSpout):
    """Rewindable on paper, but its position holds the file it reads as a Path."""

    def snapshot_position(self) -> Any:
        return {"file": Path("/data/input.txt"), "offset": self.position}

    def restore_position(self, position: Any) -> None:
        self.position = int(position["offset"])


class BigSums(WindowBolt):
    """Sums per 100 ms tumbling window; the values overflow 64 bits, which msgpack cannot encode."""

    window = Tumbling(size=100)
    aggregate = "sum"
    time = EventTime(max_out_of_orderness=0)


def gated(name: str, items: list, hold_at: int) -> dict:
    GATES[name] = threading.Event()
    return {"items": items, "gate": name, "hold_at": hold_at}


def completed_epoch(job: Any) -> int | None:
    store = CheckpointStore(job.checkpoints.store.path)
    try:
        latest = store.latest()
        return None if latest is None else latest.epoch
    finally:
        store.close()


def test_a_key_whose_state_cannot_be_encoded_fails_an_exactly_once_job_at_once_and_no_checkpoint_completes_after_it(
        cluster, config):
    items = [(f"k{i % 5}", i) for i in range(200)] + [("bad1", i) for i in range(50)]
    b = TopologyBuilder("paths")
    b.set_spout("src", GatedListSpout, params=gated("paths", items, 200))
    b.set_bolt("count", PathForBadKeys, 2).key_grouping("src")
    b.set_bolt("out", CollectorBolt, params={"name": "paths"}).global_grouping("count")
    job = cluster.submit(b.build(), config.replace(checkpoint_interval=0.2))
    wait_until(lambda: len(collected("paths")) == 200 and job.checkpoints.stats.completed >= 2, 30,
               message="the good keys processed and checkpointed")
    assert job.failure is None
    GATES["paths"].set()  # now key bad1 arrives, with a Path in its state
    wait_until(lambda: job.failure, 30, message="the job failed")
    assert job.wait(5) is False, "wait() returns at once for a failed job"
    good = completed_epoch(job)
    assert job.failure.startswith("topology 'paths': bolt 'count' cannot save the state of key 'bad1': attribute "
                                  "'path' is a PosixPath, which msgpack cannot encode; ")
    assert "(a path as str(path)" in job.failure and "override snapshot_state() and restore_state()" in job.failure
    assert "Guarantee 'exactly_once' needs every state in every checkpoint, so the job fails" in job.failure
    assert job.checkpoint(30) is None, "no checkpoint completes once a state is missing"
    job.stop()
    assert completed_epoch(job) == good, "the store records no checkpoint after the loss"
    assert job.final_status["failures"][0] == job.failure
    assert job.final_status["checkpoints"]["completed"] == job.checkpoints.stats.completed


@pytest.mark.parametrize("case, expected", [
    ("instance", r"^topology 'what': bolt 'keep' \(instance 0, not key grouped\) cannot save its state: attribute "
                 r"'out' is a PosixPath, which msgpack cannot encode; " + FIX),
    ("position", r"^topology 'what': spout 'src' \(instance 0\) cannot save its position: snapshot_position\(\) "
                 r"returned a dict holding a PosixPath at \['file'\], which msgpack cannot encode; return an offset"),
    ("window", r"^topology 'what': bolt 'keep' cannot save the state of key 'k': attribute 'window_state' holds an "
               r"int outside the 64-bit range at \['window_state'\]"),
    ("key", r"^topology 'what': bolt 'keep' cannot save the state of key 36893488147419103232: the key itself holds "
            r"an int outside the 64-bit range, which msgpack cannot encode"),
])
def test_every_kind_of_state_that_cannot_be_encoded_fails_the_job_the_same_way_naming_it(cluster, config, case,
                                                                                      expected):
    b = TopologyBuilder("what")
    if case == "position":
        b.set_spout("src", PathPositionSpout, params={"items": [("k", i) for i in range(20)]})
        b.set_bolt("keep", CollectorBolt, params={"name": "what"}).global_grouping("src")
    elif case == "instance":
        b.set_spout("src", ListSpout, params={"items": [("k", i) for i in range(20)]})
        b.set_bolt("keep", PathInstance, chain=False).shuffle_grouping("src")
    elif case == "window":
        b.set_spout("src", ListSpout, params={"items": [("k", [i, 2**63]) for i in range(20)]})
        b.set_bolt("keep", BigSums).key_grouping("src")
    else:  # in one process nothing encodes an int key with a plain value before a checkpoint does
        b.set_spout("src", ListSpout, params={"items": [(2**65, i) for i in range(20)]})
        b.set_bolt("keep", PathForBadKeys).key_grouping("src")
    job = cluster.submit(b.build(), config.replace(checkpoint_interval=0.1))
    wait_until(lambda: job.failure, 30, message="the job failed")
    assert job.wait(5) is False
    job.stop()
    import re

    assert re.search(expected, job.final_status["failures"][0]), job.final_status["failures"][0]
    assert job.checkpoints.stats.completed == 0 and completed_epoch(job) is None


def test_a_join_chain_whose_state_cannot_be_encoded_fails_the_job_like_a_pe(cluster, config, monkeypatch):
    """Its inputs are checked at emit, so this takes a fault: the chain node's snapshot holds a Path."""
    from esault.joins.node import ChainNode

    snapshot = ChainNode.snapshot
    monkeypatch.setattr(ChainNode, "snapshot", lambda self: {**snapshot(self), "spill": Path("/tmp/spill")})
    stream = [("a", {"id": i, "ts": i, "k": i % 3, "x": i}) for i in range(20)]
    b = TopologyBuilder("chainpath")
    b.set_spout("orders", ListSpout, params={"items": stream})
    b.set_spout("payments", ListSpout, params={"items": stream})
    b.join("j", "orders", "payments", on="k", window=5, mode="chain", parallelism=2)
    b.set_bolt("out", CollectorBolt, params={"name": "chainpath"}).global_grouping("j")
    job = cluster.submit(b.build(), config.replace(checkpoint_interval=0.1))
    wait_until(lambda: job.failure, 30, message="the job failed")
    job.stop()
    assert job.final_status["failures"][0].startswith(
        "topology 'chainpath': join 'j' (chain SPU "), job.final_status["failures"][0]
    assert ") cannot save its state: attribute 'spill' is a PosixPath, which msgpack cannot encode; a join chain " \
           "keeps the tuples it has yet to join" in job.final_status["failures"][0]
    assert completed_epoch(job) is None


class PathAfterFirst(Bolt):
    """Key-grouped: a key starting with "bad" takes a Path in process(), so a fresh PE for it (open() only)
    would be encodable: only the report of the lost state can fail the job."""

    def open(self, context: Any) -> None:
        self.n = 0

    def process(self, tup: Any) -> None:
        self.n += 1
        if str(self.key).startswith("bad"):
            self.path = Path("/tmp") / str(self.key)


def test_a_state_lost_when_a_merge_moves_its_key_fails_the_job_though_the_giver_retires_before_any_checkpoint(
        cluster, config):
    items = [(f"k{i % 5}", i) for i in range(100)] + [("bad1", i) for i in range(10)]
    b = TopologyBuilder("lost-in-merge")
    b.set_spout("src", ListSpout, params={"items": items})
    b.set_bolt("count", PathAfterFirst, 2).key_grouping("src")
    job = cluster.submit(b.build(), config.replace(checkpoint_interval=3600.0))  # no periodic checkpoint
    assert job.wait(30)
    assert job.failure is None
    holder = next(spu for spu, ranges in job.layout("count").items()
                  if any(lo <= key_hash("bad1") <= hi for lo, hi in ranges))
    job.merge("count", holder)  # holder retires, handing bad1 over: its state cannot be encoded
    assert holder not in job.spus("count")
    wait_until(lambda: job.failure, 30, message="the job failed")
    assert "bolt 'count' cannot save the state of key 'bad1': attribute 'path' is a PosixPath" in job.failure
    assert job.checkpoint(30) is None, "the receiver's empty bad1 must not make a checkpoint complete"
    job.stop()
    assert completed_epoch(job) is None


def test_under_at_least_once_the_job_runs_on_and_the_log_says_each_moved_key_restarts_empty(cluster, config,
                                                                                           caplog):
    caplog.set_level(logging.ERROR, logger="esault")
    b = TopologyBuilder("paths-alo")
    b.set_spout("src", ListSpout, params={"items": [("bad1", i) for i in range(20)]})
    b.set_bolt("count", PathForBadKeys, 1).key_grouping("src")
    b.set_bolt("out", CollectorBolt, params={"name": "paths-alo"}).global_grouping("count")
    job = cluster.submit(b.build(), config.replace(guarantee="at_least_once"))
    assert job.wait(30)
    (spu,) = job.spus("count")
    assert key_hash("bad1") > 0
    job.split("count", spu, at=key_hash("bad1"))  # every hash >= at moves: bad1 with its state
    assert job.failure is None
    job.stop()
    lost = [r.getMessage() for r in caplog.records if "cannot save the state of key 'bad1'" in r.getMessage()]
    assert lost and ("attribute 'path' is a PosixPath" in lost[0]
                     and "Under guarantee 'at_least_once' it is lost where it leaves memory: the key restarts empty "
                         "after this split, merge or idle expiry" in lost[0]), lost
