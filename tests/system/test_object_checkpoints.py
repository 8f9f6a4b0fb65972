"""Faults of the object store: loud, and nothing lost. A real S3-compatible server (moto's) on 127.0.0.1.

A store that refuses writes fails the job at its start, naming the URL and the error; a store that stops
answering (SIGSTOP) for longer than checkpoint_timeout fails the checkpoints meanwhile (log, status, metric)
and the job goes on exact once it answers; a checkpoint whose objects are gone is not restored: the restore
names the object and falls back to the newest checkpoint that has all of its own.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from esault import JobConfig, LocalCluster
from esault.checkpoint.object_store import ObjectCheckpointStore
from esault.errors import ConfigError
from esault.storage import ObjectStore, StorageLocation
from esault.testing import wait_until

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT / "tests" / "system"))
import eo_parts  # noqa: E402

pytestmark = pytest.mark.system


def config(tmp_path: Path, storage: str, **changes) -> JobConfig:
    return JobConfig(data_dir=tmp_path / "data", elasticity=False, checkpoint_interval=0.3, message_timeout=300.0,
                     checkpoint_storage=storage, **changes)


def job_store(storage: str, job: str) -> ObjectCheckpointStore:
    return ObjectCheckpointStore(ObjectStore(StorageLocation.parse(storage).child(job)))


def test_a_store_that_refuses_writes_fails_the_job_at_start_naming_the_url_and_the_error(tmp_path, s3_server):
    storage = f"s3://no-such-bucket/ck?endpoint_override={s3_server.endpoint}&scheme=http"
    with LocalCluster(workers=1) as cluster:
        with pytest.raises(ConfigError, match=r"the checkpoint storage s3://no-such-bucket/ck/eo-refused cannot be "
                                              r"used: .*could not write '_esault_probe'.*Check the bucket exists"):
            cluster.submit(eo_parts.build("eo-refused", 100, rate=1000), config(tmp_path, storage))


def test_a_store_that_stops_answering_fails_checkpoints_loudly_and_the_job_ends_exact_once_it_answers(
        tmp_path, s3_server, caplog):
    """SIGSTOP of the server for longer than checkpoint_timeout: the checkpoint in flight times out (logged,
    counted in status and the metric), the job rolls back once the store answers and ends exact."""
    from esault.metrics.registry import REGISTRY

    storage = s3_server.url("stall")
    total = 3000
    topology = eo_parts.build("eo-stall", total, rate=600)
    with LocalCluster(workers=2, heartbeat_timeout=2.0) as cluster:
        job = cluster.submit(topology, config(tmp_path, storage, checkpoint_timeout=2.0,
                                              tolerable_checkpoint_failures=10))
        wait_until(lambda: job.checkpoints.stats.completed >= 2, 60, message="two checkpoints")
        s3_server.pause()
        try:
            wait_until(lambda: job.checkpoints.stats.failed >= 1, 60, message="a checkpoint failed while stopped")
        finally:
            s3_server.resume()
        status = job.status()["checkpoints"]
        assert status["failed"] >= 1 and "timed out" in status["last_failure"], status
        series = REGISTRY.get_sample_value("esault_checkpoints_total", {"topology": "eo-stall", "outcome": "failed"})
        assert series and series >= 1
        completed = job.checkpoints.stats.completed
        wait_until(lambda: job.checkpoints.stats.completed > completed, 120, message="checkpoints again")
        assert job.wait(180), job.status()
        job.stop()
        assert eo_parts.final_counts(job.data_dir) == eo_parts.oracle(total)


def test_a_checkpoint_whose_objects_are_gone_is_not_restored_and_the_restore_names_them(tmp_path, s3_server,
                                                                                       caplog):
    storage = s3_server.url("gone")
    total = 3000
    topology = eo_parts.build("eo-gone", total, rate=1500)
    with LocalCluster(workers=2) as cluster:
        job = cluster.submit(topology, config(tmp_path, storage))
        wait_until(lambda: job.checkpoints.stats.completed >= 3, 60, message="three checkpoints")
        job.stop()
    store = job_store(storage, "eo-gone")
    latest = store.latest()
    victim = next(r for r in store._manifest(latest.epoch)[1] if r.epoch == latest.epoch)
    store.objects.delete([victim.name])
    with caplog.at_level("WARNING", logger="esault"), LocalCluster(workers=2) as cluster:
        job = cluster.submit(topology, config(tmp_path, storage))
        assert job.restored_from is not None and job.restored_from.epoch < latest.epoch
        assert job.wait(120), job.status()
        job.stop()
    assert victim.name in caplog.text and f"checkpoint {latest.epoch}" in caplog.text, caplog.text
    assert eo_parts.final_counts(job.data_dir) == eo_parts.oracle(total)


def test_dead_letters_reach_the_object_store_with_the_checkpoints(tmp_path, s3_server):
    """The driver's disk is not durable when checkpoints are on an object store: each completed checkpoint
    copies the dead letters written since the last one there, so a rerun on another host still has them."""
    import json

    from esault import TopologyBuilder
    from esault.testing import ListSpout

    storage = s3_server.url("letters")
    b = TopologyBuilder("eo-letters")
    b.set_spout("s", ListSpout, params={"items": [[f"k{i}", "bad" if i % 50 == 7 else i] for i in range(500)]})
    b.set_bolt("check", eo_parts.FailOnValue, 2, params={"bad": "bad"}, elastic=False).key_grouping("s")
    with LocalCluster(workers=1) as cluster:
        job = cluster.submit(b.build(), config(tmp_path, storage, max_retries=1))
        assert job.wait(60), job.status()
        job.stop()
    objects = job_store(storage, "eo-letters").objects
    letters = [json.loads(line) for o in objects.list("dead_letters")
               for line in objects.get(o.name).decode().splitlines()]
    assert sorted(r["key"] for r in letters) == sorted(f"k{i}" for i in range(500) if i % 50 == 7)
    assert all(r["unit"] == "check" and "bad" in r["error"] for r in letters), letters[:2]


def test_the_kafka_sinks_transaction_journal_can_live_on_the_object_store(s3_server):
    """An object store cannot append: each journal entry is an object of its own, and read_journal reads the
    store's layout as a directory's (the diagnostic journal of a writer whose successor runs elsewhere)."""
    from esault.connectors.transaction_journal import TransactionJournal, read_journal

    url = s3_server.url("journal")
    journal = TransactionJournal(url, "t.i0")
    journal.write(state="open")
    journal.write(state="produced", epoch=1, records=1, spans=[["out", 0, 5, 5]])
    journal.write(state="committed", epoch=1)
    TransactionJournal(url, "t.i1").write(state="produced", epoch=2, records=1, spans=[["out", 1, 0, 0]])
    txns = read_journal(url).transactions
    assert [(t.transactional_id, t.epoch, t.committed) for t in txns] == [("t.i0", 1, True), ("t.i1", 2, False)]
