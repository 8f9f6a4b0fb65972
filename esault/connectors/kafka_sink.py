"""KafkaSink: a terminal bolt producing its tuples to Kafka, exactly once under exactly_once.

    b.set_bolt("out", KafkaSink, params={"topic": "counts", "bootstrap": "localhost:9092",
                                          "key": "utf-8", "value": "json"}).shuffle_grouping("count")

exactly_once (default): records are staged at each checkpoint barrier and
produced in one transaction per epoch once the checkpoint completes
(esault.connectors.kafka_transactions), so a read_committed consumer sees each
once across kill -9 of any process, rollbacks and restarts. at_least_once: an
idempotent producer; a tuple is acked once the broker has its record. none:
produced, not tracked. docs/CONNECTORS.md.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

from esault.connectors.codecs import resolve_codec
from esault.connectors.kafka_source import kafka_client
from esault.connectors.kafka_transactions import TransactionalPublisher, close_client
from esault.connectors.failpoints import SINK_FAILPOINT_ENV, failpoint_from_env
from esault.connectors.output_ledger import OutputLedger
from esault.connectors.settings import SINK_OWNED, check_bootstrap, check_config, check_positive
from esault.connectors.staging import EpochStage
from esault.dsl.bolt import Bolt
from esault.dsl.context import TopologyContext
from esault.dsl.tuple import Tuple
from esault.errors import ConnectorError, OutputMissing, SinkError

log = logging.getLogger("esault.connectors.kafka")


@dataclass(frozen=True, slots=True)
class KafkaRecord:
    """One record to produce: what KafkaSink.to_record() returns. topic None: the sink's `topic`."""

    value: Any
    key: Any = None
    topic: str | None = None
    headers: list[tuple[str, bytes]] | dict[str, bytes] | None = None
    partition: int | None = None
    timestamp: int | None = None
    """Epoch milliseconds; None: the producer's clock."""


