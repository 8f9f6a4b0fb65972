"""At-least-once delivery on real actors: failures, dead letters, timeouts, backpressure."""

from __future__ import annotations

import threading

import pytest

from esault import TopologyBuilder
from esault.clock import ManualClock
from esault.reliability.dead_letters import read_dead_letters
from esault.testing import CollectorBolt, ListSpout, collected, wait_until
from topology_parts import BadValueBolt, ExpiringCountBolt, LoseFirstAttemptBolt, RaiseOnBadBolt, SlowBolt


@pytest.fixture
def config(config):
    """This module is about XOR acking and per-tree replay: the at-least-once guarantee."""
    return config.replace(guarantee="at_least_once")


def words(n_good: int, bad: list[str]) -> list[tuple[str, int]]:
    items = [(f"w{i}", i) for i in range(n_good)]
    for j, key in enumerate(bad):
        items.insert(j * 7 % max(len(items), 1), (key, -1))
    return items


def test_a_bolt_raising_on_some_keys_retries_only_those_in_place_and_dead_letters_them(cluster, config):
    bad = ["bad1", "bad2", "bad3"]
    items = words(400, bad)
    builder = TopologyBuilder("raising")
    builder.set_spout("src", ListSpout, params={"items": items})
    builder.set_bolt("risky", RaiseOnBadBolt, 2).shuffle_grouping("src")
    builder.set_bolt("out", CollectorBolt, params={"name": "raising"}).global_grouping("risky")
    job = cluster.submit(builder.build(), config.replace(max_retries=2))
    assert job.wait(30), job.status()
    job.stop()
    # Exactly once: the good tuples sharing a batch with a bad one are not replayed because of it.
    assert sorted(collected("raising")) == sorted((f"w{i}", i) for i in range(400))
    status = job.final_status["units"]
    assert status["risky"]["user_errors"] == 3 * len(bad)  # first try + 2 retries each, in place
    assert status["risky"]["dead_letters"] == len(bad)
    assert status["src"]["failed"] == 0 and status["src"]["replayed"] == 0
    assert status["src"]["acked"] == len(items)  # a dead-lettered tuple is accounted for, its tree completes
    letters = read_dead_letters(job.dead_letter_path)
    assert sorted(d["key"] for d in letters) == bad
    for letter in letters:
        assert letter["attempts"] == 3 and letter["unit"] == "risky" and letter["topology"] == "raising"
        assert "bolt 'risky' process() raised ValueError: cannot handle" in letter["error"]
        assert "topology_parts.py:" in letter["error"]  # where it raised


def test_batches_that_time_out_are_replayed_until_the_result_is_complete(cluster, config):
    lost = ["w3", "w50", "w99"]
    items = [(f"w{i}", i) for i in range(120)]
    builder = TopologyBuilder("timeouts")
    builder.set_spout("src", ListSpout, params={"items": items})
    builder.set_bolt("lossy", LoseFirstAttemptBolt, params={"lose": lost, "seen": "timeouts"}) \
        .key_grouping("src")
    builder.set_bolt("out", CollectorBolt, params={"name": "timeouts"}).global_grouping("lossy")
    job = cluster.submit(builder.build(), config.replace(message_timeout=0.3))
    assert job.wait(30), job.status()
    got = collected("timeouts")
    assert sorted(set(got)) == sorted(items)  # at least once; a replayed batch repeats its other tuples
    src = job.status()["units"]["src"]
    assert src["acked"] == len(items)
    # Delivery is tracked per batch: a lost tuple fails its whole batch, and each of its tuples is replayed.
    assert src["failed"] == src["replayed"] >= len(lost)
    assert len(got) == len(items) + src["replayed"] - len(lost)


