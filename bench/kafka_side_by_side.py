"""Benchmark (issue #52): one job on one broker, run by esault, Quix Streams and Bytewax, side by side.

    python bench/kafka.py side-by-side                    # 1M records; writes docs/results/kafka_side_by_side.json
    python bench/kafka.py side-by-side --records 200000 --no-write

The job: topic in (4 partitions; key one of 1,000 words, value {"t": produce time}) -> keyed running count ->
topic out (key, {"count": n, "t": t}), on a Tansu broker this script starts (in memory). Each engine runs as its
own processes (bench/kafka_engines.py) on the machine's 2 cores: esault on LocalCluster(workers=2), exactly_once
(the default); Quix Streams, 2 processes of one group, processing_guarantee="exactly-once"; Bytewax, 2 processes
(cluster_main), its Kafka sink's at-least-once. Its defaults otherwise, commit intervals included (esault
checkpoints every 2 s, Quix Streams commits every 5 s, Bytewax's sink writes as it goes).

Two runs per engine:
- throughput: once the engine runs (its group joined, its first 200 records' outputs read), --records
  records written as fast as the producer goes; records/s = records / (the last output's arrival at a
  read_committed reader in this process - the moment the writing began): what it takes to get a burst through,
  every commit an engine holds its output for included (measured from the first output instead, an engine
  that commits rarely looked faster than it could sustain: Quix Streams' exactly-once at 70% of such a rate
  fell 45 s behind);
- latency: a fresh topic written at 70% of that engine's own rate for --seconds, the engine tailing it; each
  output's latency is its arrival at the reader minus its input's produce time; p50 and p99 over the records
  produced after the first --warmup seconds.
Each output is checked: per key, counts 1..n once each (exactly-once) or the duplicates counted (at-least-once);
a missing count fails the run.

Quix Streams and Bytewax run in a venv of their own (Quix Streams pins confluent-kafka < 2.13; esault's Kafka
sink needs 2.16), made on first use under ~/.cache/esault-bench/kafka-peers with the versions below.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from _report import PERFORMANCE, write_section  # noqa: E402
from esault.testing.kafka import KafkaBroker  # noqa: E402
from esault.testing.server_process import free_port  # noqa: E402

PEER_VENV = Path.home() / ".cache" / "esault-bench" / "kafka-peers"
PEER_PACKAGES = ("quixstreams==3.28.1", "bytewax==0.21.1")
PARTITIONS = 4
KEYS = 1000
WARM = 200
"""Records written before the paced ones; the latency run's clock starts once their outputs are read."""
GUARANTEE = {"esault": "exactly_once", "quix": "exactly-once", "quix-alo": "at-least-once",
             "bytewax": "at-least-once"}
NAMES = {"esault": "esault", "quix": "Quix Streams 3.28.1", "quix-alo": "Quix Streams 3.28.1 (beside)",
         "bytewax": "Bytewax 0.21.1"}


def peer_python(venv: Path = PEER_VENV) -> str:
    """The peers' interpreter: a venv with PEER_PACKAGES, made now if it is missing."""
    python = venv / "bin" / "python"
    if not python.exists() or subprocess.run([str(python), "-c", "import quixstreams, bytewax"],
                                             capture_output=True).returncode != 0:
        print(f"making the peers' venv in {venv} ({', '.join(PEER_PACKAGES)})", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *PEER_PACKAGES], check=True)
    return str(python)


