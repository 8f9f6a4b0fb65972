"""Which checkpoint store a worker sees, and state rows an SPU acked that the driver's store lacks."""

from __future__ import annotations

from types import SimpleNamespace

from esault import JobConfig, TopologyBuilder
from esault.checkpoint.coordinator import AckCollector, CheckpointCoordinator
from esault.checkpoint.store import CheckpointStore, store_refusal
from esault.messages.checkpoints import CheckpointAck
from esault.testing import CollectorBolt, ListSpout


def test_a_worker_sees_the_drivers_store_only_at_the_path_the_driver_marked(tmp_path):
    driver = CheckpointStore(tmp_path / "shared" / "checkpoints.sqlite")
    mark = driver.mark_identity()
    assert store_refusal(tmp_path / "shared" / "checkpoints.sqlite", mark, "w1") is None
    refusal = store_refusal(tmp_path / "private" / "checkpoints.sqlite", mark, "w1")
    assert refusal.startswith(f"worker w1 does not see the driver's checkpoint store at {tmp_path / 'private'}"
                              "/checkpoints.sqlite: it holds no store of a driver")
    assert "point --data-dir (JobConfig.data_dir) of the driver and of every worker at one shared directory" in refusal
    assert driver.mark_identity() != mark, "each start marks the store anew"
    assert "it is another driver's store" in store_refusal(tmp_path / "shared" / "checkpoints.sqlite", mark, "w1")


def test_a_checkpoint_whose_acked_rows_are_not_all_in_the_drivers_store_names_the_spus_and_workers(tmp_path):
    builder = TopologyBuilder("rows")
    builder.set_spout("src", ListSpout, params={"items": []})
    builder.set_bolt("out", CollectorBolt, params={"name": "rows"}).global_grouping("src")
    path = tmp_path / "checkpoints.sqlite"
    job = SimpleNamespace(config=JobConfig(data_dir=tmp_path), topology=builder.build(),
                          ctx=SimpleNamespace(checkpoint_path=path), name="rows",
                          worker_of=lambda spu: {7: "w1", 8: "w2"}[spu])
    coordinator = CheckpointCoordinator(job, AckCollector())
    store = CheckpointStore(path)
    store.write_states("count", 3, 7, [(1, b"\x90"), (2, b"\x90")])
    store.write_states("count", 3, 8, [(5, b"\x90")])
    acks = [CheckpointAck(3, 7, "count", 0, rows=2), CheckpointAck(3, 8, "count", 1, rows=4),
            CheckpointAck(3, 9, "src", 0, position=10)]
    assert store.rows_by_writer(3) == {7: 2, 8: 1}
    missing = coordinator._rows_missing(3, acks)
    assert missing.startswith(f"state rows of checkpoint 3 are missing from the driver's checkpoint store {path} "
                              "(count SPU 8 wrote 4 and 1 are there): worker(s) w2 wrote them into another file")
    assert coordinator._rows_missing(3, acks[:1] + acks[2:]) is None, "every acked row is there"