def test_max_spout_pending_bounds_tuples_in_flight_behind_a_slow_bolt(cluster, config):
    bound = 20
    items = [(f"k{i}", i) for i in range(300)]
    builder = TopologyBuilder("pending")
    builder.set_spout("src", ListSpout, params={"items": items}, max_pending=bound)
    builder.set_bolt("slow", SlowBolt, params={"seconds": 0.001}).shuffle_grouping("src")
    builder.set_bolt("out", CollectorBolt, params={"name": "pending"}).global_grouping("slow")
    job = cluster.submit(builder.build(), config)
    highest = 0
    done = threading.Event()

    def watch():
        nonlocal highest
        while not done.is_set():
            status = job.status()
            highest = max(highest, status["units"]["src"]["inflight"], status["pending_trees"])
            done.wait(0.002)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        assert job.wait(60)
    finally:
        done.set()
        watcher.join()
    assert highest <= bound
    assert highest >= bound // 2, "the bound was never approached: the test did not load the spout"
    assert len(collected("pending")) == len(items)


def test_an_unserialisable_emit_is_refused_with_the_bolt_and_type_named(cluster, config):
    builder = TopologyBuilder("serial")
    builder.set_spout("src", ListSpout, params={"items": [("x", 1), ("y", 2)]})
    builder.set_bolt("bad", BadValueBolt).shuffle_grouping("src")
    builder.set_bolt("out", CollectorBolt, params={"name": "serial"}).global_grouping("bad")
    job = cluster.submit(builder.build(), config.replace(max_retries=0))
    assert job.wait(30)
    job.stop()
    assert collected("serial") == [("y", 2)]
    (letter,) = read_dead_letters(job.dead_letter_path)
    assert "'bad' emitted a value that cannot be serialised (type object)" in letter["error"]


def test_idle_pes_expire_and_may_emit_on_the_way_out(cluster, config):
    clock = ManualClock(start=100.0)
    cluster.clock = clock
    items = [(f"k{i % 5}", i) for i in range(50)]
    builder = TopologyBuilder("expiry")
    builder.set_spout("src", ListSpout, params={"items": items})
    builder.set_bolt("count", ExpiringCountBolt, pe_idle_timeout=10.0).key_grouping("src")
    builder.set_bolt("out", CollectorBolt, params={"name": "expiry"}).global_grouping("count")
    job = cluster.submit(builder.build(), config)
    assert job.wait(30)
    assert job.status()["units"]["count"]["pes"] == 5 and collected("expiry") == []
    clock.advance(11.0)
    wait_until(lambda: len(collected("expiry")) == 5, 10, message="5 expiry emits")
    assert sorted(collected("expiry")) == [(f"k{i}", 10) for i in range(5)]
    wait_until(lambda: job.status()["units"]["count"]["pes"] == 0, 10, message="PEs gone")


@pytest.mark.parametrize("chain", [False, True])
def test_deferred_anchors_ack_from_another_thread_and_their_failures_replay(cluster, config, chain):
    from topology_parts import DONE, BackgroundAckBolt

    items = [(f"k{i}", i) for i in range(200)] + [("retry1", 1), ("retry2", 2)]
    builder = TopologyBuilder("deferred")
    builder.set_spout("src", ListSpout, params={"items": items})
    # chained: the bolt runs in the spout's SPU and its anchors are edges of the spout round's tree
    name = f"deferred-{chain}"  # SEEN and DONE are per name
    builder.set_bolt("sink", BackgroundAckBolt, params={"name": name}, chain=chain,
                     elastic=not chain).shuffle_grouping("src")  # an elastic bolt keeps SPUs of its own
    topology = builder.build()
    assert topology.chained("sink") is chain
    job = cluster.submit(topology, config)
    assert job.wait(30), job.status()
    src = job.status()["units"]["src"]
    assert src["acked"] == len(items) and src["failed"] == src["replayed"] >= 2
    assert sorted(set(DONE[name])) == sorted(k for k, _ in items)
    assert len(DONE[name]) == len(items) + src["replayed"] - 2  # the failed two were not DONE