def produce(bootstrap: str, topic: str, count: int, rate: float | None = None, start: int = 0) -> None:
    """`count` records into `topic`, round-robin over the partitions, key word<i % KEYS>, value {"t": µs now};
    at `rate` records/s (paced in 10 ms steps) or as fast as the producer goes."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.num.messages": 10000,
                         "queue.buffering.max.messages": 500000})
    began = time.perf_counter()
    for i in range(start, start + count):
        if rate is not None and (i - start) % max(1, int(rate / 100)) == 0:
            due = began + (i - start) / rate
            while time.perf_counter() < due:
                producer.poll(max(0.0, min(0.005, due - time.perf_counter())))
        value = json.dumps({"t": time.time_ns() // 1000}).encode()
        while True:
            try:
                producer.produce(topic, key=f"word{i % KEYS}".encode(), value=value, partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0, f"records into {topic!r} not delivered"


class OutputReader:
    """Reads `topic` read_committed from the start in a thread; keeps (key, count, t, arrival) per record."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        from confluent_kafka import Consumer, TopicPartition

        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-reader-{free_port()}",
                                  "enable.auto.commit": False, "isolation.level": "read_committed"})
        self.consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        self.raw: list[tuple[bytes, bytes, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, name="bench-output-reader", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while not self._stop.is_set():
            batch = self.consumer.consume(10000, 0.2)
            now = time.time()
            self.raw.extend((m.key(), m.value(), now) for m in batch if m.error() is None)

    def wait_for(self, count: int, timeout: float, alive: Any) -> bool:
        deadline = time.monotonic() + timeout
        while len(self.raw) < count and time.monotonic() < deadline and alive():
            self._stop.wait(0.2)
        return len(self.raw) >= count

    def close(self) -> list[tuple[str, int, int, float]]:
        self._stop.set()
        self._thread.join(10)
        self.consumer.close()
        out = []
        for key, value, arrival in self.raw:
            record = json.loads(value)
            out.append((key.decode(), record["count"], record["t"], arrival))
        return out


@dataclass
class Check:
    """What the output holds against the input: counts missing (a failure) and counts seen twice or more."""
    outputs: int
    missing: int
    duplicates: int
    unexpected: int

    @property
    def exact(self) -> bool:
        return self.missing == 0 and self.duplicates == 0 and self.unexpected == 0


def check(outputs: list[tuple[str, int, int, float]], per_key: dict[str, int]) -> Check:
    seen: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for key, count, _, _ in outputs:
        seen[key][count] += 1
    missing = duplicates = unexpected = 0
    for key in per_key.keys() | seen.keys():
        want, got = per_key.get(key, 0), seen.get(key, collections.Counter())
        missing += sum(1 for n in range(1, want + 1) if got[n] == 0)
        duplicates += sum(c - 1 for n, c in got.items() if 1 <= n <= want and c > 1)
        unexpected += sum(c for n, c in got.items() if not 1 <= n <= want)
    return Check(len(outputs), missing, duplicates, unexpected)


def create_topic(broker: KafkaBroker, topic: str) -> None:
    """`topic` with PARTITIONS partitions and its retention stated: Tansu describes a topic's configs only if they
    were given at its creation, and Quix Streams reads retention.ms of its input to make its changelog topic."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    config = {"retention.ms": "-1", "retention.bytes": "-1"}
    admin.create_topics([NewTopic(topic, PARTITIONS, 1, config=config)])[topic].result(30)


def expected_counts(count: int) -> dict[str, int]:
    return dict(collections.Counter(f"word{i % KEYS}" for i in range(count)))


class Engine:
    """An engine's processes on topic `source` -> `sink`; stop() ends them (SIGTERM, then SIGKILL)."""

    def __init__(self, engine: str, bootstrap: str, source: str, sink: str, work: Path, python: str) -> None:
        self.logs = []
        argv = [python, str(HERE / "kafka_engines.py"), engine, "--bootstrap", bootstrap, "--source", source,
                "--sink", sink, "--work", str(work)]
        copies = 1 if engine == "esault" else 2
        addresses = ";".join(f"127.0.0.1:{free_port()}" for _ in range(copies))
        self.processes = []
        for i in range(copies):
            log = open(work / f"{engine}-{i}.log", "w")
            self.logs.append(log)
            self.processes.append(subprocess.Popen(
                [*argv, "--proc-id", str(i), "--addresses", addresses], stdout=log, stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=work))

    def alive(self) -> bool:
        return all(p.poll() is None for p in self.processes)

    def stop(self) -> None:
        for p in self.processes:
            if p.poll() is None:
                p.terminate()
        for p in self.processes:
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)
        for log in self.logs:
            log.close()

    def tail(self) -> str:
        return "\n".join(Path(log.name).read_text()[-2000:] for log in self.logs)


@dataclass
class Result:
    engine: str
    guarantee: str
    records_per_s: float | None = None
    throughput_check: dict[str, Any] = field(default_factory=dict)
    paced_rate: float | None = None
    p50_ms: float | None = None
    p99_ms: float | None = None
    latency_check: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


def running_engine(engine: str, broker: KafkaBroker, source: str, reader: "OutputReader", running: "Engine",
                   timeout: float) -> None:
    """Wait until every process of `running` says it runs, then until the outputs of WARM records written now
    are read: its group joined, its state recovered, its first commit through."""
    ready_by = time.monotonic() + 120
    while not all("engine ready" in Path(log.name).read_text() for log in running.logs):
        if time.monotonic() > ready_by or not running.alive():
            raise RuntimeError(f"{engine} did not start:\n{running.tail()}")
        time.sleep(0.2)  # polling a log file the engine writes: no event to wait on across processes
    produce(broker.bootstrap, source, WARM)
    if not reader.wait_for(WARM, timeout, running.alive):
        raise RuntimeError(f"{engine}: no output for its first {WARM} records:\n{running.tail()}")


def throughput(engine: str, broker: KafkaBroker, records: int, work: Path, python: str,
               timeout: float) -> tuple[float, Check]:
    source, sink = f"in-{engine}-throughput", f"out-{engine}-throughput"
    create_topic(broker, source)
    create_topic(broker, sink)
    reader = OutputReader(broker.bootstrap, sink)
    running = Engine(engine, broker.bootstrap, source, sink, work, python)
    try:
        running_engine(engine, broker, source, reader, running, timeout)
        began = time.time()
        produce(broker.bootstrap, source, records, start=WARM)
        done = reader.wait_for(WARM + records, timeout, running.alive)
    finally:
        running.stop()
        outputs = reader.close()
    if not done:
        raise RuntimeError(f"{engine}: {len(outputs)} of {records} outputs within {timeout:.0f} s;\n"
                           f"{running.tail()}")
    last = max(arrival for _, _, _, arrival in outputs)
    return records / max(last - began, 1e-6), check(outputs, expected_counts(WARM + records))


def latency(engine: str, broker: KafkaBroker, rate: float, seconds: float, warmup: float, work: Path,
            python: str, timeout: float) -> tuple[float, float, Check]:
    source, sink = f"in-{engine}-latency", f"out-{engine}-latency"
    create_topic(broker, source)
    create_topic(broker, sink)
    reader = OutputReader(broker.bootstrap, sink)
    running = Engine(engine, broker.bootstrap, source, sink, work, python)
    records = int(rate * seconds)
    try:
        running_engine(engine, broker, source, reader, running, timeout)  # the clock starts once it reads
        began = time.time()
        produce(broker.bootstrap, source, records, rate=rate, start=WARM)
        done = reader.wait_for(WARM + records, timeout, running.alive)
    finally:
        running.stop()
        outputs = reader.close()
    if not done:
        raise RuntimeError(f"{engine}: {len(outputs)} of {records} paced outputs within {timeout:.0f} s;\n"
                           f"{running.tail()}")
    after = (began + warmup) * 1e6
    waits = sorted((arrival - t / 1e6) * 1000 for _, _, t, arrival in outputs if t >= after)
    return (statistics.median(waits), waits[min(len(waits) - 1, int(0.99 * len(waits)))],
            check(outputs, expected_counts(WARM + records)))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--seconds", type=float, default=30.0, help="length of the paced latency run")
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--engines", default="esault,quix,bytewax,quix-alo",
                        help="quix-alo: Quix Streams at-least-once, a row beside the issue's settings")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    engines = args.engines.split(",")
    peers = peer_python() if set(engines) - {"esault"} else sys.executable
    work = Path(tempfile.mkdtemp(prefix="esault-kafka-side-by-side-"))
    results: list[Result] = []
    with KafkaBroker() as broker:
        for engine in engines:
            result = Result(engine, GUARANTEE[engine])
            python = sys.executable if engine == "esault" else peers
            try:
                (work / engine).mkdir()
                rate, got = throughput(engine, broker, args.records, work / engine, python, args.timeout)
                result.records_per_s, result.throughput_check = rate, asdict(got)
                print(f"{engine}: {rate:,.0f} records/s; {got}", flush=True)
                result.paced_rate = 0.7 * rate
                (work / f"{engine}-paced").mkdir()
                p50, p99, got = latency(engine, broker, result.paced_rate, args.seconds, args.warmup,
                                        work / f"{engine}-paced", python, args.timeout)
                result.p50_ms, result.p99_ms, result.latency_check = p50, p99, asdict(got)
                print(f"{engine}: at {result.paced_rate:,.0f} records/s p50 {p50:,.0f} ms, p99 {p99:,.0f} ms; "
                      f"{got}", flush=True)
            except Exception as exc:  # one engine failing still leaves the others' rows
                result.error = str(exc)[-3000:]
                print(f"{engine}: FAILED: {result.error}", flush=True)
            results.append(result)
    report(results, args)


