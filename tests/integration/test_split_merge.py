"""Manual splits and merges while a stateful, key-grouped bolt runs: state moves with keys.

Inputs carry per-key sequence numbers, so any tuple lost, duplicated or
reordered for a key shows up as a violation or a wrong final sequence.
"""

from __future__ import annotations

import random
import re
import threading

import pytest

from esault import KEY_SPACE_MAX, Bolt, JobConfig, ScalingError, TopologyBuilder, key_hash
from esault.errors import TopologyError
from esault.testing import CollectorBolt, collected, wait_until
from topology_parts import GATES, HELD, GatedListSpout, HoldingSequenceCheckBolt, SequenceCheckBolt


def sequenced_items(keys: int, per_key: int, seed: int) -> list[tuple[str, int]]:
    """Each key k gets values 1..per_key in order, keys interleaved randomly."""
    rnd = random.Random(seed)
    remaining = {f"k{i}": 0 for i in range(keys)}
    items = []
    while remaining:
        key = rnd.choice(list(remaining))
        remaining[key] += 1
        items.append((key, remaining[key]))
        if remaining[key] == per_key:
            del remaining[key]
    return items


def build(name: str, items, gate: str, hold_at: int, parallelism: int = 2, versions: dict | None = None):
    GATES[gate] = threading.Event()
    builder = TopologyBuilder(name)
    builder.set_spout("src", GatedListSpout, params={"items": items, "gate": gate, "hold_at": hold_at})
    builder.set_bolt("check", SequenceCheckBolt, parallelism, pe_idle_timeout=None,
                     **({"versions": versions} if versions else {})).key_grouping("src")
    builder.set_bolt("out", CollectorBolt, params={"name": name}).global_grouping("check")
    return builder.build()


def assert_exact(name: str, keys: int, per_key: int) -> None:
    seen: dict[str, list[int]] = {}
    for key, (seq, in_order) in collected(name):
        assert in_order, f"key {key} saw {seq} out of order"
        seen.setdefault(key, []).append(seq)
    assert len(seen) == keys
    for key, seqs in seen.items():
        assert seqs == list(range(1, per_key + 1)), f"key {key}: {seqs[:10]}..."


