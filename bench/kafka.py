"""Benchmark: the word count reading Kafka (KafkaSource) against the same count reading a file, and against a
plain confluent-kafka consume loop with the same client settings.

    python bench/kafka.py                         # 2M one-word records, 3 rounds; writes docs/results/kafka.json
    python bench/kafka.py --records 500000 --repeat 1 --no-write
    python bench/kafka.py side-by-side            # esault vs Quix Streams vs Bytewax (bench/kafka_side_by_side.py)

The input is bench/wordcount_input.py's Zipf words, one word per record (and one per line in the file), in a
4-partition topic of a Tansu broker this script starts (esault.testing.kafka; Tansu keeps it in memory). Each
round runs, back to back:

- plain loop, tuned: one confluent-kafka consumer, the 4 partitions assigned, `consume(1000)` until every
  record is read, each value decoded and counted in a dict (the work the word count does per record),
  with fetch.queue.backoff.ms=10 as KafkaSource sets it;
- plain loop, librdkafka defaults (its fetch.queue.backoff.ms is 1 s);
- esault, Kafka: KafkaSource (2 instances, in the 2 workers, bounded: "end": "end") -> split (chained) ->
  count per word (2 SPUs) -> final counts, exactly_once, on LocalCluster(workers=2);
- esault, file: the same topology with TextFileSpout over the same words.

Records/s are records divided by the time from submit() to job.wait() (esault) or from the first consume
call to the last record (loops); medians of the rounds, ratios within a round. The machine (2 cores) is
shared with other work, so figures move from run to run.
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import esault_wordcount  # noqa: E402
import wordcount_input  # noqa: E402

from esault import JobConfig, LocalCluster, TopologyBuilder  # noqa: E402
from esault.connectors import KafkaSource  # noqa: E402
from esault.testing.kafka import KafkaBroker  # noqa: E402

TOPIC = "words"


def words_of(path: Path) -> list[str]:
    return path.read_text().split()


def fill(broker: KafkaBroker, words: list[str]) -> None:
    from confluent_kafka import Producer

    broker.create_topic(TOPIC, 4)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20, "batch.num.messages": 10000,
                         "queue.buffering.max.messages": 500000})
    for i, word in enumerate(words):
        while True:
            try:
                producer.produce(TOPIC, value=word.encode(), partition=i % 4)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(120) == 0


def plain_loop(broker: KafkaBroker, total: int, tuned: bool) -> float:
    """Seconds a plain consume loop takes to read and count every record."""
    from confluent_kafka import Consumer, TopicPartition

    settings = {"bootstrap.servers": broker.bootstrap, "group.id": f"plain-{time.monotonic_ns()}",
                "enable.auto.commit": False}
    if tuned:
        settings["fetch.queue.backoff.ms"] = 10
    consumer = Consumer(settings)
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(4)])
    counts: collections.Counter = collections.Counter()
    seen = 0
    started = time.perf_counter()
    while seen < total:
        for m in consumer.consume(1000, 1.0):
            if m.error() is None:
                counts[m.value().decode()] += 1
                seen += 1
    seconds = time.perf_counter() - started
    consumer.close()
    return seconds


def kafka_topology(bootstrap: str) -> Any:
    b = TopologyBuilder("wc_bench")
    b.set_spout("lines", KafkaSource, 2, params={"topic": TOPIC, "bootstrap": bootstrap, "value": "utf-8",
                                                 "end": "end", "max_records": 1000},
                max_pending=20_000, placement="worker")
    # chained into the source, as in the file run (esault_wordcount.build): an elastic bolt is never chained
    b.set_bolt("split", esault_wordcount.SplitWords, 2, elastic=False).shuffle_grouping("lines")
    b.set_bolt("count", esault_wordcount.CountWord, 2, elastic=False).key_grouping("split")
    b.set_bolt("final", esault_wordcount.FinalCounts, elastic=False).global_grouping("count")
    return b.build()


def esault_run(cluster: LocalCluster, topology: Any, data_dir: Path, expected: dict[str, int]) -> float:
    job = cluster.submit(topology, JobConfig(data_dir=data_dir, elasticity=False))
    started = time.perf_counter()
    assert job.wait(600), job.status()
    seconds = time.perf_counter() - started
    job.stop()
    assert esault_wordcount.final_counts(data_dir) == expected, "wrong counts"
    return seconds


def main() -> None:
    if sys.argv[1:2] == ["side-by-side"]:  # the same job on esault, Quix Streams and Bytewax (issue #52)
        import kafka_side_by_side

        kafka_side_by_side.main(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="esault-kafka-bench-"))
    lines = wordcount_input.make_input(work / "words10.txt", words=args.records)
    words = words_of(lines)
    one_per_line = work / "words.txt"
    one_per_line.write_text("\n".join(words) + "\n")
    expected = dict(collections.Counter(words))
    rounds: list[dict[str, float]] = []
    with KafkaBroker() as broker:
        started = time.perf_counter()
        fill(broker, words)
        print(f"{len(words)} records into {TOPIC!r} (4 partitions) in {time.perf_counter() - started:.1f} s")
        plain_loop(broker, len(words), tuned=True)  # warm-up: the broker's first full read is slower
        with LocalCluster(workers=2) as cluster:
            for r in range(args.repeat):
                row = {
                    "plain_tuned": plain_loop(broker, len(words), tuned=True),
                    "plain_default": plain_loop(broker, len(words), tuned=False),
                    "esault_kafka": esault_run(cluster, kafka_topology(broker.bootstrap), work / f"k{r}", expected),
                    "esault_file": esault_run(cluster, esault_wordcount.build(str(one_per_line),
                                                                             spout_placement="worker"),
                                              work / f"f{r}", expected),
                }
                rounds.append({k: len(words) / v for k, v in row.items()})
                print(f"round {r + 1}: " + ", ".join(f"{k} {v:,.0f} rec/s" for k, v in rounds[-1].items()))
    median = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
    ratio = statistics.median(r["esault_kafka"] / r["plain_tuned"] for r in rounds)
    vs_file = statistics.median(r["esault_kafka"] / r["esault_file"] for r in rounds)
    print("median records/s: " + ", ".join(f"{k} {v:,.0f}" for k, v in median.items()))
    print(f"esault Kafka / tuned plain loop: {ratio:.2f} (target >= 0.50); esault Kafka / esault file: {vs_file:.2f}")
    if not args.no_write:
        out = ROOT / "docs" / "results" / "kafka.json"
        out.write_text(json.dumps({"records": len(words), "rounds": rounds, "median": median,
                                   "kafka_over_plain_tuned": ratio, "kafka_over_file": vs_file,
                                   "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}, indent=1) + "\n")
        print(f"wrote {out}")


if __name__ == "__main__":
    main()
