"""KafkaSource: a spout reading Kafka partitions that esault assigns, with its offsets in esault's checkpoints.

    b.set_spout("orders", KafkaSource, parallelism=4,
                params={"topic": "orders", "bootstrap": "localhost:9092", "value": "json"})

Each instance owns a disjoint set of partitions (esault.connectors.partitions)
and reads them with consumer.assign(): no group rebalance moves a partition
behind esault's back. Its position for a checkpoint is the next offset of
each partition; a rollback or a restart seeks there, so the first record
after the checkpoint is the first one read again and no record is read twice.
After each completed checkpoint the same offsets are committed to the
consumer group, so Kafka's tools show the group's lag. docs/CONNECTORS.md.
"""

from __future__ import annotations

import logging
import math
import time
from itertools import groupby
from operator import itemgetter
from typing import Any, Callable

from esault.connectors.codecs import resolve_codec
from esault.connectors.failpoints import SOURCE_FAILPOINT_ENV, failpoint_from_env
from esault.connectors.partitions import (
    AckedOffsets, PartitionOffsets, TimeAligner, TopicPartition, increasing, matching, merge_positions,
    newly_owned, owned, partitions_read,
)
from esault.connectors.source_watermarks import PartitionWatermarks
from esault.connectors.settings import (
    OUTPUTS, SOURCE_OWNED, START_NAMES, check_bootstrap, check_config, check_event_time, check_positive,
    check_timestamp_spec, check_topics,
)
from esault.dsl.context import TopologyContext
from esault.dsl.spout import Spout
from esault.errors import ConnectorError
from esault.metrics.partition_status import PartitionRow
from esault.metrics.registry import forget_kafka_lag, set_kafka_lag

log = logging.getLogger("esault.connectors.kafka")

def kafka_client() -> Any:
    """The confluent_kafka module, or a ConnectorError saying how to install it."""
    try:
        import confluent_kafka
    except ImportError:
        raise ConnectorError("the Kafka connectors need confluent-kafka: pip install 'esault[kafka]'") from None
    return confluent_kafka


_SECOND = itemgetter(1)
BROKER_CHECK_INTERVAL = 10.0
"""Seconds between metadata requests that check the brokers answer, when refresh_interval is None."""
WAITING_CHECK_INTERVAL = 2.0
"""Seconds between those requests while the brokers do not answer: the wait clears soon after they do."""


def event_time_of(spec: str, message: Any, value: Any) -> int | float:
    """A record's event time (epoch ms) by params 'event_time'; ValueError (a dead letter) when it has none."""
    if spec == "timestamp":
        kind, stamp = message.timestamp()
        if stamp is None or stamp < 0:
            raise ValueError("the record has no timestamp (event_time='timestamp')")
        return stamp
    name = spec[len("field:"):]
    found = value.get(name) if isinstance(value, dict) else None
    if isinstance(found, bool) or not isinstance(found, (int, float)):
        raise ValueError(f"the value has no number in field {name!r} (event_time={spec!r}); got "
                         f"{found!r:.40} in {type(value).__name__} {value!r:.80}")
    return found


