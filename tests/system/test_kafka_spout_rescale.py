"""A Kafka source rescaled on a running job (Job.rescale of a spout): its partitions and offsets move like key
ranges, through a checkpoint and a rollback to it; nothing is read twice or skipped, through kill -9 of the
worker hosting the spouts at each step of the rescale."""

from __future__ import annotations

import json
import os
import signal
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from esault import JobConfig, LocalCluster
from esault.api import ControlApi
from esault.connectors.transaction_journal import JOURNAL_ENV
from esault.control import Controller, Rescale
from esault.job.spout_rescale import STEPS
from esault.testing import reset_collected, wait_until

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))  # eo_parts imports wordcount
import eo_parts  # noqa: E402
import kafka_parts  # noqa: E402

pytestmark = pytest.mark.system


@pytest.fixture(autouse=True)
def _fresh_collectors():
    reset_collected()
    yield
    reset_collected()


def post(url: str, body: object) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


class GrowOnce(Controller):
    """Rescales the spout to 4 instances, once."""

    interval = 0.1
    done = False

    def decide(self, snapshot):
        if self.done:
            return ()
        self.done = True
        return [Rescale("words", 4)]


def eo_config(tmp_path: Path, **changes) -> JobConfig:
    return JobConfig(data_dir=tmp_path / "data", elasticity=False, checkpoint_interval=0.3,
                     message_timeout=300.0, **changes)


def start(kafka_broker, name: str, total: int = 6000, **build):
    kafka_broker.create_topic("words", 4)
    kafka_broker.create_topic("counts", 2)
    records = kafka_parts.words(total)
    kafka_broker.produce("words", records)
    topology = kafka_parts.build(name, kafka_broker.bootstrap, "words", "counts", pace=0.004, max_records=50,
                                 max_pending=100, **build)
    return records, topology


def test_a_kafka_spout_rescaled_2_to_4_to_1_mid_stream_leaves_the_topic_and_the_spark_table_exact(
        kafka_broker, tmp_path):
    """The topic is written in three parts around the two rescales, and the read ends only at a mark
    written after the last part, so both rescales land mid-stream however fast the job reads."""
    kafka_broker.create_topic("words", 4)
    kafka_broker.create_topic("counts", 2)
    records = kafka_parts.words(12000)
    first, second, third = records[:6000], records[6000:9000], records[9000:]
    kafka_broker.produce("words", first)
    topology = kafka_parts.build("kafka-rescale", kafka_broker.bootstrap, "words", "counts", pace=0.004,
                                 max_records=50, max_pending=100, table="kafka_counts",
                                 end={"timestamp": kafka_parts.END_MARK_MS})
    with LocalCluster(workers=2) as cluster:
        job = cluster.submit(topology, eo_config(tmp_path))
        kafka_parts.wait_every_partition_read_from(kafka_broker.bootstrap, "kafka-rescale")
        runner = job.add_controller(GrowOnce())  # to 4 by a controller's Rescale, to 1 by the REST route
        wait_until(lambda: runner.decisions, 60, message="the controller's rescale applied")
        grown = runner.decisions[0]
        assert grown.error is None and len(grown.result.started) == 4 and len(job.spus("words")) == 4, grown
        kafka_broker.produce("words", second)  # read by the 4 instances
        wait_until(lambda: len(kafka_broker.read("counts")) > len(first), 60,
                   message="output of records written after the rescale to 4")
        api = ControlApi(lambda: cluster.jobs).start()
        try:
            url = f"{api.url}/api/jobs/kafka-rescale/units/words/rescale"
            status, answer = post(url, {"spus": 9})  # the bound a bolt has: max_spus (8 by default)
            assert status == 409 and "at most 8 (its max_spus" in answer["error"], answer
            assert len(job.spus("words")) == 4
            status, shrunk = post(url, {"spus": 1})
        finally:
            api.stop()
        assert status == 200 and len(shrunk["started"]) == 1 and len(job.spus("words")) == 1, shrunk
        kafka_broker.produce("words", third + kafka_parts.end_marks(4))  # read by the one instance, then the end
        assert job.wait(180), job.status()
        job.stop()
    assert kafka_parts.running_counts(kafka_broker.read("counts")) == kafka_parts.exact_counts(records)
    assert eo_parts.table_rows(job.data_dir / "warehouse", "kafka_counts") == kafka_parts.exact_counts(records)


def test_a_job_restarted_on_its_data_dir_with_another_spout_parallelism_resumes_each_partition_exactly(
        kafka_broker, tmp_path):
    records, two = start(kafka_broker, "kafka-restart-3")
    three = kafka_parts.build("kafka-restart-3", kafka_broker.bootstrap, "words", "counts", spouts=3, pace=0.004,
                              max_records=50, max_pending=100)
    with LocalCluster(workers=2) as cluster:
        job = cluster.submit(two, eo_config(tmp_path))
        wait_until(lambda: job.checkpoints.stats.completed >= 2, 60, message="two checkpoints")
        job.stop()  # mid-stream: a final checkpoint with 2 instances' positions
        assert 0 < len(kafka_broker.read("counts")) < len(records), "the first run did not stop mid-stream"
        job = cluster.submit(three, eo_config(tmp_path))  # same data_dir, 3 instances
        assert len(job.spus("words")) == 3
        assert job.wait(180), job.status()
        job.stop()
    assert kafka_parts.running_counts(kafka_broker.read("counts")) == kafka_parts.exact_counts(records)


