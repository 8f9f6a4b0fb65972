"""A Kafka source rescaled live under at_least_once (esault.job.spout_rescale.LiveSpoutRescale): partitions move
between instances at their acked watermarks, no rollback, the rest of the job never stops; every record of the
topic reaches the sink at least once, also through kill -9 of a giving instance's worker at each step."""

from __future__ import annotations

import collections
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from esault import JobConfig, LocalCluster
from esault.connectors.failpoints import SOURCE_FAILPOINT_ENV
from esault.job.spout_rescale import LIVE_STEPS
from esault.testing import collected, reset_collected, wait_until

sys.path.insert(0, str(Path(__file__).resolve().parent))
import kafka_parts  # noqa: E402

pytestmark = pytest.mark.system


@pytest.fixture(autouse=True)
def _fresh_collectors():
    reset_collected()
    yield
    reset_collected()


def alo_config(tmp_path: Path) -> JobConfig:
    return JobConfig(data_dir=tmp_path / "data", guarantee="at_least_once", elasticity=False,
                     message_timeout=10.0)


def seen() -> list[tuple[int, int]]:
    return [tuple(value) for _, value in collected("seen")]


def check_every_record_at_least_once(kafka_broker, label: str) -> collections.Counter:
    """Every (partition, offset) of the topic but the end marks was seen; the duplicates are counted."""
    expected = {(r["partition"], r["offset"]) for r in kafka_broker.read("words") if r["value"] != b"end"}
    counts = collections.Counter(seen())
    missing = sorted(expected - set(counts))
    assert not missing, f"{label}: {len(missing)} records never reached the sink, first {missing[:10]}"
    assert set(counts) <= expected, f"{label}: the sink saw records that are not in the topic"
    twice = sum(c - 1 for c in counts.values())
    print(f"{label}: {len(expected)} records, {twice} read again ({len([c for c in counts.values() if c > 1])} "
          "records more than once)")
    return counts


def test_a_kafka_spout_rescaled_live_2_to_4_to_1_delivers_every_record_at_least_once_without_a_rollback(
        kafka_broker, tmp_path):
    """The topic is written in three parts around the rescales, the read ends at marks written last, so both
    rescales land mid-stream; the bolts' SPUs and the surviving spout SPUs are the same ones throughout."""
    kafka_broker.create_topic("words", 4)
    records = kafka_parts.words(9000)
    first, second, third = records[:4000], records[4000:6500], records[6500:]
    kafka_broker.produce("words", first)
    topology = kafka_parts.build_records("kafka-live-rescale", kafka_broker.bootstrap, "words")
    with LocalCluster(workers=2) as cluster:
        job = cluster.submit(topology, alo_config(tmp_path))
        wait_until(lambda: len(seen()) > 500, 30, message="records seen before the first rescale")
        bolts = set(job.spus("pass"))
        spouts = sorted(job.spus("words"))
        before = len(seen())
        grown = job.rescale("words", 4)
        assert len(grown.started) == 2 and not grown.retired, grown
        assert sorted(job.spus("words"))[:2] == spouts, "a surviving spout SPU was restarted"
        # Live: the stream goes on from where it was, nothing rolled back (the bolts are checked below); the
        # sink's rows come in batches, so flow is awaited, not sampled at the rescale's return.
        wait_until(lambda: len(seen()) > before, 30, message="records flowing again after the rescale to 4")
        kafka_broker.produce("words", second)
        wait_until(lambda: len(seen()) > len(first) + 500, 60, message="records written after the rescale to 4")
        four = sorted(job.spus("words"))
        shrunk = job.rescale("words", 1)
        assert len(shrunk.retired) == 3 and not shrunk.started, shrunk
        assert sorted(job.spus("words")) == [four[0]], "instance 0 was not the one that stayed"
        kafka_broker.produce("words", third + kafka_parts.end_marks(4))
        assert job.wait(60), job.status()
        assert set(job.spus("pass")) == bolts, "a bolt SPU was restarted: something rolled back"
        assert job.failure is None, job.failures
        job.stop()
    check_every_record_at_least_once(kafka_broker, "2 -> 4 -> 1")


KILLS = [("giver", "releasing"), ("giver", "released"), *(("driver", step) for step in LIVE_STEPS)]
"""("giver", step): the giving instance's worker kills itself at KafkaSource's failpoint `step`: told to give
partitions up, still reading them (its answer never comes); or stopped reading them, the watermarks not sent.
("driver", step): the test kills the worker hosting a giver at the control thread's rescale step `step`."""


@pytest.mark.parametrize("who,step", KILLS, ids=[f"{who}-{step}" for who, step in KILLS])
def test_kill_9_of_a_giving_instances_worker_at_each_step_of_a_live_rescale_loses_no_record(
        kafka_broker, tmp_path, monkeypatch, who, step):
    """2 -> 4: both instances give partitions to the two new ones. At `step` the worker hosting a giver dies:
    its answer (if it gave none) is replaced by the group's committed offsets, the lost SPUs by fresh ones
    reading from the group's offsets (start="committed"), and every record still reaches the sink."""
    if who == "giver":  # every worker inherits it; the spouts run on workers only, never in this process
        monkeypatch.setenv(SOURCE_FAILPOINT_ENV, step)
    kafka_broker.create_topic("words", 4)
    records = kafka_parts.words(6000)
    kafka_broker.produce("words", records[:4000])
    name = f"kafka-live-kill-{who}-{step}"
    topology = kafka_parts.build_records(name, kafka_broker.bootstrap, "words", spout_placement="worker",
                                         start="committed")
    with LocalCluster(workers=3, heartbeat_timeout=1.0) as cluster:
        job = cluster.submit(topology, alo_config(tmp_path))
        wait_until(lambda: len(seen()) > 500, 30, message="records seen before the rescale")
        workers = set(cluster.registry.workers)
        killed: list[str] = []

        def cut(unit: str, at: str) -> None:
            if who != "driver" or at != step or killed:
                return
            hosts = cluster.registry.spus_on
            givers = set(job.spus("words"))
            victim = next(w for w, spus in sorted(hosts.items()) if set(spus) & givers)
            killed.append(victim)
            os.kill(cluster.registry.pids[victim], signal.SIGKILL)

        job.rescale_step = cut
        started = time.monotonic()
        job.rescale("words", 4, timeout=60)
        took = time.monotonic() - started
        cluster.pool.spawn("r1")
        wait_until(lambda: not workers <= set(cluster.registry.workers), 20, message="a worker declared dead")
        assert who == "driver" or took < 10, f"the rescale waited {took:.1f} s: it timed out on the dead giver"
        wait_until(lambda: len(job.spus("words")) == 4 and not set(job.spus("words")) & job.lost_spus, 30,
                   message="every lost spout SPU replaced")
        kafka_broker.produce("words", records[4000:] + kafka_parts.end_marks(4))
        assert job.wait(60), job.status()
        assert job.failure is None, job.failures
        job.stop()
    check_every_record_at_least_once(kafka_broker, f"kill -9 of a giver's worker at {who} step {step}")
