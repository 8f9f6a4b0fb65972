"""Event time across source instances on a real broker (Tansu): watermarks per partition and per input channel.

Every test computes, from the records' own timestamps, which records are late in their partition (none here:
each partition is within 2 s of disorder, the windows' bound is 2.5 s) and each window's exact contents, and
compares what the job emitted with that: nothing late that was not late in the input, nothing fired early
(a window fired early misses records, which then come late or fire it again).
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

from esault import JobConfig, LocalCluster, TopologyBuilder
from esault.testing import CollectorBolt, collected, reset_collected, run_to_completion, wait_until

sys.path.insert(0, str(Path(__file__).resolve().parent))
import event_time_parts as parts  # noqa: E402

pytestmark = pytest.mark.system


@pytest.fixture(autouse=True)
def _fresh_collectors():
    reset_collected()
    yield
    reset_collected()


def clicks_topology(name: str, bootstrap: str, sources: int, window: type, windows: int = 2, pace: float = 0.02,
                    max_records: int = 100, hop: bool = False, sink: str | None = None,
                    **source: object) -> TopologyBuilder:
    """clicks -> [parse, 3 SPUs, shuffled] -> windows per user -> a collector (or a KafkaSink into `sink`)."""
    b = TopologyBuilder(name)
    b.set_spout("clicks", parts.PacedKafkaSource, sources,
                params=parts.source_params(bootstrap, "clicks", slow=0, pace=pace, max_records=max_records,
                                           **source))
    into = "clicks"
    if hop:
        b.set_bolt("parse", parts.Parse, 3, elastic=False).shuffle_grouping("clicks")
        into = "parse"
    b.set_bolt("windows", window, windows, pe_idle_timeout=None, elastic=False).key_grouping(into)
    if sink is None:
        b.set_bolt("out", CollectorBolt).shuffle_grouping("windows")
    else:
        from esault.connectors import KafkaSink

        b.set_bolt("out", KafkaSink, elastic=False, params={"bootstrap": bootstrap, "topic": sink, "key": "utf-8",
                                                            "value": "json"}).shuffle_grouping("windows")
    return b


def assert_exact(outputs: list, records: list, sessions: bool) -> None:
    late_input = parts.late_in_input(records)
    assert not late_input, "the input itself has late records: the test's data is wrong"
    if sessions:
        expected = parts.session_counts(records, parts.SESSION_GAP_MS, late_input)
    else:
        expected = parts.tumbling_counts(records, 1_000, late_input)
    got, late = parts.windows_of(outputs, sessions)
    assert not late, f"{len(late)} records counted late that were on time in their partition, e.g. {late[:3]}"
    assert got == expected, parts.differences(got, expected)


@pytest.mark.parametrize(("sources", "window", "hop"), [(2, "tumbling", False), (4, "sessions", False),
                                                        (2, "sessions", False), (4, "tumbling", False),
                                                        (2, "tumbling", True), (4, "sessions", True)],
                         ids=["2-tumbling", "4-sessions", "2-sessions", "4-tumbling", "2-tumbling-two-hops",
                              "4-sessions-two-hops"])
def test_a_slow_source_instance_makes_no_record_late_and_no_window_fire_early(kafka_broker, sources, window, hop):
    """Four partitions read by 2 or 4 instances, instance 0 held back (it reads 100 records every 20 ms, the
    others as fast as they can): the window SPUs' watermark is the minimum over the instances, each the minimum
    over its partitions. (Before watermarks per channel, 2 instances with max_skew=100: 2,413 of 8,000 records
    late, 485 of 1,619 windows wrong.) Two hops: a shuffled bolt between forwards the minimum of its inputs."""
    records = parts.clicks(8_000, users=20 if window == "tumbling" else 200)
    kafka_broker.create_topic("clicks", 4)
    kafka_broker.produce("clicks", [c.record() for c in records])
    cls = parts.ClickCounts if window == "tumbling" else parts.ClickSessions
    b = clicks_topology(f"clicks-{sources}-{window}", kafka_broker.bootstrap, sources, cls, hop=hop, max_skew=100)
    result = run_to_completion(b, timeout=120)
    assert_exact(result["out"], records, sessions=window == "sessions")


def eo_config(tmp_path: Path, **changes) -> JobConfig:
    return JobConfig(data_dir=tmp_path / "data", elasticity=False, checkpoint_interval=0.3, message_timeout=300.0,
                     **changes)


def fired(name: str, before_ms: int) -> bool:
    """Some window of the collector `name` that starts before `before_ms` has fired."""
    return any(not parts.is_late(v) and v["start"] < before_ms for _, v in collected(name))


class LiveClicks:
    """Clicks produced as they happen, in a thread: every 50 ms, 5 per partition that speaks, each stamped with
    the wall clock minus up to 1 s (so each partition is within 1 s of disorder); partition 3 only once told."""

    def __init__(self, bootstrap: str, seed: int = 52) -> None:
        import random
        import threading

        from confluent_kafka import Producer

        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        self.rng = random.Random(seed)
        self.records: list[parts.Click] = []
        self.next_index = [0, 0, 0, 0]
        self.with_3 = threading.Event()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        import time

        while not self.done.is_set():
            now = int(time.time() * 1000)
            for p in (0, 1, 2, 3) if self.with_3.is_set() else (0, 1, 2):
                for _ in range(5):
                    click = parts.Click(f"u{self.rng.randrange(20)}", p, self.next_index[p],
                                        now - self.rng.randrange(1_001))
                    self.next_index[p] += 1
                    self.records.append(click)
                    self.producer.produce("clicks", key=click.user, value="x", partition=p, timestamp=click.ts)
            self.producer.poll(0)
            self.done.wait(0.05)  # the stream's pace (a timed pause, not synchronisation)

    def stop(self) -> None:
        self.done.set()
        self.thread.join(10)
        for key, value, p, ts in parts.end_marks():
            self.producer.produce("clicks", key=key, value=value, partition=p, timestamp=ts)
        assert self.producer.flush(30) == 0


@pytest.mark.parametrize("sources", [2, 4])
def test_a_partition_silent_for_10_s_goes_idle_and_the_windows_fire_meanwhile(kafka_broker, tmp_path, sources):
    """A live stream (event time = the wall clock, 1 s of disorder) into 4 partitions, partition 3 silent for
    its first 10 s (2 instances: one of its instance's two partitions is idle; 4: its instance is idle). With
    idle_timeout=1 s the windows of the others fire while it is silent (without idleness the watermark would
    wait for it for ever); then it speaks again, at the stream's time, and every window is exact."""
    import time

    kafka_broker.create_topic("clicks", 4)
    b = clicks_topology(f"clicks-idle-{sources}", kafka_broker.bootstrap, sources, parts.ClickCounts, pace=0.0,
                        end={"timestamp": parts.END_MARK_MS}, idle_timeout=1.0, start="earliest")
    stream = LiveClicks(kafka_broker.bootstrap)
    with LocalCluster(workers=2) as cluster:
        job = cluster.submit(b.build(), eo_config(tmp_path))
        started = time.time()
        stream.thread.start()
        first = int(started * 1000)
        try:
            wait_until(lambda: fired("out", first + 2_000), 60, message="windows fired while partition 3 is silent")
            assert not stream.next_index[3]
            wait_until(lambda: time.time() - started >= 10, 30, message="10 s of silence")
            stream.with_3.set()
            wait_until(lambda: stream.next_index[3] >= 300, 30, message="partition 3 speaking again")
        finally:
            stream.stop()
        assert job.wait(120), job.status()
        job.stop()
    assert_exact(collected("out"), stream.records, sessions=False)


def test_a_split_of_the_window_bolt_mid_stream_keeps_every_window_exact(kafka_broker, tmp_path):
    """Two instances, one slowed; a window SPU splits while both still read: the new SPU waits for the sources'
    watermarks, the moved keys take their windows and their own watermark with them."""
    first = parts.clicks(4_000)
    second = parts.clicks(4_000, first_index=1_000, seed=7)
    kafka_broker.create_topic("clicks", 4)
    kafka_broker.produce("clicks", [c.record() for c in first])
    b = clicks_topology("clicks-split", kafka_broker.bootstrap, 2, parts.ClickCounts, windows=1,
                        end={"timestamp": parts.END_MARK_MS})
    with LocalCluster(workers=2) as cluster:
        job = cluster.submit(b.build(), eo_config(tmp_path))
        wait_until(lambda: fired("out", parts.BASE_MS + 3_000), 60, message="the first windows")
        result = job.split("windows", job.spus("windows")[0])
        assert result.moved_keys > 0 and len(job.spus("windows")) == 2
        kafka_broker.produce("clicks", [c.record() for c in second] + parts.end_marks())
        assert job.wait(120), job.status()
        job.stop()
    assert_exact(collected("out"), first + second, sessions=False)


def test_kill_9_of_a_worker_mid_stream_under_exactly_once_leaves_every_window_exact(kafka_broker, tmp_path):
    """Sources and windows on 3 workers, windows into a KafkaSink; the worker holding the most of them is killed
    -9 after two checkpoints: the job rolls back, the sources replay from the checkpoint and regenerate their
    watermarks, each key's windows restart from their checkpointed state (its own watermark in it), and the
    topic holds every window once, exact."""
    from esault.connectors import KafkaSink

    first = parts.clicks(4_000)
    second = parts.clicks(4_000, first_index=1_000, seed=7)
    kafka_broker.create_topic("clicks", 4)
    kafka_broker.create_topic("windows", 2)
    kafka_broker.produce("clicks", [c.record() for c in first])
    b = TopologyBuilder("clicks-kill")
    b.set_spout("clicks", parts.PacedKafkaSource, 2, placement="worker", max_pending=400,
                params=parts.source_params(kafka_broker.bootstrap, "clicks", slow=0, pace=0.02, max_records=50,
                                           end={"timestamp": parts.END_MARK_MS}))
    b.set_bolt("windows", parts.ClickCounts, 2, pe_idle_timeout=None, elastic=False).key_grouping("clicks")
    b.set_bolt("out", KafkaSink, elastic=False, params={"bootstrap": kafka_broker.bootstrap, "topic": "windows",
                                                        "key": "utf-8", "value": "json"}).shuffle_grouping("windows")
    with LocalCluster(workers=3, heartbeat_timeout=1.0) as cluster:
        job = cluster.submit(b.build(), eo_config(tmp_path))
        wait_until(lambda: job.checkpoints.stats.completed >= 2, 60, message="two checkpoints")
        hosts = {w: set(spus) for w, spus in cluster.registry.spus_on.items()}
        victim = max(hosts, key=lambda w: (bool(hosts[w] & set(job.spus("windows"))),
                                           bool(hosts[w] & set(job.spus("clicks"))), len(hosts[w])))
        os.kill(cluster.registry.pids[victim], signal.SIGKILL)
        cluster.pool.spawn("r1")
        wait_until(lambda: len(job.checkpoints.stats.recoveries) >= 1, 60, message="the rollback")
        kafka_broker.produce("clicks", [c.record() for c in second] + parts.end_marks())
        assert job.wait(120), job.status()
        job.stop()
    assert_exact(parts.from_topic(kafka_broker.read("windows")), first + second, sessions=False)


def test_a_rescale_of_the_source_mid_stream_keeps_every_window_exact(kafka_broker, tmp_path):
    """2 -> 4 instances while they read (a rollback to a fresh checkpoint, relaunched with 4): the window SPUs
    are relaunched too and wait for the 4 new instances' watermarks; each key's windows resume from the
    checkpoint with their own watermark. Into a KafkaSink: each window once."""
    first = parts.clicks(4_000)
    second = parts.clicks(4_000, first_index=1_000, seed=7)
    kafka_broker.create_topic("clicks", 4)
    kafka_broker.create_topic("windows", 2)
    kafka_broker.produce("clicks", [c.record() for c in first])
    b = clicks_topology("clicks-rescale", kafka_broker.bootstrap, 2, parts.ClickCounts, sink="windows",
                        end={"timestamp": parts.END_MARK_MS})
    with LocalCluster(workers=2) as cluster:
        job = cluster.submit(b.build(), eo_config(tmp_path))
        wait_until(lambda: job.checkpoints.stats.completed >= 2, 60, message="two checkpoints")
        job.rescale("clicks", 4, timeout=120)
        assert len(job.spus("clicks")) == 4
        kafka_broker.produce("clicks", [c.record() for c in second] + parts.end_marks())
        assert job.wait(120), job.status()
        job.stop()
    assert_exact(parts.from_topic(kafka_broker.read("windows")), first + second, sessions=False)
