"""KafkaSink's two-phase commit per checkpoint epoch: stage at the barrier, one transaction at completion.

The protocol is the Spark sink's (docs/SPARK_SINK.md, "Exactly-once"), with a
Kafka transaction as the publish step:

1. At barrier e the epoch's records are staged to a file (EpochStage), durably,
   on the stage thread; the checkpoint waits for that Future.
2. When checkpoint e completes, every staged epoch <= e is produced, in epoch
   order, each in one transaction that also commits offset e of partition 0 of
   the marker topic for the writer's own consumer group (TxnOffsetCommit). So
   the marker says, atomically with the records, which epoch was published
   last; then the stage file is deleted.
3. On open (a restart, a relaunch after a rollback) init_transactions() fences
   any older producer with the same transactional.id and aborts its open
   transaction; the marker M is read back. Staged epochs <= M are deleted
   (published already), later than the restored epoch deleted (the replay
   makes them again); once the restored state says what was staged, resume()
   publishes the epochs in (M, restored epoch] (their checkpoint completed).
4. Never past a hole: before an epoch is published, the records staged for
   every epoch after the marker up to it (this instance's own stage writes, and
   what the restored checkpoint says its predecessors staged) must all be in its
   file. A stage file lost under the sink is not skipped: the marker would then
   claim it published, and after a crash nothing could tell the lost records
   from published ones. The sink stops publishing there; its end-of-run count
   (OutputLedger) fails the run with the records missing.

Records are produced only after their checkpoint completed, each epoch in one
transaction committed at once: nothing is aborted unless the commit itself is
cut, so a broker that shows aborted records to read_committed readers (Tansu)
still shows each record once in every failure but that one.
"""

from __future__ import annotations

import logging
import threading
import time
import warnings
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any, Callable

from esault.connectors.broker_wait import BrokerWait
from esault.connectors.stage_holes import StageHoles
from esault.connectors.staging import EpochStage
from esault.connectors.transaction_journal import journal_from_env
from esault.errors import ConnectorError, TransactionLost

log = logging.getLogger("esault.connectors.kafka")

ABANDON_WAIT = 30.0
"""Seconds a rollback waits for a publish that is running (a broker that does not answer): below the SPU's stop
timeout (45 s), past which its worker would exit as stuck. Past it the publish goes on alone on its thread until
the broker answers or the next instance's init_transactions() fences it."""

COMMIT_PATIENCE = 120.0
"""Seconds a publish keeps retrying a transaction step that failed with a retriable error (a broker that is
slow or stopped answering) on the same producer, before it gives the transaction up (aborted by the next
producer's init_transactions(): records a broker such as Tansu still shows to read_committed readers)."""

LOST_AFTER = 2
"""Timed-out attempts in a row of one transaction step, each begun while the broker answered a metadata request,
after which the transaction counts as lost by the broker (Tansu, its transaction state gone: every commit times
out, 10 s each, while the broker answers everything else). A broker that is away answers no metadata either, so
an outage never counts; the first attempt is never counted (the broker may have gone during it)."""
PROBE_TIMEOUT = 5.0
"""Seconds the metadata request before a retry may take (capped at the publisher's timeout)."""

PRODUCER_DEFAULTS = {"metadata.recovery.strategy": "none"}
"""librdkafka settings of the transactional producer that params 'config' may override. No re-bootstrap: once every
broker it knew was gone (a single broker killed and restarted), librdkafka >= 2.10 re-bootstraps and decommissions
the brokers it knew, while its coordinator cache still names the old one as the group coordinator; the next
transaction's send_offsets_to_transaction() then waits for that broker's state to change, which never comes, past
its own timeout (librdkafka issues #5511 and #5456; measured with 2.16: still blocked 60 s after the broker was
back, the transaction left open with its records in it, and the publishes behind it stuck until close). The
brokers it knew reconnect on their own once they answer again."""

StagedRecord = list  # [topic, partition (-1: the producer picks), key, value, headers, timestamp (0: now)]


