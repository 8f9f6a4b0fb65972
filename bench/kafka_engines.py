"""The keyed running count of bench/kafka_side_by_side.py, once per engine, each run as its own process.

    python bench/kafka_engines.py esault  --bootstrap B --source IN --sink OUT --work DIR
    python bench/kafka_engines.py quix    --bootstrap B --source IN --sink OUT --work DIR
    python bench/kafka_engines.py bytewax --bootstrap B --source IN --sink OUT --work DIR --proc-id I --addresses A;B

Every engine does the same: read topic IN (key: a utf-8 word, value: JSON {"t": produce time in µs}), count
per key, and write (key, {"count": n, "t": t}) to topic OUT, so a reader of OUT can check each record's count
once and time it from its produce. Each runs until SIGTERM (a tail read; the orchestrator stops it once every
output is read), in its own guarantee: esault exactly_once (the default), Quix Streams exactly-once, Bytewax
at-least-once (its Kafka sink's only mode). Quix Streams and Bytewax run in a venv of their own
(bench/kafka_side_by_side.py makes it): Quix Streams pins an older confluent-kafka than esault's.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
CONSUMER_TUNING = {"fetch.queue.backoff.ms": 10, "fetch.wait.max.ms": 10}
"""What KafkaSource sets on its consumer, given to the peers' consumers too: librdkafka's default (1 s) leaves a
consumer idle that long each time its local queue fills (bench/kafka.py's plain loop measures both)."""
READY = "engine ready"
"""Printed on stdout once the engine runs: the orchestrator's clock for the latency run starts after it."""


def _stop_on_sigterm() -> threading.Event:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    return stop


def run_esault(args: argparse.Namespace) -> None:
    """LocalCluster(workers=2): KafkaSource (2 instances) -> keyed running count (2 SPUs) -> KafkaSink."""
    sys.path.insert(0, str(HERE.parent))
    from esault import JobConfig, LocalCluster

    import kafka_count_job

    stop = _stop_on_sigterm()
    with LocalCluster(workers=2) as cluster:
        job = cluster.submit(kafka_count_job.build(args.bootstrap, args.source, args.sink),
                             JobConfig(data_dir=Path(args.work) / "data", elasticity=False))
        print(READY, flush=True)
        while not stop.wait(0.5):
            if job.wait(0):
                raise SystemExit(f"the esault job ended on its own: {job.status()}")
        job.stop()


def run_quix(args: argparse.Namespace) -> None:
    """One Quix Streams process of the group (the orchestrator starts two): stateful apply, exactly-once ("quix")
    or at-least-once ("quix-alo", a row beside: not the issue's setting)."""
    from quixstreams import Application

    app = Application(broker_address=args.bootstrap, consumer_group=f"quix-{Path(args.work).name}",
                      auto_offset_reset="earliest", processing_guarantee=QUIX_GUARANTEES[args.engine],
                      state_dir=str(Path(args.work) / f"state-{args.proc_id}"), loglevel="WARNING",
                      consumer_extra_config=dict(CONSUMER_TUNING))
    source = app.topic(args.source, key_deserializer="str", value_deserializer="json")
    sink = app.topic(args.sink, key_serializer="str", value_serializer="json")

    def count(value: dict[str, Any], state: Any) -> dict[str, Any]:
        n = state.get("n", 0) + 1
        state.set("n", n)
        return {"count": n, "t": value["t"]}

    app.dataframe(source).apply(count, stateful=True).to_topic(sink)
    print(READY, flush=True)
    app.run()  # Quix Streams stops on SIGTERM by itself, committing what it processed


def run_bytewax(args: argparse.Namespace) -> None:
    """One Bytewax process of the cluster (cluster_main over loopback TCP): stateful_map, at-least-once."""
    import bytewax.operators as op
    from bytewax.connectors.kafka import KafkaSink, KafkaSinkMessage, KafkaSource
    from bytewax.dataflow import Dataflow
    from bytewax.testing import cluster_main

    def count(state: int | None, t: int) -> tuple[int, dict[str, int]]:
        n = (state or 0) + 1
        return n, {"count": n, "t": t}

    flow = Dataflow("kafka_count")
    records = op.input("in", flow, KafkaSource([args.bootstrap], [args.source], tail=True,
                                               add_config={k: str(v) for k, v in CONSUMER_TUNING.items()}))
    keyed = op.map("decode", records, lambda m: (m.key.decode(), json.loads(m.value)["t"]))
    counted = op.stateful_map("count", keyed, count)
    out = op.map("encode", counted, lambda kv: KafkaSinkMessage(kv[0].encode(), json.dumps(kv[1]).encode()))
    op.output("out", out, KafkaSink([args.bootstrap], args.sink))
    print(READY, flush=True)
    cluster_main(flow, args.addresses.split(";"), args.proc_id)


QUIX_GUARANTEES = {"quix": "exactly-once", "quix-alo": "at-least-once"}
ENGINES = {"esault": run_esault, "quix": run_quix, "quix-alo": run_quix, "bytewax": run_bytewax}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("engine", choices=sorted(ENGINES))
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--source", required=True)
    parser.add_argument("--sink", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--proc-id", type=int, default=0)
    parser.add_argument("--addresses", default="")
    args = parser.parse_args(argv)
    ENGINES[args.engine](args)


if __name__ == "__main__":
    main()
