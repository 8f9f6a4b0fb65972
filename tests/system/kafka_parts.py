"""Parts of the Kafka connector tests: a keyed running count from a Kafka topic into a Kafka topic.

Worker processes import these by module name (tests/system is on their path).
"""

from __future__ import annotations

import collections
import json
import threading
from typing import Any

from esault import Bolt, TopologyBuilder
from esault.connectors import KafkaSink, KafkaSource

_PAUSE = threading.Event()  # never set: wait() on it is a timed pause (pacing the work), not synchronisation


class PacedCountBolt(Bolt):
    """Per key: its running count, emitted as (key, count); each tuple takes at least `pace` seconds, so a
    run lasts long enough to be cut mid-stream."""

    def __init__(self, pace: float = 0.0) -> None:
        self.pace = pace

    def open(self, context: Any) -> None:
        self.count = 0

    def process(self, tup: Any) -> None:
        if self.pace:
            _PAUSE.wait(self.pace)
        self.count += 1
        self.emit(self.key, self.count)

    def snapshot_state(self) -> dict[str, Any]:
        return {"count": self.count}

    def restore_state(self, state: dict[str, Any]) -> None:
        self.count = state["count"]


def words(total: int, vocabulary: int = 50) -> list[tuple[str, str, int]]:
    """`total` records (key, value, partition) over 4 partitions: key word<i % vocabulary>, value its index."""
    return [(f"word{i % vocabulary}", str(i), i % 4) for i in range(total)]


END_MARK_MS = 4_000_000_000_000  # a record stamped this late ends a read with end={"timestamp": END_MARK_MS}


def end_marks(partitions: int) -> list[tuple[str, str, int, int]]:
    """One record per partition stamped END_MARK_MS: a test writes them to end a bounded read when it chooses,
    not when the records written so far run out."""
    return [("end", "end", p, END_MARK_MS) for p in range(partitions)]


def build(name: str, bootstrap: str, source: str, out: str, spouts: int = 2, counters: int = 2,
          pace: float = 0.0, end: Any = "end", max_records: int = 500, spout_placement: str | None = None,
          max_pending: int = 2000, table: str | None = None, max_skew: int | None = None,
          sink_placement: str | None = None, refresh_interval: float | None = 10.0):
    """source topic -> KafkaSource (utf-8 keys) -> keyed running count -> KafkaSink (utf-8 key, json count)
    [and a Spark table of (word, count) rows, written by pyarrow]."""
    b = TopologyBuilder(name)
    options = {"placement": spout_placement} if spout_placement else {}
    b.set_spout("words", KafkaSource, spouts, params={
        "topic": source, "bootstrap": bootstrap, "key": "utf-8", "value": "utf-8", "end": end,
        "max_records": max_records, "refresh_interval": refresh_interval,
        **({"max_skew": max_skew} if max_skew else {})},
        max_pending=max_pending, **options)
    b.set_bolt("count", PacedCountBolt, counters, params={"pace": pace}, elastic=False,
               pe_idle_timeout=None).key_grouping("words")
    b.set_bolt("out", KafkaSink, params={"bootstrap": bootstrap, "topic": out, "key": "utf-8", "value": "json"},
               elastic=False, **({"placement": sink_placement} if sink_placement else {})).shuffle_grouping("count")
    if table is not None:
        from spark_sink import SparkSink

        b.set_bolt("table", SparkSink, elastic=False, params={
            "table": table, "schema": "word STRING, count BIGINT", "key_column": "word", "value_column": "count",
            "engine": "pyarrow"}).shuffle_grouping("count")
    return b.build()


def wait_every_partition_read_from(bootstrap: str, topology: str, partitions: int = 4) -> None:
    """Until a completed checkpoint has every partition of "words" past its first record (the offsets it
    committed to the source's group): a rescale then moves partitions read part way, which an instance must
    not read again."""
    from confluent_kafka import Consumer, TopicPartition

    from esault.testing import wait_until

    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": f"esault.{topology}.words"})
    try:
        wait_until(lambda: all(tp.offset > 0 for tp in reader.committed(
            [TopicPartition("words", p) for p in range(partitions)], timeout=5)), 60,
                   message="a checkpoint past the first record of every partition")
    finally:
        reader.close()