class TransactionalPublisher:
    """Stage and publish epochs of one sink instance. Stage writes run on one thread and publishes on another,
    each in call order: a publish that waits for a broker that went away must not hold the next barrier's stage
    write (its checkpoint would time out, and roll the job back, for a broker outage the publish rides out)."""

    def __init__(self, kafka: Any, producer_settings: dict[str, Any], transactional_id: str, marker_topic: str,
                 stage: EpochStage, restored_epoch: int | None, timeout: float,
                 failpoint: Callable[[str, int], None] | None = None, patience: float = COMMIT_PATIENCE) -> None:
        self.kafka = kafka
        self.transactional_id = transactional_id
        self.marker_topic = marker_topic
        self.stage = stage
        self.timeout = timeout
        self.patience = patience
        self._failpoint = failpoint or (lambda step, epoch: None)
        self._carry: list[StagedRecord] = []  # records of an epoch whose staging failed: staged with the next
        self._lock = threading.Lock()
        self._abandoned = False
        self.lost: str | None = None
        """Why this instance's transaction is gone from the broker (TransactionLost): nothing is published from
        then on, and the next barrier's stage fails its checkpoint, and the job, with this text."""
        self.published: list[int] = []  # epochs this instance committed to Kafka (for tests and logs)
        self.records_published = 0  # the records of those epochs' transactions (the end-of-run audit)
        bootstrap = producer_settings.get("bootstrap.servers")
        self.restored_epoch = restored_epoch
        self.holes = StageHoles()  # the records owed per staged epoch: never publish past a lost file
        self.wait = BrokerWait(str(bootstrap))  # a publish held by the broker, for the sink's waiting_for()
        self._producer_settings = {**PRODUCER_DEFAULTS, **producer_settings, "transactional.id": transactional_id}
        self._journal = journal_from_env(transactional_id)  # diagnostics (tests): offsets per transaction
        self.producer: Any = None
        try:
            self.producer = self._new_producer()
        except kafka.KafkaException as exc:
            raise ConnectorError(
                f"KafkaSink: the broker at {bootstrap!r} did not start a transactional producer "
                f"{transactional_id!r} ({exc.args[0] if exc.args else exc}); exactly_once needs transactions: "
                "check the address and that the broker supports them, or run with guarantee='at_least_once' "
                "(an idempotent producer)") from None
        secure = {k: v for k, v in producer_settings.items() if k.startswith(("security.", "sasl.", "ssl."))}
        self._group = kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": transactional_id,
                                      "enable.auto.commit": False, **secure})
        self.marker = self._read_marker()
        if restored_epoch is None and self.marker:
            self._write_marker(0)  # a fresh start numbers epochs from 1 again
            self.marker = 0
        self.opened_marker = self.marker
        """The marker as this instance found it: the staged epochs after it, up to the restored one, are its own
        to publish (OutputLedger)."""
        self._stager = ThreadPoolExecutor(1, thread_name_prefix=f"kafka-stage-{transactional_id}")
        self._thread = ThreadPoolExecutor(1, thread_name_prefix=f"kafka-sink-{transactional_id}")  # publishes
        self.stage.delete_leftovers()
        for epoch in self.stage.epochs():
            if restored_epoch is None or epoch > restored_epoch or epoch <= self.marker:
                self.stage.delete(epoch)

    def resume(self, staged: dict[int, int] | None = None) -> Future:
        """A restored instance, once its state is in: publish the staged epochs its restored checkpoint's
        completion left to it. `staged`: epoch -> records the checkpoint says were staged (OutputLedger), so a
        stage file lost before this instance opened is found; None: not known (an older esault's checkpoint)."""
        if self.restored_epoch is None:
            raise ValueError("resume() is for a publisher opened with a restored epoch")
        return self._thread.submit(self._resume, dict(staged or {}))

    def _resume(self, staged: dict[int, int]) -> None:
        with self._lock:
            self.holes.restored(staged, self.marker, self.restored_epoch)
        self._publish_through(self.restored_epoch)

    def _new_producer(self) -> Any:
        """A producer of this writer's transactional.id: init_transactions() fences every older one and aborts
        the transaction one left open."""
        producer = self.kafka.Producer(self._producer_settings)
        try:
            producer.init_transactions(self.timeout)
        except BaseException:
            close_client(producer)
            raise
        if self._journal is not None:
            self._journal.write(state="open")
        return producer

    def _read_marker(self) -> int:
        tp = self.kafka.TopicPartition(self.marker_topic, 0)
        committed = self._group.committed([tp], timeout=self.timeout)[0]
        return max(committed.offset, 0)

    def _write_marker(self, epoch: int) -> None:
        tp = self.kafka.TopicPartition(self.marker_topic, 0, epoch)
        self._group.commit(offsets=[tp], asynchronous=False)

    # --- the two phases ------------------------------------------------------------------

    def stage_epoch(self, epoch: int, records: list[StagedRecord]) -> Future:
        """Phase one: the Future completes once epoch `epoch`'s records are durable (or fails with why)."""
        return self._stager.submit(self._stage, epoch, records)

    def _stage(self, epoch: int, records: list[StagedRecord]) -> None:
        if self.lost is not None:  # the job must fail: a stage cannot make a lost transaction good
            raise TransactionLost(self.lost)
        with self._lock:
            records, self._carry = self._carry + records, []
        if not records or self._abandoned:
            return
        try:
            self.stage.write(epoch, records)
        except BaseException:
            with self._lock:
                self._carry = records + self._carry
            raise
        with self._lock:
            self.holes.wrote(epoch, len(records))
        self._failpoint("staged", epoch)

    def publish_through(self, epoch: int) -> Future:
        """Phase two: checkpoint `epoch` completed, so every staged epoch <= it goes to Kafka, oldest first."""
        return self._thread.submit(self._publish_through, epoch)

    def _publish_through(self, epoch: int) -> None:
        for staged in self.stage.epochs():
            if staged > epoch or self._abandoned or self.holes.hole is not None or self.lost is not None:
                return
            if staged <= self.marker:
                self.stage.delete(staged)
                continue
            try:
                records = self.stage.read(staged)
                if self._hole_before(staged, len(records)):
                    return
                self.wait.begin(f"publishing epoch {staged}")
                try:
                    self._publish(staged, records)
                finally:
                    self.wait.end()
            except TransactionLost as exc:  # nothing more is published: the next barrier fails the job
                self.lost = str(exc)
                log.error("%s", exc)
                return
            except Exception as exc:  # noqa: BLE001 - kept staged: the next completion or open retries
                log.error("KafkaSink %r: publishing epoch %d failed (%s); it stays staged and is retried at the "
                          "next completed checkpoint", self.transactional_id, staged, exc)
                return

    def _hole_before(self, epoch: int, records: int) -> bool:
        """Would publishing `epoch` (its file holding `records`) pass a lost stage file (StageHoles)?"""
        with self._lock:
            if self.holes.may_publish(epoch, records, self.marker):
                return False
            first, gone = self.holes.hole
        log.error("KafkaSink %r: epochs %d..%d staged %d record(s) and the file of epoch %d holds %d: a stage file "
                  "is gone from %s (lost with its disk or store). Nothing is published past it (the marker would "
                  "claim it was), and the run fails with the records missing", self.transactional_id,
                  first, epoch, gone + records, epoch, records, self.stage.directory)
        return True

    def _publish(self, epoch: int, records: list[StagedRecord]) -> None:
        kafka = self.kafka
        if self.producer is None:
            self.producer = self._new_producer()
        producer = self.producer
        producer.begin_transaction()
        spans: dict[tuple[str, int], list[int]] = {}
        try:
            for topic, partition, key, value, headers, timestamp in records:
                extra: dict[str, Any] = {}
                if self._journal is not None:
                    extra["on_delivery"] = lambda err, msg: _note_offset(spans, err, msg)
                if partition >= 0:
                    extra["partition"] = partition
                if headers:
                    extra["headers"] = [(h, v) for h, v in headers]
                if timestamp:
                    extra["timestamp"] = timestamp
                while True:
                    try:
                        producer.produce(topic, value=value, key=key, **extra)
                        break
                    except BufferError:  # the local queue is full: let deliveries drain it
                        producer.poll(0.05)
            self._failpoint("produced", epoch)
            if self._journal is not None:
                self._journal_produced(producer, epoch, spans, len(records))
            marker = [kafka.TopicPartition(self.marker_topic, 0, epoch)]
            deadline = time.monotonic() + self.patience
            self._retrying(lambda: producer.send_offsets_to_transaction(
                marker, self._group.consumer_group_metadata(), self.timeout), "sending the marker of", epoch, deadline)
            self._failpoint("committing", epoch)
            self._retrying(lambda: producer.commit_transaction(self.timeout), "committing", epoch, deadline)
        except self.kafka.KafkaException as exc:
            self.producer = None
            error = exc.args[0] if exc.args else None
            if _fenced(self.kafka, error) and not self._abandoned:  # at any step: an abandoned one only logs it
                raise self._lost(epoch, f"its transaction was refused: {error}. {LOST_HINT}") from None
            raise
        except BaseException:
            # Whatever state the transaction is in (a commit timed out, the producer was given up), the next
            # attempt starts from a new producer, whose init_transactions() aborts it.
            self.producer = None
            raise
        self.marker = epoch
        with self._lock:
            self.holes.published(epoch)
        self.published.append(epoch)
        self.records_published += len(records)
        if self._journal is not None:
            self._journal.write(state="committed", epoch=epoch)
        self._failpoint("committed", epoch)
        self.stage.delete(epoch)

    def _retrying(self, step: Callable[[], None], what: str, epoch: int, deadline: float) -> None:
        """A step of the open transaction. A retriable error (a timeout: the broker slow or away) is retried on
        the same producer until `deadline`, as librdkafka documents, so the transaction is committed once the
        broker answers rather than aborted (giving it up would leave aborted records, which Tansu shows to
        read_committed readers, and the epoch published again). Raises TransactionLost when the broker no longer
        knows the transaction: LOST_AFTER timeouts in a row while it answered."""
        answered_timeouts = 0
        probe = False
        while True:
            answering = probe and self._broker_answers()
            try:
                step()
                return
            except self.kafka.KafkaException as exc:
                error = exc.args[0] if exc.args else None
                if not getattr(error, "retriable", lambda: False)() or time.monotonic() >= deadline:
                    raise
                answered_timeouts = answered_timeouts + 1 if answering else 0
                if answered_timeouts >= LOST_AFTER:
                    raise self._lost(epoch, f"{what} epoch {epoch} timed out {answered_timeouts + 1} times in a "
                                            f"row ({error}) while the broker answered every metadata request (Tansu "
                                            f"answers a lost or fenced transaction with silence). {LOST_HINT}")
                probe = True
                self.wait.retrying()
                log.warning("KafkaSink %r: %s epoch %d waits for the broker (%s); retrying the same transaction",
                            self.transactional_id, what, epoch, error)

    def _broker_answers(self) -> bool:
        """Whether the broker answers a metadata request now (it is up: a step timing out is not an outage)."""
        producer = self.producer
        if producer is None:
            return False
        try:
            producer.list_topics(self.marker_topic, timeout=min(PROBE_TIMEOUT, self.timeout))
            return True
        except self.kafka.KafkaException:
            return False

    def _lost(self, epoch: int, why: str) -> TransactionLost:
        return TransactionLost(
            f"KafkaSink transactional id {self.transactional_id!r}: the broker lost the transaction of epoch "
            f"{epoch}: {why}. Its records may be visible to read_committed readers already (Tansu shows them) or "
            f"gone, so no retry or replay can publish them exactly once: the job fails here rather than write "
            f"them twice. Committed: the epochs through {self.marker} (the marker in {self.marker_topic!r}); epoch "
            f"{epoch} and later stay staged in {self.stage.directory}. To go on: look for epoch {epoch}'s records "
            "in the topic (ESAULT_KAFKA_SINK_JOURNAL names each transaction's offsets), then run again from the "
            "last checkpoint (it publishes them again: right if the broker dropped them) or from scratch into an "
            "empty topic")

    def _journal_produced(self, producer: Any, epoch: int, spans: dict[tuple[str, int], list[int]],
                          count: int) -> None:
        """Every record of the transaction delivered (the commit would flush them anyway): note its offsets."""
        deadline = time.monotonic() + self.patience
        left = producer.flush(self.timeout)
        while left and time.monotonic() < deadline:  # the broker slow or away: the commit would wait as long
            left = producer.flush(self.timeout)
        if left:
            raise ConnectorError(f"KafkaSink {self.transactional_id!r}: {left} records of epoch {epoch} not "
                                 f"delivered within {self.timeout}s")
        self._journal.write(state="produced", epoch=epoch, records=count,
                            spans=[[t, p, first, last] for (t, p), (first, last) in sorted(spans.items())])

    # --- end -----------------------------------------------------------------------------

    def waiting_for(self) -> str | None:
        """'broker <address> (publishing epoch <e>)' while a publish waits for the broker (BrokerWait), else None."""
        return self.wait.waiting_for()

    def wait_idle(self, timeout: float) -> bool:
        """True once every step queued so far ran (False after `timeout`)."""
        if timeout <= 0:
            return False
        deadline = time.monotonic() + timeout
        for pool in (self._stager, self._thread):
            if pool.submit(lambda: None).exception(max(0.0, deadline - time.monotonic())) is not None:
                return False
        return True

    def abandon(self) -> None:
        """A rollback: nothing more is staged or published; a publish running now may finish (its checkpoint
        completed, and a transaction cut short would be aborted: records some brokers still show) for up to
        ABANDON_WAIT seconds; past that it goes on alone and releases the clients itself when it ends."""
        self._abandoned = True
        self._stager.shutdown(wait=True, cancel_futures=True)
        released = self._thread.submit(self._release)  # after the running publish; queued ones see _abandoned
        self._thread.shutdown(wait=False)
        try:
            released.result(ABANDON_WAIT)
        except TimeoutError:
            log.error("KafkaSink %r: a rollback found a publish still waiting for the broker after %gs; it goes on "
                      "alone (the next instance's producer fences it)", self.transactional_id, ABANDON_WAIT)

    def close(self, timeout: float) -> None:
        """A normal stop: stage writes and publishes already asked for get `timeout`; then the threads and
        clients are released."""
        done = threading.Event()
        staged = self._stager.submit(lambda: None)
        self._stager.shutdown(wait=False)
        wait([staged], timeout)
        self._thread.submit(done.set)
        if not done.wait(timeout):
            log.error("KafkaSink %r: publishes still running after %ss at close; a restart publishes the "
                      "epochs of completed checkpoints", self.transactional_id, timeout)
            self._abandoned = True
        self._thread.shutdown(wait=False, cancel_futures=True)
        if done.is_set():
            self._release()

    def _release(self) -> None:
        if self._journal is not None:
            self._journal.close()
        self._group.close()
        producer, self.producer = self.producer, None
        close_client(producer)