def test_splits_and_merges_while_tuples_flow_keep_every_key_exact(cluster, config):
    keys, per_key = 300, 40
    items = sequenced_items(keys, per_key, seed=1)
    job = cluster.submit(build("sm", items, "sm", hold_at=len(items) // 3), config)
    wait_until(lambda: job.status()["units"]["check"]["processed"] >= len(items) // 4, 30,
               message="first third processed")
    spus = job.spus("check")
    first = job.split("check", spus[0])
    assert first.moved_keys > 0 and first.action == "split"
    second = job.split("check", first.receiver)
    job.merge("check", first.giver)
    GATES["sm"].set()  # the rest flows while the next reconfigurations run
    job.split("check", job.spus("check")[-1])
    job.merge("check", second.receiver)
    assert job.wait(60), job.status()
    assert not job.status()["units"]["check"]["failed"]
    assert_exact("sm", keys, per_key)
    assert len(job.scaling_history) == 5


def test_a_split_moves_exactly_the_keys_hashing_at_or_above_the_split_point(cluster, config):
    keys, per_key = 200, 5
    items = sequenced_items(keys, per_key, seed=2)
    job = cluster.submit(build("sp", items, "sp", hold_at=len(items), parallelism=1), config)
    assert job.wait(30)
    (spu,) = job.spus("check")
    at = KEY_SPACE_MAX // 3
    result = job.split("check", spu, at=at)
    assert (result.lo, result.hi) == (at, KEY_SPACE_MAX)
    assert result.moved_keys == sum(1 for i in range(keys) if key_hash(f"k{i}") >= at)
    layout = job.status()["units"]["check"]["spus"]
    assert layout[spu]["pes"] + layout[result.receiver]["pes"] == keys
    assert layout[result.receiver]["interval"] == (at, KEY_SPACE_MAX)


def test_random_reconfigurations_during_a_run_give_the_oracle_result(cluster, config):
    keys, per_key = 150, 60
    items = sequenced_items(keys, per_key, seed=3)
    job = cluster.submit(build("rnd", items, "rnd", hold_at=len(items) // 5), config)
    rnd = random.Random(11)
    GATES["rnd"].set()
    for _ in range(8):
        spus = job.spus("check")
        if len(spus) > 1 and rnd.random() < 0.5:
            job.merge("check", rnd.choice(spus))
        else:
            job.split("check", rnd.choice(spus))
    assert job.wait(60), job.status()
    assert_exact("rnd", keys, per_key)


def test_scaling_errors_say_what_was_wrong(cluster, config):
    items = sequenced_items(10, 2, seed=4)
    job = cluster.submit(build("err", items, "err", hold_at=len(items), parallelism=1), config)
    (spu,) = job.spus("check")
    with pytest.raises(ScalingError, match="single SPU"):
        job.merge("check", spu)
    with pytest.raises(ScalingError, match="no SPU 9999"):
        job.split("check", 9999)
    with pytest.raises(ScalingError, match="only bolts scale"):
        job.split("src", job.spus("src")[0])
    with pytest.raises(ScalingError, match="global_grouping"):
        job.split("out", job.spus("out")[0])
    with pytest.raises(ScalingError, match="no unit 'nope'"):
        job.split("nope", 1)


def test_unit_totals_keep_the_counts_of_spus_merged_away(cluster, config):
    keys, per_key = 50, 4
    items = sequenced_items(keys, per_key, seed=6)
    job = cluster.submit(build("tot", items, "tot", hold_at=len(items)), config)
    assert job.wait(30)
    spus = job.spus("check")
    job.merge("check", spus[0])
    status = job.status()["units"]["check"]
    assert len(status["spus"]) == 1
    assert status["processed"] == len(items)


def test_state_too_large_for_one_frame_moves_in_chunks_and_stays_exact(cluster, config, monkeypatch):
    from esault.migration import handoff

    sent: list[tuple[int, bool]] = []
    real = handoff.chunk_states

    def recording(states, budget=handoff.HANDOFF_CHUNK_BYTES, **kw):
        chunks = real(states, budget, **kw)
        sent.extend((len(c), i == len(chunks) - 1) for i, c in enumerate(chunks))
        return chunks

    monkeypatch.setattr(handoff, "HANDOFF_CHUNK_BYTES", 300)  # a few keys per StateHandoff
    monkeypatch.setattr("esault.datapath.keyed.chunk_states", recording)
    keys, per_key = 200, 20
    items = sequenced_items(keys, per_key, seed=3)
    job = cluster.submit(build("chunks", items, "chunks", hold_at=len(items) // 2), config)
    wait_until(lambda: job.status()["units"]["check"]["processed"] >= len(items) // 4, 30, message="a quarter")
    split = job.split("check", job.spus("check")[0])
    merge = job.merge("check", split.receiver)
    GATES["chunks"].set()
    assert job.wait(60), job.status()
    assert_exact("chunks", keys, per_key)
    assert split.moved_keys > 0 and merge.moved_keys > 0
    assert sum(n for n, _ in sent) == split.moved_keys + merge.moved_keys
    assert len(sent) > 4 and [last for _, last in sent].count(True) == 2, sent  # chunked, one last per hand-off


def test_an_operation_that_cannot_start_in_time_is_withdrawn_with_a_clear_error_and_never_runs_later(cluster, config):
    """The control thread is busy (here: a task holding it; in the field a checkpoint that waits for a stuck
    SPU): a split that has not started within its timeout raises ScalingError saying so, instead of a bare
    TimeoutError with no message, and is withdrawn, so it does not run later when nobody waits for it."""
    items = sequenced_items(20, 5, seed=3)
    job = cluster.submit(build("busy", items, "busy", hold_at=len(items)), config)
    spus = job.spus("check")
    held = threading.Event()
    busy = job.coordinator.run_task(lambda: held.wait(30))
    try:
        with pytest.raises(ScalingError, match=r"split of 'check' SPU \d+ did not start within 0\.3 s: the job's "
                                               r"control thread was busy .* withdrawn and changed nothing"):
            job.split("check", spus[0], timeout=0.3)
    finally:
        held.set()
    busy.result(30)
    job.coordinator.run_task(lambda: None).result(30)  # every item queued before it has been taken
    assert job.spus("check") == spus, "the withdrawn split never ran"
    assert not job.coordinator.history


class _Forward(Bolt):
    def process(self, tup):
        self.emit(tup.key, tup.value)


class _StagingSink(Bolt):
    """Takes part in checkpoints per instance, as a sink staging epochs does."""

    def process(self, tup):
        pass

    def on_checkpoint(self, epoch):
        return None


def test_a_bolt_whose_fused_sink_stages_epochs_per_instance_cannot_split_under_exactly_once(cluster, tmp_path):
    """The sink's staged epochs belong to its instance: a split or merge of the SPUs it is fused into would
    strand them. The refusal names both bolts and both ways out."""
    items = sequenced_items(10, 2, seed=5)
    GATES["fused-sink"] = threading.Event()
    builder = TopologyBuilder("fused-sink")
    builder.set_spout("src", GatedListSpout, params={"items": items, "gate": "fused-sink", "hold_at": len(items)})
    builder.set_bolt("format", _Forward, chain=False, elastic=False).shuffle_grouping("src")
    builder.set_bolt("sink", _StagingSink, elastic=False).shuffle_grouping("format")
    topology = builder.build()
    assert topology.host_of("sink") == "format"
    job = cluster.submit(topology, JobConfig(data_dir=tmp_path / "data", elasticity=False))
    with pytest.raises(ScalingError, match=r"bolt 'sink', fused into 'format'.*'format' with elastic=False, or "
                                           r"'sink' with chain=False"):
        job.split("format", job.spus("format")[0])
    GATES["fused-sink"].set()
    assert job.wait(30), job.status()
    job.stop()


def test_a_unit_reports_the_operation_it_runs_until_the_operation_ends(cluster, config):
    """Job.reconfiguring (and status()) name the split while its giver, held mid-tuple, has yet to answer
    PrepareGive; None before it starts and after it ends. An unknown unit is refused by name."""
    items = sequenced_items(20, 5, seed=4)
    GATES["op-held"] = threading.Event()
    HELD["op-held"] = threading.Event()
    builder = TopologyBuilder("op-held")
    builder.set_spout("src", GatedListSpout, params={"items": items, "gate": "op-held", "hold_at": 40})
    builder.set_bolt("check", HoldingSequenceCheckBolt, 2, params={"gate": "op-held"},
                     pe_idle_timeout=None).key_grouping("src")
    builder.set_bolt("out", CollectorBolt, params={"name": "op-held"}).global_grouping("check")
    job = cluster.submit(builder.build(), config)
    try:
        assert job.reconfiguring("check") is None
        assert HELD["op-held"].wait(30), "a PE of check holds its tuple"
        pending = job.split_async("check", job.spus("check")[0])
        running = wait_until(lambda: job.reconfiguring("check"), 30, message="the unit running the split")
        assert re.fullmatch(r"split of 'check' SPU \d+: preparing", running), running
        assert job.status()["units"]["check"]["reconfiguring"] == running
        assert job.status()["units"]["src"]["reconfiguring"] is None
    finally:
        GATES["op-held"].set()
    pending.result(30)
    assert job.reconfiguring("check") is None
    with pytest.raises(TopologyError, match="has no unit 'nope'"):
        job.reconfiguring("nope")
    assert job.wait(60), job.status()
    assert_exact("op-held", 20, 5)