DRIVER = """
import sys
sys.path[:0] = {paths!r}
import kafka_parts
from esault import JobConfig, LocalCluster
with LocalCluster(workers=2, heartbeat_timeout=2.0) as cluster:
    job = cluster.submit(kafka_parts.build("kafka-driver-rescale", {bootstrap!r}, "words", "counts", pace=0.004,
                                           max_records=50, max_pending=100, table="kafka_counts",
                                           end={{"timestamp": kafka_parts.END_MARK_MS}}),
                         JobConfig(data_dir={data!r}, elasticity=False, checkpoint_interval=0.3,
                                   message_timeout=300.0))
    kafka_parts.wait_every_partition_read_from({bootstrap!r}, "kafka-driver-rescale")
    job.rescale("words", 4, timeout=120)  # returns once a checkpoint with 4 instances completed
    print(" ".join(str(p.pid) for p in cluster.pool.processes), flush=True)  # then the test kills -9 this driver
    job.wait()
    job.stop()
"""


def test_kill_9_of_the_driver_after_a_spout_rescale_then_a_restart_on_its_data_dir_leaves_both_outputs_exact(
        kafka_broker, tmp_path, monkeypatch):
    """The driver (and the 4 spouts in it) dies right after a rescale 2 -> 4 returned; a restart on the same data
    dir, declaring the new parallelism, resumes every partition from the checkpoint the 4 instances recorded,
    and both sinks publish exactly what it covers. The topic's last part and the marks that end the read are
    written after the kill, so the kill lands mid-stream however fast the first run reads."""
    from esault.checkpoint.store import CheckpointStore

    monkeypatch.setenv(JOURNAL_ENV, str(tmp_path / "journal"))  # the sinks' transactions, for a mismatch
    kafka_broker.create_topic("words", 4)
    kafka_broker.create_topic("counts", 2)
    records = kafka_parts.words(6000)
    kafka_broker.produce("words", records[:4000])
    data = tmp_path / "data"
    here = Path(__file__).resolve().parent
    script = DRIVER.format(paths=[str(here.parents[1]), str(here)], bootstrap=kafka_broker.bootstrap,
                           data=str(data))
    store = data / "kafka-driver-rescale" / "checkpoints.sqlite"
    eo_parts.kill_driver_after_checkpoints(script, store)  # its pids are printed once the rescale returned
    recorded = CheckpointStore(store).latest()
    assert sorted(recorded.positions["words"]) == [0, 1, 2, 3], \
        f"the last checkpoint before the kill was not the rescaled job's: {recorded.positions['words']}"
    kafka_broker.produce("words", records[4000:] + kafka_parts.end_marks(4))
    four = kafka_parts.build("kafka-driver-rescale", kafka_broker.bootstrap, "words", "counts", spouts=4,
                             pace=0.004, max_records=50, max_pending=100, table="kafka_counts",
                             end={"timestamp": kafka_parts.END_MARK_MS})
    with LocalCluster(workers=2) as cluster:
        job = cluster.submit(four, eo_config(tmp_path))
        assert job.restored_from is not None and job.restored_from.epoch == recorded.epoch
        assert len(job.spus("words")) == 4
        assert job.wait(180), job.status()
        job.stop()
    kafka_parts.assert_counts_exact(kafka_broker, "counts", records, tmp_path / "journal")
    assert eo_parts.table_rows(job.data_dir / "warehouse", "kafka_counts") == kafka_parts.exact_counts(records)


@pytest.mark.parametrize("step", STEPS)
def test_kill_9_of_the_worker_hosting_the_spouts_at_each_step_of_a_rescale_leaves_the_output_exact(
        kafka_broker, tmp_path, step, monkeypatch):
    """The KafkaSink runs in the driver: a kill -9 that cuts its transaction's commit leaves aborted records,
    which Tansu shows to read_committed readers (docs/CONNECTORS.md, "The test broker"), whatever esault does.
    The Spark table's sink runs on the workers, the killed one included."""
    monkeypatch.setenv(JOURNAL_ENV, str(tmp_path / "journal"))  # the sinks' transactions, for a mismatch
    records, topology = start(kafka_broker, f"kafka-rescale-{step}", spout_placement="worker",
                              sink_placement="driver", table="kafka_counts")
    with LocalCluster(workers=3, heartbeat_timeout=1.0) as cluster:
        job = cluster.submit(topology, eo_config(tmp_path))
        kafka_parts.wait_every_partition_read_from(kafka_broker.bootstrap, f"kafka-rescale-{step}")
        killed: list[str] = []

        def cut(unit: str, at: str) -> None:
            if at != step or killed:
                return
            hosts = cluster.registry.spus_on
            spouts = set(job.spus("words"))
            victim = next((w for w, spus in hosts.items() if set(spus) & spouts), None)
            if victim is None:  # abandoned: the spouts are gone; kill a worker that will host new ones
                victim = sorted(hosts)[0]
            killed.append(victim)
            os.kill(cluster.registry.pids[victim], signal.SIGKILL)

        job.rescale_step = cut
        job.rescale("words", 4, timeout=120)  # a checkpoint that fails with the worker: from the last completed
        assert killed, f"the rescale never reached step {step!r}"
        cluster.pool.spawn("r1")
        # A worker that held SPUs rolls the job back again; at "abandoned" none did: the relaunch must avoid it.
        wait_until(lambda: killed[0] not in cluster.registry.workers, 60, message="the killed worker declared dead")
        assert job.wait(180), job.status()
        assert len(job.spus("words")) == 4
        job.stop()
    kafka_parts.assert_counts_exact(kafka_broker, "counts", records, tmp_path / "journal")
    assert eo_parts.table_rows(job.data_dir / "warehouse", "kafka_counts") == kafka_parts.exact_counts(records)