LOST_HINT = ("The broker no longer takes this producer's transaction: its state is lost (a broker restarted on "
             "emptied or rolled-back storage), or another producer with this transactional id fenced it (another "
             "job, or another run of this one, writes as it: give each job its own params 'transactional_id')")

FENCED_CODES = ("PRODUCER_FENCED", "_FENCED", "INVALID_PRODUCER_EPOCH", "INVALID_PRODUCER_ID_MAPPING",
                "UNKNOWN_PRODUCER_ID")
"""Kafka's answers meaning the broker no longer takes this producer's transaction: fenced by a newer producer of
its transactional id, or its producer id forgotten (a coordinator that lost or expired its state)."""


TRANSACTIONAL_ID_NOT_FOUND = 105
"""Kafka's error code (KIP-890) for a transactional id its coordinator does not know; librdkafka 2.16 has no name
for it (it shows "Err-105?"). Tansu answers it to a producer whose transactions' state it lost."""


def _fenced(kafka: Any, error: Any) -> bool:
    """Whether `error` says the broker no longer takes this producer's transaction (see FENCED_CODES)."""
    if error is None:
        return False
    if getattr(error, "fatal", lambda: False)():
        return True
    codes = {getattr(kafka.KafkaError, name) for name in FENCED_CODES if hasattr(kafka.KafkaError, name)}
    return getattr(error, "code", lambda: None)() in codes | {TRANSACTIONAL_ID_NOT_FOUND}


def _note_offset(spans: dict[tuple[str, int], list[int]], err: Any, msg: Any) -> None:
    """A delivery report (journal on): widen the partition's [first, last] offsets of this transaction."""
    if err is not None:
        return
    key, offset = (msg.topic(), msg.partition()), msg.offset()
    span = spans.get(key)
    if span is None:
        spans[key] = [offset, offset]
    else:
        span[0], span[1] = min(span[0], offset), max(span[1], offset)


def close_client(client: Any) -> None:
    """Close a librdkafka producer now (confluent-kafka >= 2.13 has close(); older ones close when collected)."""
    close = getattr(client, "close", None)
    if close is not None:
        with warnings.catch_warnings():  # closing a producer whose transaction start failed warns that abort failed
            warnings.simplefilter("ignore", RuntimeWarning)
            close()