def table(results: list[Result], records: int, seconds: float, when: str) -> tuple[str, float | None]:
    """The run as Markdown (what docs/PERFORMANCE.md and the README show) and esault's ratio to the best peer
    at the issue's settings (Quix Streams exactly-once, Bytewax at-least-once)."""
    best_peer = max((r.records_per_s or 0 for r in results if r.engine in ("quix", "bytewax")), default=0)
    mine = next((r.records_per_s for r in results if r.engine == "esault"), None)
    lines = [f"`python bench/kafka.py side-by-side` on 2 CPUs, {when}: {records:,} records a burst, the paced "
             f"run {seconds:g} s at 70% of each engine's own rate, one Tansu broker, each engine on 2 processes.",
             "", "| engine | guarantee | records/s | p50 ms | p99 ms (at 70% of its rate) | output |",
             "|---|---|---:|---:|---:|---|"]
    for r in results:
        if r.error:
            lines.append(f"| {NAMES[r.engine]} | {r.guarantee} | failed | | | {r.error.splitlines()[0][:80]} |")
            continue
        t, p = r.throughput_check, r.latency_check
        output = ("exact" if t["missing"] == t["duplicates"] == t["unexpected"] == 0
                  else f"missing {t['missing']}, duplicates {t['duplicates']}, unexpected {t['unexpected']}")
        output += f"; paced: missing {p['missing']}, duplicates {p['duplicates']}"
        lines.append(f"| {NAMES[r.engine]} | {r.guarantee} | {r.records_per_s:,.0f} | {r.p50_ms:,.0f} | "
                     f"{r.p99_ms:,.0f} | {output} |")
    ratio = (mine / best_peer) if mine and best_peer else None
    if ratio is not None:
        lines += ["", f"esault / best peer (records/s): **{ratio:.2f}** (target >= 2.0)."]
    return "\n".join(lines), ratio


def report(results: list[Result], args: argparse.Namespace) -> None:
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    markdown, ratio = table(results, args.records, args.seconds, when)
    print("\n" + markdown)
    if not args.no_write:
        out = ROOT / "docs" / "results" / "kafka_side_by_side.json"
        out.write_text(json.dumps({"records": args.records, "paced_seconds": args.seconds,
                                   "results": [asdict(r) for r in results], "esault_over_best_peer": ratio,
                                   "load_average": os.getloadavg(), "when": when}, indent=1) + "\n")
        write_section(PERFORMANCE, "kafka-side-by-side", "### A real stream side by side (issue #52)\n\n" + markdown)
        print(f"wrote {out} and docs/PERFORMANCE.md")


if __name__ == "__main__":
    main()