class KafkaSource(Spout):
    """Reads one topic, a list of topics, or a pattern ('^orders-.*'); emits (key, value) per record.

    params:
      topic, bootstrap: what to read, from which brokers.
      key, value: codec names ("bytes" default, "utf-8", "json", "msgpack", or "package.module:Codec").
      output: "value" (default): the tuple's value is the decoded value. "record": a dict
        {"value", "topic", "partition", "offset", "timestamp" (epoch ms), "headers" ([[name, bytes], ...])}.
      start: where a partition without a checkpointed offset begins: "earliest" (default), "latest",
        "committed" (the group's offset, else `reset`), or {"timestamp": epoch ms}.
      reset: "earliest" (default) or "latest": for start="committed" when the group has none.
      end: None (default: tail forever), "end" (the end offsets at start: the job finishes by itself once
        every partition reaches them), or {"timestamp": epoch ms} (each partition ends at its first record
        stamped at or after it).
      group: the consumer group offsets are committed to (default "esault.<topology>.<unit>").
      commit_offsets: commit each completed checkpoint's offsets to the group (default True).
      create, partitions: create a missing topic with that many partitions instead of failing.
      config: librdkafka settings (SASL, TLS, fetch tuning) passed through.
      connect_timeout: seconds to reach the brokers at start before the job fails (default 10).
      max_records: records per next_tuple() call at most (default 500).
      max_skew: event-time alignment, in ms (default None: off). Records wait per partition and leave in
        timestamp order, none more than max_skew past a partition that has nothing waiting, so a partition
        read ahead does not make the others' records late for a window downstream (within this instance;
        keep it within the windows' max_out_of_orderness).
      event_time: None (default), "timestamp" (the record's timestamp) or "field:NAME" (field NAME of the
        decoded value, a dict): the tuple's value then carries its event time, in epoch ms, in field "ts",
        where WindowBolt's default timestamp() and a join's default time="ts" read it (no output="record"
        and no timestamp() of your own needed). A dict value gets the field "ts" (replaced if it had one);
        any other value becomes {"ts": ms, "value": value}. A record without it goes to dead letters.
      watermarks: None (default: on with event_time), True or False. On, each instance sends watermarks
        downstream: per partition the newest event time it emitted, the minimum over its partitions not idle
        (by event_time, else by the records' timestamps), and every SPU downstream takes the minimum over the
        instances; a window subtracts its max_out_of_orderness. So records are late only if they are late in
        their own partition, whatever the instances' speeds (docs/CONNECTORS.md, "Watermarks").
      idle_timeout: seconds (default None: never). A partition nothing was fetched from for this long, with
        nothing of it waiting on the broker past its position, is idle: left out of the watermark until it has
        records again (and out of max_skew's alignment); an instance
        whose every partition is idle, or that reads none, is idle for the SPUs downstream.
      refresh_interval: seconds between metadata reads that pick up new partitions, and new topics of a
        pattern, while the job runs (default 10; None: never). A tailing read only: a bounded read keeps
        the partitions it started with. The same reads (every 10 s with None) notice brokers that stop
        answering: the source then waits, logs it and shows "waiting for broker ADDRESS since ..." in the
        job's status until they answer (checked every 2 s meanwhile; also once a bounded read reached its
        ends, from waiting_for()).
    """

    def __init__(self, topic: Any, bootstrap: str, key: str = "bytes", value: str = "bytes",
                 output: str = "value", start: Any = "earliest", reset: str = "earliest", end: Any = None,
                 group: str | None = None, commit_offsets: bool = True, create: bool = False,
                 partitions: int = 1, config: dict[str, Any] | None = None, connect_timeout: float = 10.0,
                 max_records: int = 500, max_skew: int | None = None, refresh_interval: float | None = 10.0,
                 event_time: str | None = None, watermarks: bool | None = None, idle_timeout: float | None = None,
                 now: Callable[[], float] = time.monotonic) -> None:
        what = "KafkaSource"
        self.topics = check_topics(what, topic)
        self.bootstrap = check_bootstrap(what, bootstrap)
        self.key_codec = resolve_codec(key, f"{what}: params 'key'")
        self.value_codec = resolve_codec(value, f"{what}: params 'value'")
        if output not in OUTPUTS:
            raise ConnectorError(f"{what}: params 'output' is one of {', '.join(map(repr, OUTPUTS))}, got {output!r}")
        self.output = output
        self.start = check_timestamp_spec(what, "start", start, START_NAMES)
        if reset not in ("earliest", "latest"):
            raise ConnectorError(f"{what}: params 'reset' is 'earliest' or 'latest', got {reset!r}")
        self.reset = reset
        self.end = None if end is None else check_timestamp_spec(what, "end", end, ("end",))
        if group is not None and (not isinstance(group, str) or not group):
            raise ConnectorError(f"{what}: params 'group' is a consumer group name, got {group!r}")
        self.group = group
        self.commit_offsets = bool(commit_offsets)
        self.create = bool(create)
        self.partitions_to_create = check_positive(what, "partitions", partitions, whole=True)
        self.config = check_config(what, config, SOURCE_OWNED)
        self.connect_timeout = check_positive(what, "connect_timeout", connect_timeout)
        self.max_records = check_positive(what, "max_records", max_records, whole=True)
        self.max_skew = None if max_skew is None else check_positive(what, "max_skew", max_skew, whole=True)
        self._aligner = None if max_skew is None else TimeAligner(max_skew)
        self._buffered_upto: dict[TopicPartition, int] = {}  # aligned: past the last record buffered
        self._paused: set[TopicPartition] = set()  # aligned: partitions whose buffer is long
        self.event_time = check_event_time(what, event_time)
        if watermarks is not None and not isinstance(watermarks, bool):
            raise ConnectorError(f"{what}: params 'watermarks' is None (on with event_time), True or False, got "
                                 f"{watermarks!r}")
        self.idle_timeout = None if idle_timeout is None else check_positive(what, "idle_timeout", idle_timeout)
        self._watermarks = (PartitionWatermarks(self.idle_timeout, now)
                            if self._emits_watermarks(event_time, watermarks) else None)
        self.refresh_interval = (None if refresh_interval is None
                                 else check_positive(what, "refresh_interval", refresh_interval))
        self._now = now
        self._consumer: Any = None
        self._offsets = PartitionOffsets()
        self._unit = ""
        self._topology = ""
        self._lag_series: set[TopicPartition] = set()  # partitions whose esault_kafka_consumer_lag is exported
        self._untracked = False
        self._at_least_once = False
        self._seq = 0
        self._pending: dict[int, tuple[list, list]] = {}  # at_least_once: batches in flight, re-emitted on fail
        self._fetched: set[TopicPartition] = set()  # partitions a fetch answered for (their end is confirmed)
        self._instance = (0, 1)
        self.waiting_for_broker = False
        """True from a metadata refresh the brokers did not answer until one they answer (logged both times)."""
        self._acked = AckedOffsets()  # at_least_once: what the group may be told was processed
        self._next_commit = 0.0
        self._failpoint = failpoint_from_env(SOURCE_FAILPOINT_ENV, log)  # kill -9 tests only
        self._next_refresh = 0.0
        self._moving = False  # between release_share() and take_share(): no partition is added by a refresh
        self._kept: set[TopicPartition] | None = None  # what release_share() kept (None: a fresh instance)
        self._releasing: dict[TopicPartition, int | None] = {}  # given up, not handed over yet: tp -> its end

    @staticmethod
    def _emits_watermarks(event_time: str | None, watermarks: bool | None) -> bool:
        return event_time is not None if watermarks is None else watermarks

    @classmethod
    def esault_emits_watermarks(cls, params: dict[str, Any]) -> bool:
        """On with event_time, unless params 'watermarks' says otherwise (docs/CONNECTORS.md, "Watermarks")."""
        return cls._emits_watermarks(params.get("event_time"), params.get("watermarks"))

    @classmethod
    def esault_check_params(cls, name: str, params: dict[str, Any]) -> None:
        """build(): the params are checked by making an instance (nothing connects before open())."""
        try:
            cls(**params)
        except ConnectorError as exc:
            raise ConnectorError(f"spout {name!r}: {exc}") from None

    # --- open ------------------------------------------------------------------------------

    def open(self, context: TopologyContext) -> None:
        kafka = kafka_client()
        self._unit = context.unit
        self._topology = context.topology
        self._instance = (context.instance, context.instances)
        self._untracked = context.guarantee == "none"
        self._at_least_once = context.guarantee == "at_least_once"
        settings = {"bootstrap.servers": self.bootstrap,
                    "group.id": self.group or f"esault.{context.topology}.{context.unit}",
                    "enable.auto.commit": False, "enable.auto.offset.store": False,
                    "enable.partition.eof": True, "isolation.level": "read_committed",
                    "fetch.queue.backoff.ms": 10,  # librdkafka's 1 s idles a partition whose queue was full
                    "socket.connection.setup.timeout.ms": int(self.connect_timeout * 1000),
                    "logger": log}
        settings.update(self.config)
        try:
            self._consumer = kafka.Consumer(settings)
        except kafka.KafkaException as exc:
            raise ConnectorError(f"KafkaSource {self._unit!r}: librdkafka refused the consumer settings "
                                 f"({exc.args[0] if exc.args else exc}); fix params 'config'") from None
        try:
            partitions = self._discover(kafka)
            mine = owned(partitions, context.instance, context.instances)
            try:
                self._start_offsets(kafka, mine)
            except kafka.KafkaException as exc:
                raise ConnectorError(
                    f"KafkaSource {self._unit!r}: the brokers at {self.bootstrap!r} did not answer where to start "
                    f"(start={self.start!r}) within {self.connect_timeout}s ({exc.args[0] if exc.args else exc}); "
                    "check that they run, or raise params 'connect_timeout'") from None
            self._consumer.assign([kafka.TopicPartition(t, p, self._offsets.next_offset((t, p))) for t, p in mine])
        except BaseException:
            self._consumer.close()
            self._consumer = None
            raise
        log.info("KafkaSource %r instance %d/%d reads %s", self._unit, context.instance, context.instances,
                 ", ".join(f"{t}[{p}]" for t, p in mine) or "no partition")
        self._next_refresh = self._now() + (self.refresh_interval or BROKER_CHECK_INTERVAL)

    def _discover(self, kafka: Any) -> list[TopicPartition]:
        """Every partition of the topics read, from one metadata request for all topics (asking for one unknown
        topic by name makes some brokers create it). Fails within connect_timeout, naming the brokers."""
        try:
            metadata = self._consumer.list_topics(timeout=self.connect_timeout)
        except kafka.KafkaException as exc:
            raise ConnectorError(
                f"KafkaSource {self._unit!r}: no Kafka broker answered at {self.bootstrap!r} within "
                f"{self.connect_timeout}s ({exc.args[0] if exc.args else exc}); check the address and that the "
                "broker runs, or raise params 'connect_timeout'") from None
        existing = metadata.topics
        names: list[str] = []
        for topic in self.topics:
            if topic.startswith("^"):
                names.extend(matching(topic, existing))
            elif topic in existing and existing[topic].error is None:
                names.append(topic)
            elif self.create:
                self._create(kafka, topic)
                names.append(topic)
            else:
                known = sorted(t for t in existing if not t.startswith("__"))[:20]
                raise ConnectorError(
                    f"KafkaSource {self._unit!r}: topic {topic!r} does not exist at {self.bootstrap!r} (topics "
                    f"there: {', '.join(known) or 'none'}); create it, fix the name, or pass params "
                    "{'create': True, 'partitions': N}")
        if self.create or any(t.startswith("^") for t in self.topics):
            metadata = self._consumer.list_topics(timeout=self.connect_timeout)
        return [(t, p) for t in dict.fromkeys(names) for p in metadata.topics[t].partitions]

    def _check_brokers(self) -> None:
        """_refresh() when it is due: every refresh_interval (BROKER_CHECK_INTERVAL when None), every
        WAITING_CHECK_INTERVAL while the brokers do not answer."""
        if self._consumer is None or self._now() < self._next_refresh:
            return
        self._refresh(kafka_client())
        self._next_refresh = self._now() + (WAITING_CHECK_INTERVAL if self.waiting_for_broker
                                            else self.refresh_interval or BROKER_CHECK_INTERVAL)

    def _refresh(self, kafka: Any) -> None:
        """Are the brokers answering (else the source waits for them, and says so)? When tailing with a
        refresh_interval: new partitions of the topics read (and new topics of a pattern) that this instance
        owns are assigned, from their first record; the owners of existing partitions never change."""
        try:
            existing = self._consumer.list_topics(timeout=1.0).topics
        except kafka.KafkaException as exc:
            if not self.waiting_for_broker:
                log.warning("KafkaSource %r: waiting for broker %s: the brokers at %r did not answer a metadata "
                            "request within 1 s (%s); reading goes on where it stopped once they answer",
                            self._unit, self.bootstrap, self.bootstrap, exc.args[0] if exc.args else exc)
            self.waiting_for_broker = True
            return
        if self.waiting_for_broker:
            log.warning("KafkaSource %r: the brokers at %r answer again: no longer waiting", self._unit,
                        self.bootstrap)
            self.waiting_for_broker = False
        if self.refresh_interval is None or self.end is not None or self._moving:
            return  # moving: the partitions it takes come with take_share(), not from the first record
        partitions = partitions_read(self.topics, {t: list(m.partitions) for t, m in existing.items()})
        new = newly_owned(partitions, self._offsets, *self._instance)
        if not new:
            return
        added = []
        for tp in new:
            low, _ = self._consumer.get_watermark_offsets(kafka.TopicPartition(*tp), timeout=self.connect_timeout)
            self._offsets.add(tp, max(low, 0))
            self._acked.start(tp, max(low, 0))
            added.append(kafka.TopicPartition(tp[0], tp[1], max(low, 0)))
        self._consumer.incremental_assign(added)
        log.info("KafkaSource %r: new partitions %s", self._unit, ", ".join(f"{t}[{p}]" for t, p in new))

    def _create(self, kafka: Any, topic: str) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap, **self.config})
        future = admin.create_topics([NewTopic(topic, self.partitions_to_create, 1)])[topic]
        try:
            future.result(self.connect_timeout)
        except kafka.KafkaException as exc:
            if exc.args and getattr(exc.args[0], "code", lambda: None)() == kafka.KafkaError.TOPIC_ALREADY_EXISTS:
                return  # another instance created it first
            raise ConnectorError(f"KafkaSource {self._unit!r}: could not create topic {topic!r} at "
                                 f"{self.bootstrap!r}: {exc}") from None

    def _start_offsets(self, kafka: Any, mine: list[TopicPartition], into: PartitionOffsets | None = None) -> None:
        """A concrete start (and end) offset per owned partition, so a checkpoint never holds 'latest' (added to
        the partitions read, or to `into`)."""
        timeout = self.connect_timeout
        tps = [kafka.TopicPartition(t, p) for t, p in mine]
        committed = {}
        if self.start == "committed" and tps:
            committed = {(tp.topic, tp.partition): tp.offset for tp in self._consumer.committed(tps, timeout=timeout)}
        at_time = {}
        if isinstance(self.start, dict) and tps:
            asked = [kafka.TopicPartition(t, p, self.start["timestamp"]) for t, p in mine]
            at_time = {(tp.topic, tp.partition): tp.offset
                       for tp in self._consumer.offsets_for_times(asked, timeout=timeout)}
        for tp in mine:
            low, high = self._consumer.get_watermark_offsets(kafka.TopicPartition(*tp), timeout=timeout)
            start = {"earliest": low, "latest": high}.get(self.start) if isinstance(self.start, str) else None
            if self.start == "committed":
                start = committed.get(tp, -1)
                if start < 0:
                    start = low if self.reset == "earliest" else high
            elif isinstance(self.start, dict):
                start = at_time.get(tp, -1)
                if start < 0:
                    start = high
            end = high if self.end == "end" else None
            if into is not None:
                into.add(tp, max(start, 0), end, end_known=end is None)
                continue
            self._offsets.add(tp, max(start, 0), end, end_known=end is None)
            self._acked.start(tp, max(start, 0))

    # --- reading ---------------------------------------------------------------------------

    def next_tuple(self) -> None:
        if self._offsets.all_done() and self.end is not None:
            self.finish()
            return
        self._check_brokers()
        messages = self._consumer.consume(self.max_records, 0)
        if not messages:
            return
        keys: list[Any] = []
        values: list[Any] = []
        offsets = self._offsets
        key_codec, value_codec, record = self.key_codec, self.value_codec, self.output == "record"
        end_time = self.end["timestamp"] if isinstance(self.end, dict) else None
        nexts: dict[TopicPartition, int] = {}  # at_least_once: where this batch ends in each partition
        aligner = self._aligner
        event_time = self.event_time
        newest = None if self._watermarks is None else self._watermarks.newest

        def take(tp: TopicPartition, m: Any) -> None:
            """One record, in the order it is emitted: the position moves past it."""
            offset = m.offset()
            if end_time is not None and offset >= offsets.next_offset(tp) and m.timestamp()[1] >= end_time:
                offsets.stop_at_time(tp)
                return
            if not offsets.accept(tp, offset):
                return
            nexts[tp] = offset + 1
            raw_key, raw_value = m.key(), m.value()
            try:
                key = None if raw_key is None else key_codec.decode(raw_key)
                value = None if raw_value is None else value_codec.decode(raw_value)
                ts = None if event_time is None else event_time_of(event_time, m, value)
            except Exception as exc:  # a poison record: to dead letters, the partition goes on
                self.dead_letter(raw_key, raw_value, f"{type(exc).__name__}: {exc} (topic {tp[0]!r} partition "
                                 f"{tp[1]} offset {offset})",
                                 {"topic": tp[0], "partition": tp[1], "offset": offset})
                return
            if record:
                headers = m.headers()
                value = {"value": value, "topic": tp[0], "partition": tp[1], "offset": offset,
                         "timestamp": m.timestamp()[1],
                         "headers": [[h, v] for h, v in headers] if headers else []}
            if ts is not None:
                if isinstance(value, dict):
                    value["ts"] = ts
                else:
                    value = {"ts": ts, "value": value}
            if newest is not None:  # the partition's watermark: the newest event time emitted
                stamp = ts if ts is not None else m.timestamp()[1]
                if stamp > newest.get(tp, -math.inf) and (ts is not None or stamp >= 0):
                    newest[tp] = stamp
            keys.append(key)
            values.append(value)

        if aligner is None and end_time is None and event_time is None and not record:
            self._take_runs(messages, keys, values, nexts, take)
            messages = ()  # all taken
        for m in messages:
            error = m.error()
            tp = (m.topic(), m.partition())
            if error is not None:
                self._on_event(tp, error, m.offset())
                continue
            if tp not in self._fetched:
                self._first_fetch(tp)
            if aligner is None:
                take(tp, m)
                continue
            if tp not in offsets or m.offset() < max(offsets.next_offset(tp), self._buffered_upto.get(tp, 0)):
                continue  # not ours, or buffered already (a refetch)
            self._buffered_upto[tp] = m.offset() + 1
            aligner.add(tp, m.timestamp()[1], m)
        if aligner is not None:
            for tp, m in aligner.release(tp for tp in offsets.partitions()
                                         if not (self.end is not None and offsets.done(tp))):
                take(tp, m)
            self._hold_back(aligner)
        if keys or nexts:
            if self._untracked:
                self.emit_batch(keys, values)
            else:
                self._seq += 1
                if self._at_least_once:
                    self._acked.emitted(self._seq, nexts)
                    if not keys:  # only poison records: dead-lettered, nothing to wait for
                        self._settle(self._seq)
                    else:
                        self._pending[self._seq] = (keys, values)
                if keys:
                    self.emit_batch(keys, values, msg_id=self._seq)
        if self.end is not None and offsets.all_done():
            self.finish()

    def _take_runs(self, messages: list, keys: list, values: list, nexts: dict[TopicPartition, int],
                   take: Callable[[TopicPartition, Any], None]) -> None:
        """next_tuple's plain case (no alignment, no time bound or event_time, output="value"), a run of one
        partition's records at a time: the offsets move once per run (accept_run) and keys and values are
        decoded by list (a codec's decode_many), with no Python frame per record. Emits exactly what take()
        on each record would, in the same order."""
        message = kafka_client().Message
        error_of = message.error
        single_topic = len(self.topics) == 1 and not self.topics[0].startswith("^")
        by = message.partition if single_topic else (lambda m: (m.topic(), m.partition()))
        for _, group in groupby(messages, by):
            run = list(group)
            if not any(map(error_of, run)):
                self._take_run(run, keys, values, nexts, take)
                continue
            clean: list = []
            for m in run:  # events (a partition's end) among the records: in order, around them
                error = m.error()
                if error is None:
                    clean.append(m)
                    continue
                if clean:
                    self._take_run(clean, keys, values, nexts, take)
                    clean = []
                self._on_event((m.topic(), m.partition()), error, m.offset())
            if clean:
                self._take_run(clean, keys, values, nexts, take)

    def _take_run(self, run: list, keys: list, values: list, nexts: dict[TopicPartition, int],
                  take: Callable[[TopicPartition, Any], None]) -> None:
        """Records of one partition, none an event: emitted from the first one past `next`."""
        first = run[0]
        tp = (first.topic(), first.partition())
        if tp not in self._fetched:
            self._first_fetch(tp)
        message = kafka_client().Message
        at = list(map(message.offset, run))
        if not increasing(at):  # never from librdkafka (a partition comes in order); kept exact anyway
            for m in run:
                take(tp, m)
            return
        start, stop = self._offsets.accept_run(tp, at)
        if start == stop:
            return
        if start or stop < len(run):
            run, at = run[start:stop], at[start:stop]
        nexts[tp] = at[-1] + 1
        if self._watermarks is not None:  # watermarks by record timestamp: the run's newest, in C
            newest = self._watermarks.newest
            stamp = max(map(_SECOND, map(message.timestamp, run)))
            if stamp >= 0 and stamp > newest.get(tp, -math.inf):
                newest[tp] = stamp
        raw_keys = list(map(message.key, run))
        raw_values = list(map(message.value, run))
        try:
            run_keys = self._decode_run(self.key_codec, raw_keys)
            run_values = self._decode_run(self.value_codec, raw_values)
        except Exception:  # a poison record in the run: decode one by one, the rest go on
            self._decode_each(tp, at, raw_keys, raw_values, keys, values)
            return
        keys.extend(run_keys)
        values.extend(run_values)

    @staticmethod
    def _decode_run(codec: Any, raw: list) -> list:
        """decode() of each (None stays None), by the codec's decode_many when it has one."""
        many = getattr(codec, "decode_many", None)
        if None in raw or many is None:
            decode = codec.decode
            return [None if item is None else decode(item) for item in raw]
        return many(raw)

    def _decode_each(self, tp: TopicPartition, at: list[int], raw_keys: list, raw_values: list, keys: list,
                     values: list) -> None:
        """Records accepted already, decoded one at a time: one that does not decode goes to dead letters."""
        for offset, raw_key, raw_value in zip(at, raw_keys, raw_values):
            try:
                key = None if raw_key is None else self.key_codec.decode(raw_key)
                value = None if raw_value is None else self.value_codec.decode(raw_value)
            except Exception as exc:  # a poison record: to dead letters, the partition goes on
                self.dead_letter(raw_key, raw_value, f"{type(exc).__name__}: {exc} (topic {tp[0]!r} partition "
                                 f"{tp[1]} offset {offset})",
                                 {"topic": tp[0], "partition": tp[1], "offset": offset})
                continue
            keys.append(key)
            values.append(value)

    def _hold_back(self, aligner: TimeAligner) -> None:
        """Pause fetching a partition whose buffer grew long (it is far ahead); resume it once it drained."""
        kafka = kafka_client()
        long = 20 * self.max_records
        pause = [tp for tp in self._offsets.partitions() if tp not in self._paused and aligner.buffered(tp) > long]
        resume = [tp for tp in self._paused if aligner.buffered(tp) < self.max_records]
        if pause:
            self._consumer.pause([kafka.TopicPartition(*tp) for tp in pause])
            self._paused.update(pause)
        if resume:
            self._consumer.resume([kafka.TopicPartition(*tp) for tp in resume])
            self._paused.difference_update(resume)

    def _first_fetch(self, tp: TopicPartition) -> None:
        kafka = kafka_client()
        self._fetched.add(tp)
        _, high = self._consumer.get_watermark_offsets(kafka.TopicPartition(*tp), cached=True)
        if high >= 0:
            self._offsets.confirm_end(tp, high)

    def _on_event(self, tp: TopicPartition, error: Any, offset: int) -> None:
        kafka = kafka_client()
        if error.code() == kafka.KafkaError._PARTITION_EOF:
            if tp not in self._fetched:
                self._first_fetch(tp)
            if self.end == "end" and tp in self._offsets:
                self._offsets.confirm_end(tp, offset)
            if self._aligner is not None:
                self._aligner.at_end(tp)
            return
        log.warning("KafkaSource %r: %s[%s]: %s", self._unit, tp[0], tp[1], error)

    # --- tracking and checkpoints ----------------------------------------------------------

    def ack(self, msg_id: Any) -> None:
        self._settle(msg_id)

    def _settle(self, msg_id: Any) -> None:
        """at_least_once: a batch is done (acked or dropped); the group hears of the acked prefix at most once
        a second (a checkpoint's commit does this under exactly_once)."""
        self._pending.pop(msg_id, None)
        if not self._at_least_once:
            return
        self._acked.settled(msg_id)
        if self.commit_offsets and self._consumer is not None and self._now() >= self._next_commit:
            self._next_commit = self._now() + 1.0
            moved = self._acked.take()
            if moved:
                kafka = kafka_client()
                self._consumer.commit(offsets=[kafka.TopicPartition(t, p, o) for (t, p), o in moved.items()],
                                      asynchronous=True)

    def fail(self, msg_id: Any) -> None:
        if self._at_least_once:
            self._acked.failed(msg_id)  # not acked: a partition given up now hands it over to be read again
        batch = self._pending.get(msg_id)
        if batch is not None:
            self.emit_batch(batch[0], batch[1], msg_id=msg_id)

    def drop(self, msg_id: Any) -> None:
        self._settle(msg_id)

    @staticmethod
    def esault_merge_positions(positions: list[Any]) -> dict[str, Any]:
        """The rescale hook (Job.rescale of a spout): the union of the instances' offsets. Each instance of
        the new count restores from it and keeps the partitions it owns, at their checkpointed offsets."""
        return merge_positions(positions)

    def snapshot_position(self) -> dict[str, Any]:
        """{"next": [[topic, partition, next offset], ...], "end": [...]}: every record before them was emitted."""
        return self._offsets.snapshot()

    def restore_position(self, position: Any) -> None:
        """Seek each owned partition to its checkpointed next offset (a bounded read keeps its ends)."""
        kafka = kafka_client()
        try:
            nexts, ends = PartitionOffsets.read(position)
        except ValueError as exc:
            raise ConnectorError(f"KafkaSource {self._unit!r}: cannot restore from {exc}") from None
        restored = PartitionOffsets()
        for tp in self._offsets.partitions():
            start = nexts.get(tp)
            if start is None:  # a partition new since the checkpoint: read from its first record
                low, _ = self._consumer.get_watermark_offsets(kafka.TopicPartition(*tp), timeout=self.connect_timeout)
                start = max(low, 0)
            end = ends.get(tp, self._offsets.end(tp)) if self.end is not None else None
            restored.add(tp, start, end, end_known=tp in ends or end is None)
            self._acked.start(tp, start)
        self._offsets = restored
        self._pending.clear()
        if self._watermarks is not None:  # what it emitted before the restore is read again
            self._watermarks.clear()
        if self._aligner is not None:  # what waited is read again from the restored offsets
            self._aligner.clear()
            self._buffered_upto.clear()
            self._paused.clear()  # assign() below resumes every partition
        self._consumer.assign([kafka.TopicPartition(t, p, restored.next_offset((t, p)))
                               for t, p in restored.partitions()])

    def on_checkpoint_complete(self, epoch: int, position: Any) -> None:
        """Commit the checkpoint's offsets to the group (asynchronously): Kafka's tools then show the lag."""
        if not self.commit_offsets or self._consumer is None:
            return
        kafka = kafka_client()
        nexts, _ = PartitionOffsets.read(position)
        if nexts:
            if self._failpoint is not None:
                self._failpoint("committing", epoch)
            self._consumer.commit(offsets=[kafka.TopicPartition(t, p, o) for (t, p), o in nexts.items()],
                                  asynchronous=True)

    def watermark(self) -> float | None:
        """The instance's watermark (a tick): the minimum over its partitions not idle of the newest event time
        emitted from each; None before each emitted one. A partition that just went idle no longer holds the
        alignment (max_skew) back either."""
        if self._watermarks is None:
            return None
        offsets, aligner, bounded = self._offsets, self._aligner, self.end is not None
        upto = self._buffered_upto
        kafka = kafka_client()

        def waiting(tp: TopicPartition) -> int:
            """Records of a silent partition that wait in the alignment buffer or on the broker past its position
            (the high watermark of its last fetch): it is slow, not idle."""
            _, high = self._consumer.get_watermark_offsets(kafka.TopicPartition(*tp), cached=True)
            return (aligner.buffered(tp) if aligner else 0) + (offsets.lag(tp, high) if high >= 0 else 0)

        went_idle = self._watermarks.update(
            offsets.partitions(), lambda tp: max(offsets.next_offset(tp), upto.get(tp, 0)),
            lambda tp: bounded and offsets.done(tp), waiting)
        if aligner is not None:
            for tp in went_idle:
                aligner.at_end(tp)
        return self._watermarks.watermark

    def watermark_idle(self) -> bool:
        """Every partition it reads is idle (idle_timeout), or it reads none."""
        return self._watermarks is not None and self._watermarks.idle

    def waiting_for(self) -> str | None:
        """'broker ADDRESS' from a metadata request the brokers did not answer until one they answer.

        A bounded read that reached its ends gets no next_tuple() call any more, yet the job still needs the
        brokers (its checkpoints' group commits, the sinks' transactions): the checks go on from here, on the
        same schedule, so a broker lost after the input was read shows as a wait, and a wait shown before
        clears once the brokers answer (else it stayed in the status, and the log never said so)."""
        if self.end is not None and self._offsets.all_done():
            self._check_brokers()
        return f"broker {self.bootstrap}" if self.waiting_for_broker else None

    def backlog(self) -> int | None:
        """Records in the owned partitions not emitted yet (the broker's high watermarks as last fetched).

        Called each tick: the same lag, per partition, is exported as esault_kafka_consumer_lag."""
        if self._consumer is None:
            return None
        kafka = kafka_client()
        lags: dict[TopicPartition, int] = {}
        for tp in self._offsets.partitions():
            _, high = self._consumer.get_watermark_offsets(kafka.TopicPartition(*tp), cached=True)
            if high >= 0:
                lags[tp] = self._offsets.lag(tp, high)
        self._lag_series = set_kafka_lag(self._topology, self._unit, lags, self._lag_series)
        return sum(lags.values())

    def partition_status(self) -> list[PartitionRow] | None:
        """Per partition read: (topic, partition, next offset, high watermark as last fetched or None before the
        first fetch, lag as backlog() counts it, idle by idle_timeout: only with watermarks on)."""
        if self._consumer is None:
            return None
        kafka = kafka_client()
        offsets, watermarks = self._offsets, self._watermarks
        rows: list[PartitionRow] = []
        for tp in offsets.partitions():
            _, high = self._consumer.get_watermark_offsets(kafka.TopicPartition(*tp), cached=True)
            known = high >= 0
            rows.append((tp[0], tp[1], offsets.next_offset(tp), high if known else None,
                         offsets.lag(tp, high) if known else None,
                         watermarks is not None and watermarks.is_idle(tp)))
        return rows

    def _forget_lag(self) -> None:
        """This instance's partitions leave with it (a stop, a rollback): so do their lag series."""
        forget_kafka_lag(self._topology, self._unit, self._lag_series)
        self._lag_series = set()

    # --- live rescale (at_least_once) ----------------------------------------------------

    def release_share(self, instances: int) -> None:
        """The source is to run `instances` instances: stop reading the partitions this instance does not own
        at that count (all of them for an instance that retires). Their records in flight are still acked or
        failed; released_position() says where each one is handed over. Reading the others goes on."""
        kafka = kafka_client()
        if self._failpoint is not None:
            self._failpoint("releasing", instances)
        instance = self._instance[0]
        reading = self._offsets.partitions()
        kept = set(owned(reading, instance, instances)) if instance < instances else set()
        gone = [tp for tp in reading if tp not in kept]
        self._moving = True
        self._kept = kept
        if gone and self._consumer is not None:
            self._consumer.incremental_unassign([kafka.TopicPartition(*tp) for tp in gone])
        for tp in gone:
            _, end = self._offsets.remove(tp)
            self._releasing[tp] = end
            self._buffered_upto.pop(tp, None)  # records fetched and not emitted: the taker reads them
            self._paused.discard(tp)
            self._fetched.discard(tp)
            if self._aligner is not None:
                self._aligner.drop(tp)
            if self._watermarks is not None:
                self._watermarks.forget(tp)
        self._lag_series = set_kafka_lag(self._topology, self._unit, {}, self._lag_series)
        log.info("KafkaSource %r instance %d: rescale to %d instances: stopped reading %s", self._unit, instance,
                 instances, ", ".join(f"{t}[{p}]" for t, p in gone) or "no partition")

    def released_position(self, final: bool) -> dict[str, Any] | None:
        """What release_share() gave up, once none of its records is in flight (acked, or failed: read again
        by the taker), or now when `final` (message_timeout passed): {"next": [[topic, partition, offset]],
        "end": [...]} with each partition's acked watermark, the lowest offset not known to be acked (records
        at or past it may be read twice; none before it is unacked). None: still waiting."""
        acked = self._acked
        if not final and any(acked.in_flight(tp) for tp in self._releasing):
            return None
        if self._failpoint is not None:
            self._failpoint("released", 0)
        marks = acked.release(list(self._releasing))
        ends, self._releasing = self._releasing, {}
        return {"next": [[t, p, o] for (t, p), o in sorted(marks.items()) if o is not None],
                "end": [[t, p, e] for (t, p), e in sorted(ends.items()) if e is not None]}

    def take_share(self, instances: int, position: Any) -> None:
        """The source runs `instances` instances from now on: read the partitions this instance owns at that
        count and did not keep through release_share() (a fresh instance: all it owns), each from its offset in
        `position` (merged released_position()s), one missing there (its giver died) from the group's committed
        offset, else where `start` begins."""
        kafka = kafka_client()
        instance = self._instance[0]
        try:
            nexts, ends = PartitionOffsets.read(position)
        except ValueError as exc:
            raise ConnectorError(f"KafkaSource {self._unit!r}: cannot take partitions from {exc}") from None
        mine = owned(self._discover(kafka), instance, instances)
        kept = self._kept or set()
        taken = [tp for tp in mine if tp not in kept]
        fresh = self._kept is None
        self._instance = (instance, instances)
        self._moving, self._kept = False, None
        lost = [tp for tp in taken if tp not in nexts]
        fallback = self._fallback_offsets(kafka, lost) if lost else {}
        assigned = []
        for tp in taken:
            if tp in nexts:
                start, end = nexts[tp], ends.get(tp) if self.end is not None else None
            else:
                start, end = fallback[tp]
            self._offsets.add(tp, start, end, end_known=end is None or tp in ends)
            self._acked.start(tp, start)
            self._fetched.discard(tp)
            self._buffered_upto.pop(tp, None)
            if self._aligner is not None:
                self._aligner.drop(tp)
            assigned.append(kafka.TopicPartition(tp[0], tp[1], start))
        if fresh:  # open() assigned its partitions where `start` begins: the handed offsets replace them
            self._consumer.assign([kafka.TopicPartition(t, p, self._offsets.next_offset((t, p)))
                                   for t, p in self._offsets.partitions()])
            self._paused.clear()  # assign() resumes every partition
        elif assigned:
            self._consumer.incremental_assign(assigned)
        log.info("KafkaSource %r instance %d/%d takes %s", self._unit, instance, instances,
                 ", ".join(f"{t}[{p}]@{self._offsets.next_offset((t, p))}" for t, p in taken) or "no partition")

    def _fallback_offsets(self, kafka: Any, tps: list[TopicPartition]) -> dict[TopicPartition, tuple[int, int | None]]:
        """(start, end) of partitions handed over by no one (the giver died mid-move): the group's committed
        offset (at_least_once commits acked watermarks: at or before anything unacked), else `start`'s."""
        committed = {(tp.topic, tp.partition): tp.offset
                     for tp in self._consumer.committed([kafka.TopicPartition(*tp) for tp in tps],
                                                        timeout=self.connect_timeout)}
        starts = PartitionOffsets()
        self._start_offsets(kafka, tps, into=starts)
        out: dict[TopicPartition, tuple[int, int | None]] = {}
        for tp in tps:
            start = committed.get(tp, -1)
            out[tp] = (start if start >= 0 else starts.next_offset(tp), starts.end(tp))
        return out

    # --- end -------------------------------------------------------------------------------

    def close(self) -> None:
        if self._consumer is not None:
            moved = self._acked.take() if self._at_least_once and self.commit_offsets else {}
            if moved:
                kafka = kafka_client()
                try:
                    self._consumer.commit(offsets=[kafka.TopicPartition(t, p, o) for (t, p), o in moved.items()],
                                          asynchronous=False)
                except kafka.KafkaException as exc:
                    log.warning("KafkaSource %r: committing offsets at close failed: %s", self._unit, exc)
            self._consumer.close()
            self._consumer = None
        self._forget_lag()

    def abandon(self) -> None:
        """A rollback: the restored instance seeks to the checkpoint; nothing is committed from here."""
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
        self._forget_lag()