class KafkaSink(Bolt):
    """Produces a record per tuple: (tup.key, tup.value) by default; override to_record() for topic, headers.

    params:
      bootstrap: the brokers. topic: the topic of every record (to_record() may name another per record).
      key, value: codec names ("utf-8" and "json" by default; "bytes", "msgpack", or "package.module:Codec").
      config: librdkafka producer settings passed through (SASL, TLS, batching).
      transactional_id: prefix of the instances' transactional ids (default "esault.<topology>.<unit>").
      marker_topic: the topic whose partition 0 carries the published-epoch marker (default: `topic`).
      connect_timeout: seconds to reach the brokers and start transactions at open (default 10).
      close_timeout: seconds close() waits for queued publishes or deliveries (default 30).
    """

    def __init__(self, bootstrap: str, topic: str | None = None, key: str = "utf-8", value: str = "json",
                 config: dict[str, Any] | None = None, transactional_id: str | None = None,
                 marker_topic: str | None = None, connect_timeout: float = 10.0, close_timeout: float = 30.0) -> None:
        what = "KafkaSink"
        self.bootstrap = check_bootstrap(what, bootstrap)
        if topic is not None and (not isinstance(topic, str) or not topic):
            raise ConnectorError(f"{what}: params 'topic' is a topic name, got {topic!r}")
        self.topic = topic
        self.key_codec = resolve_codec(key, f"{what}: params 'key'")
        self.value_codec = resolve_codec(value, f"{what}: params 'value'")
        self.config = check_config(what, config, SINK_OWNED)
        self.transactional_id = transactional_id
        self.marker_topic = marker_topic or topic
        if self.marker_topic is None:
            raise ConnectorError(f"{what}: with no params 'topic' (a topic per record from to_record()), name "
                                 "params 'marker_topic': an existing topic whose partition 0 keeps the "
                                 "published-epoch marker")
        self.connect_timeout = check_positive(what, "connect_timeout", connect_timeout)
        self.close_timeout = check_positive(what, "close_timeout", close_timeout)
        self._publisher: TransactionalPublisher | None = None
        self._ledger: OutputLedger | None = None  # exactly_once: what the checkpoints sent, for the end-of-run audit
        self._resumed = True  # exactly_once, restored: resume() was called
        self._producer: Any = None
        self._buffer: list[list[Any]] = []
        self._tracked = False
        self._poller: threading.Thread | None = None
        self._closing = threading.Event()
        self._unit = ""

    @classmethod
    def esault_check_params(cls, name: str, params: dict[str, Any]) -> None:
        try:
            cls(**params)
        except ConnectorError as exc:
            raise ConnectorError(f"bolt {name!r}: {exc}") from None

    def to_record(self, tup: Tuple) -> KafkaRecord:
        """The record for one tuple; runs on the SPU's thread. An exception fails the tuple like any user error."""
        return KafkaRecord(value=tup.value, key=tup.key)

    # --- lifecycle -------------------------------------------------------------------------

    def open(self, context: TopologyContext) -> None:
        if context.per_key:
            raise ConnectorError(f"KafkaSink {context.unit!r} is wired with key_grouping, which starts one sink per "
                                 f"key; wire it with shuffle_grouping or global_grouping, e.g. "
                                 f"set_bolt({context.unit!r}, KafkaSink, ...).shuffle_grouping('<source>')")
        kafka = kafka_client()
        self._unit = context.unit
        settings = {"bootstrap.servers": self.bootstrap, "logger": log,
                    "socket.connection.setup.timeout.ms": int(self.connect_timeout * 1000), **self.config}
        self._check_topic(kafka, settings)
        if context.guarantee == "exactly_once":
            prefix = self.transactional_id or f"esault.{context.topology}.{context.unit}"
            stage = EpochStage(context.durable_location("kafka_sink", f"{context.unit}.i{context.instance}"))
            self._publisher = TransactionalPublisher(kafka, settings, f"{prefix}.i{context.instance}",
                                                     self.marker_topic, stage, context.restored_epoch,
                                                     self.connect_timeout, failpoint=_failpoint())
            self._ledger = OutputLedger(context.restored_epoch)
            self._resumed = context.restored_epoch is None
            return
        self._tracked = context.guarantee == "at_least_once"
        self._producer = kafka.Producer({**settings, "enable.idempotence": self._tracked})
        self._poller = threading.Thread(target=self._poll, name=f"kafka-sink-{context.unit}-{context.instance}",
                                        daemon=True)
        self._poller.start()

    def _check_topic(self, kafka: Any, settings: dict[str, Any]) -> None:
        """The brokers answer and the topic exists: or fail open() within connect_timeout, naming which."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({k: v for k, v in settings.items() if k != "logger"})
        try:
            topics = admin.list_topics(timeout=self.connect_timeout).topics
        except kafka.KafkaException as exc:
            raise ConnectorError(f"KafkaSink {self._unit!r}: no Kafka broker answered at {self.bootstrap!r} within "
                                 f"{self.connect_timeout}s ({exc.args[0] if exc.args else exc}); check the address "
                                 "and that the broker runs, or raise params 'connect_timeout'") from None
        for topic in dict.fromkeys(t for t in (self.topic, self.marker_topic) if t):
            if topic not in topics:
                raise ConnectorError(f"KafkaSink {self._unit!r}: topic {topic!r} does not exist at "
                                     f"{self.bootstrap!r}; create it first, or fix the name")

    def _poll(self) -> None:
        """Serves delivery callbacks (at_least_once acks) until close()."""
        while not self._closing.is_set():
            self._producer.poll(0.1)

    def process(self, tup: Tuple) -> None:
        record = self.to_record(tup)
        if not isinstance(record, KafkaRecord):
            raise ConnectorError(f"KafkaSink {self._unit!r}: to_record() returns a KafkaRecord, got "
                                 f"{type(record).__name__}")
        topic = record.topic or self.topic
        if topic is None:
            raise ConnectorError(f"KafkaSink {self._unit!r}: the record has no topic and the sink no params "
                                 "'topic'; return KafkaRecord(..., topic='...') from to_record()")
        key = None if record.key is None else self.key_codec.encode(record.key)
        value = None if record.value is None else self.value_codec.encode(record.value)
        headers = list(record.headers.items()) if isinstance(record.headers, dict) else record.headers
        partition = -1 if record.partition is None else record.partition
        if self._publisher is not None:
            self._buffer.append([topic, partition, key, value, [list(h) for h in headers] if headers else None,
                                 record.timestamp or 0])
            return
        extra: dict[str, Any] = {}
        if partition >= 0:
            extra["partition"] = partition
        if headers:
            extra["headers"] = headers
        if record.timestamp:
            extra["timestamp"] = record.timestamp
        if self._tracked:
            anchor = self.defer()
            extra["on_delivery"] = lambda err, _msg: anchor.ack() if err is None else anchor.fail(f"Kafka: {err}")
        while True:
            try:
                self._producer.produce(topic, value=value, key=key, **extra)
                return
            except BufferError:  # the local queue is full: the poller drains it as the broker answers
                self._closing.wait(0.01)

    # --- checkpoints -----------------------------------------------------------------------

    def on_checkpoint(self, epoch: int) -> Any:
        if self._publisher is None:
            return None
        self._resume()
        records, self._buffer = self._buffer, []
        self._ledger.barrier(epoch, len(records))
        return self._publisher.stage_epoch(epoch, records)

    def on_checkpoint_complete(self, epoch: int) -> None:
        if self._publisher is not None:
            self._ledger.complete(epoch, self._publisher.marker)
            self._publisher.publish_through(epoch)

    def snapshot_state(self) -> dict[str, Any]:
        """Its records are its staged epochs on disk and its marker in Kafka; the state holds only the counts the
        end-of-run audit checks the committed transactions against (OutputLedger)."""
        if self._publisher is None:
            return {}
        return self._ledger.state(len(self._buffer), self._publisher.marker)

    def restore_state(self, state: dict[str, Any]) -> None:
        if self._ledger is not None:
            self._ledger.restore(state)
            self._resume()

    def _resume(self) -> None:
        """A restored instance publishes what its checkpoint's completion left to it once the ledger knows what
        was staged (restore_state() comes after open(); without a state, at the first barrier or the close)."""
        if not self._resumed and self._publisher is not None:
            self._resumed = True
            self._publisher.resume(self._ledger.restored_staged)

    def waiting_for(self) -> str | None:
        """exactly_once: the broker, while a transaction's publish or commit waits for it (Job.status(),
        `esault status`, esault_bolt_waiting_since_seconds)."""
        publisher = self._publisher
        return publisher.waiting_for() if publisher is not None else None

    def wait_published(self, timeout: float) -> bool:
        """exactly_once: True once every publish asked for so far has run (for tests)."""
        return self._publisher is not None and self._publisher.wait_idle(timeout)

    def abandon(self) -> None:
        if self._publisher is not None:
            self._buffer = []
            self._publisher.abandon()
            self._publisher = None
        else:
            self._stop_producer(0.0)

    def close(self) -> None:
        """exactly_once: records after the final checkpoint cannot be produced exactly once: they are dropped
        and close() raises SinkError once the rest is done (the run fails: its output is missing them). Then the
        audit: the committed transactions must hold every record the completed checkpoints sent this instance,
        or close() raises OutputMissing with the numbers (the run exits 2, never 0)."""
        if self._publisher is not None:
            self._resume()
            dropped, self._buffer = len(self._buffer), []
            publisher = self._publisher
            try:
                publisher.close(self.close_timeout)
            finally:
                self._publisher = None
            missing = self._audit(publisher)
            if dropped:
                raise SinkError.after_final_checkpoint(f"KafkaSink {self._unit!r}", dropped, "record", "produced")
            if missing is not None:
                raise missing
            return
        self._stop_producer(self.close_timeout)

    def _audit(self, publisher: TransactionalPublisher) -> OutputMissing | None:
        missing = self._ledger.missing(publisher.opened_marker, publisher.records_published)
        if not missing:
            return None
        ledger = self._ledger
        accepted = ledger.accepted
        through = ledger.last_barrier if ledger.last_barrier is not None else ledger.restored_epoch
        head = (f"KafkaSink {self._unit!r} (transactional id {publisher.transactional_id!r}): the checkpoints up "
                f"to epoch {through} sent it {accepted} record(s) and its committed transactions hold "
                f"{accepted - missing}: {abs(missing)} record(s) {'missing' if missing > 0 else 'too many'}. ")
        if publisher.lost is not None:
            message = head + publisher.lost
        elif publisher.holes.hole is not None:
            first, gone = publisher.holes.hole
            message = head + (
                f"{gone} staged record(s) from epoch {first} on are gone from {publisher.stage.directory} (lost "
                "with its disk or store) and cannot be made again: the source's replay starts after them. The sink "
                "publishes nothing past them, so the topic never looks complete without them; a rerun stops at "
                "the same place. To go on, run the job from scratch (no checkpoint) into an empty topic")
        else:
            message = head + (
                f"The log above says why (a publish that failed, a broker that did not answer within "
                f"close_timeout={self.close_timeout}s, or staged epochs lost with the disk under "
                f"{publisher.stage.directory}); run the same command again: it resumes from the last checkpoint "
                "and publishes the staged epochs still there")
        log.error("%s", message)
        return OutputMissing(message, abs(missing))

    def _stop_producer(self, timeout: float) -> None:
        if self._producer is None:
            return
        left = self._producer.flush(timeout) if timeout > 0 else len(self._producer)
        self._closing.set()
        if self._poller is not None:
            self._poller.join(5)
        if left:
            log.error("KafkaSink %r: %d records not delivered within %ss at close", self._unit, left, timeout)
        producer, self._producer = self._producer, None
        close_client(producer)


def _failpoint() -> Any:
    """ESAULT_KAFKA_SINK_FAILPOINT (esault.connectors.failpoints): kill -9 at a publish step (tests only)."""
    return failpoint_from_env(SINK_FAILPOINT_ENV, log)