def running_counts(records: list[dict[str, Any]]) -> dict[str, list[int]]:
    """key -> the counts the output topic holds for it, sorted."""
    out: dict[str, list[int]] = collections.defaultdict(list)
    for r in records:
        out[r["key"].decode()].append(json.loads(r["value"]))
    return {k: sorted(v) for k, v in out.items()}


def assert_counts_exact(broker: Any, topic: str, records: list[tuple[str, str, int]], journal: Any = None) -> None:
    """The topic (read_committed) holds each key's counts 1..n once. On a mismatch the message says, for each
    duplicated record, whether it lies in a transaction whose commit was cut (the sink's journal, when the
    test set esault.connectors.transaction_journal.JOURNAL_ENV to `journal`) or in a committed one."""
    shown = broker.read(topic)
    got, expected = running_counts(shown), exact_counts(records)
    if got == expected:
        return
    from esault.connectors.transaction_journal import explain_duplicates

    why = explain_duplicates(shown, journal) if journal is not None else "(no sink journal)"
    missing = {k: sorted(set(v) - set(got.get(k, []))) for k, v in expected.items() if set(v) - set(got.get(k, []))}
    raise AssertionError(f"topic {topic!r} is not exact: missing {missing or 'nothing'}; duplicates: {why}")


def exact_counts(records: list[tuple[str, str, int]]) -> dict[str, list[int]]:
    """What a correct run writes: 1, 2, ..., n for a key seen n times."""
    seen = collections.Counter(k for k, _, _ in records)
    return {k: list(range(1, n + 1)) for k, n in seen.items()}


from esault.windows import EventTime, Tumbling, WindowBolt  # noqa: E402


class RecordTimeCount(WindowBolt):
    """Records per key per second of record time (output="record"), within a 200 ms bound."""

    window = Tumbling(size=1_000)
    aggregate = "count"
    time = EventTime(max_out_of_orderness=200)
    flush_on_close = True

    def timestamp(self, tup: Any) -> float:
        return tup.value["timestamp"]

    def value(self, tup: Any) -> Any:
        return 1


class DefaultTimeCount(WindowBolt):
    """Records per key per second of event time, with WindowBolt's default timestamp(): what a source's
    event_time param put in the value's "ts" field."""

    window = Tumbling(size=1_000)
    aggregate = "count"
    time = EventTime(max_out_of_orderness=100_000)
    flush_on_close = True


from esault.connectors import KafkaRecord  # noqa: E402


class RoutingSink(KafkaSink):
    """Even values to topic "even", odd ones to "odd", each with a header naming its parity and a timestamp."""

    def to_record(self, tup: Any) -> KafkaRecord:
        parity = "even" if tup.value % 2 == 0 else "odd"
        return KafkaRecord(value=tup.value, key=tup.key, topic=parity, headers={"parity": parity.encode()},
                           timestamp=1_700_000_000_000 + tup.value)


class PacedRecordBolt(Bolt):
    """Each record KafkaSource emitted with output="record" becomes (partition, offset), after `pace` seconds:
    tuples stay in flight long enough for a rescale to find some."""

    def __init__(self, pace: float = 0.0) -> None:
        self.pace = pace

    def process(self, tup: Any) -> None:
        if self.pace:
            _PAUSE.wait(self.pace)
        record = tup.value
        self.emit(None, (record["partition"], record["offset"]))


def build_records(name: str, bootstrap: str, source: str, spouts: int = 2, pace: float = 0.001,
                  max_records: int = 50, max_pending: int = 200, spout_placement: str | None = None,
                  start: str = "earliest"):
    """source topic -> KafkaSource (output="record", read up to END_MARK_MS) -> paced (partition, offset) ->
    CollectorBolt "seen" in the driver: what every record of the topic became, duplicates included."""
    from esault.testing import CollectorBolt

    b = TopologyBuilder(name)
    options = {"placement": spout_placement} if spout_placement else {}
    b.set_spout("words", KafkaSource, spouts, params={
        "topic": source, "bootstrap": bootstrap, "key": "utf-8", "value": "utf-8", "output": "record",
        "end": {"timestamp": END_MARK_MS}, "max_records": max_records, "start": start},
        max_pending=max_pending, **options)
    b.set_bolt("pass", PacedRecordBolt, 2, params={"pace": pace}, elastic=False, chain=False).shuffle_grouping("words")
    b.set_bolt("seen", CollectorBolt, params={"name": "seen"}, elastic=False).shuffle_grouping("pass")
    return b.build()