def test_chunks_emitted_with_emit_batch_are_tracked_with_their_round_and_replayed_with_it(cluster, config):
    from topology_parts import ChunkListSpout

    lost = ["w7"]
    items = [(f"w{i}", i) for i in range(100)]
    builder = TopologyBuilder("chunks")
    builder.set_spout("src", ChunkListSpout, params={"items": items, "per_call": 10})
    builder.set_bolt("lossy", LoseFirstAttemptBolt, params={"lose": lost, "seen": "chunks"}).key_grouping("src")
    builder.set_bolt("out", CollectorBolt, params={"name": "chunks"}).global_grouping("lossy")
    job = cluster.submit(builder.build(), config.replace(message_timeout=0.3, batch_size=30))
    assert job.wait(30), job.status()
    got = collected("chunks")
    src = job.status()["units"]["src"]
    assert sorted(set(got)) == sorted(items) and src["acked"] == len(items)
    # A round of batch_size=30 tuples (three chunks) is one tree: the lost tuple fails its round, whose
    # three chunks (30 tuples, w0..w29) are replayed; the other rounds are not.
    assert src["failed"] == src["replayed"] == 30
    replayed = [(f"w{i}", i) for i in range(30) if f"w{i}" not in lost]
    assert sorted(got) == sorted(items + replayed)


@pytest.mark.parametrize("move", ["stay", "split while parked"])
def test_a_key_idle_longer_than_pe_idle_timeout_keeps_its_state(cluster, config, move):
    """Stateful PEs that expire park their state in the unit's store; the key's next tuple gets it back,
    also when a split moved the key's range to another SPU meanwhile. Sequence numbers per key prove it."""
    from test_split_merge import assert_exact, sequenced_items
    from topology_parts import GATES, GatedListSpout, SequenceCheckBolt

    clock = ManualClock(start=100.0)
    cluster.clock = clock
    name = f"parked-{move.split()[0]}"
    keys, per_key = 40, 6
    items = sequenced_items(keys, per_key, seed=8)
    GATES[name] = threading.Event()
    builder = TopologyBuilder(name)
    builder.set_spout("src", GatedListSpout, params={"items": items, "gate": name, "hold_at": len(items) // 2})
    builder.set_bolt("check", SequenceCheckBolt, 2, pe_idle_timeout=10.0).key_grouping("src")
    builder.set_bolt("out", CollectorBolt, params={"name": name}).global_grouping("check")
    job = cluster.submit(builder.build(), config)
    wait_until(lambda: job.status()["units"]["check"]["processed"] == len(items) // 2, 10, message="first half")
    assert job.status()["units"]["check"]["pes"] > 0
    clock.advance(11.0)
    wait_until(lambda: job.status()["units"]["check"]["pes"] == 0, 10, message="every PE expired")
    if move != "stay":
        result = job.split("check", job.spus("check")[0])
        assert result.moved_keys > 0, "parked keys move with their range"
    GATES[name].set()
    assert job.wait(30), job.status()
    job.stop()
    assert_exact(name, keys, per_key)


def test_tuple_latency_counts_from_the_emit_also_for_tuples_max_pending_held_back(cluster, config):
    """60 tuples emitted in one call, 5 let through at a time, 10 ms of work each: the last ones wait
    ~0.5 s in the spout before they go out, and that wait is part of their end-to-end latency."""
    from esault import TopologyBuilder
    from esault.metrics.registry import REGISTRY
    from esault.testing import ListSpout
    from topology_parts import SlowBolt

    builder = TopologyBuilder("heldback")
    builder.set_spout("src", ListSpout, params={"items": [[f"k{i}", i] for i in range(60)], "per_call": 60},
                      max_pending=5)
    builder.set_bolt("work", SlowBolt, params={"seconds": 0.01}, elastic=False).shuffle_grouping("src")
    job = cluster.submit(builder.build(), config.replace(guarantee="at_least_once"))
    assert job.wait(60), job.status()
    labels = {"topology": "heldback", "unit": "src"}
    count = REGISTRY.get_sample_value("esault_tuple_latency_seconds_count", labels)
    total = REGISTRY.get_sample_value("esault_tuple_latency_seconds_sum", labels)
    fast = REGISTRY.get_sample_value("esault_tuple_latency_seconds_bucket", {**labels, "le": "0.25"})
    assert count and count >= 5
    assert fast < count, "the tuples held back longest waited more than 0.25 s since their emit"
    assert total / count > 0.1, f"mean {total / count:.3f} s: measured from the release, not the emit"
    job.stop()
