"""Benchmark: rows/s through SparkSink against a direct pyarrow Parquet write of the same rows.

    python bench/sink.py                 # 200k rows, about a minute (most of it Spark start-up)
    python bench/sink.py --rows 1000000 --batch-rows 100000

Three paths write the same rows (word, count, event_time) as snappy Parquet:
  direct pyarrow   rows -> pa.Table -> pyarrow.parquet.write_table: the floor
  SparkSink/pyarrow  the whole sink (to_row, batching, schema check, Arrow encode,
                     commit protocol with fsyncs) with pyarrow writing the files
  SparkSink/spark    the same with Spark writing the files (Arrow transfer to the JVM)
The sink is driven as an SPU drives it (process(Tuple) per row on one thread,
close() waits for every commit); the esault runtime's own per-tuple cost
(routing, acking) is not included. Spark
start-up and one warm-up commit are excluded and reported separately.

Prints a table and writes it into docs/PERFORMANCE.md between
<!-- bench:sink:start --> and <!-- bench:sink:end --> (--no-write to skip).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import re
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from esault.dsl.context import TopologyContext  # noqa: E402
from esault.dsl.tuple import Tuple  # noqa: E402
from spark_sink import SparkSink  # noqa: E402
from spark_sink.session import get_session  # noqa: E402

START, END = "<!-- bench:sink:start -->", "<!-- bench:sink:end -->"
SCHEMA = "word STRING, count BIGINT"


def make_rows(n: int) -> list[dict]:
    when = dt.datetime.now(dt.timezone.utc).replace(minute=0, second=0, microsecond=0)
    return [{"word": f"word{i % 2000}", "count": i, "event_time": when} for i in range(n)]


def direct_pyarrow(rows: list[dict], out: Path) -> float:
    """The floor: columns from the same dicts, one write_table."""
    started = time.perf_counter()
    table = pa.table({
        "word": pa.array([r["word"] for r in rows], pa.string()),
        "count": pa.array([r["count"] for r in rows], pa.int64()),
        "event_time": pa.array([r["event_time"] for r in rows], pa.timestamp("us", tz="UTC")),
    })
    out.mkdir(parents=True)
    pq.write_table(table, out / "part-00000.snappy.parquet", compression="snappy")
    return time.perf_counter() - started


class _Acks:
    """The runtime's side of defer() for the benchmark: one anchor counting acks and fails."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.acked = 0
        self.failed: list[str] = []

    def ack(self) -> None:
        with self.lock:
            self.acked += 1

    def fail(self, reason: str) -> None:
        with self.lock:
            self.failed.append(reason)


def through_sink(rows: list[dict], work: Path, engine: str, batch_rows: int, name: str) -> tuple[float, int]:
    """Drive SparkSink as an SPU would: open, process(Tuple) per row, close (waits for commits)."""
    params = {"table": name, "schema": SCHEMA, "engine": engine, "batch_rows": batch_rows,
              "batch_seconds": None, "key_column": None, "warehouse": work / "wh",
              "max_buffered_batches": 4}
    acks = _Acks()
    started = time.perf_counter()
    sink = SparkSink(**params)
    sink._esault_defer = lambda: acks  # what the runtime installs around process()
    sink.open(TopologyContext("bench", "sink", 0, work, params))
    process = sink.process
    for row in rows:
        process(Tuple(None, row, "src", 0, 0))
    sink.close()
    elapsed = time.perf_counter() - started
    if acks.acked != len(rows):
        raise SystemExit(f"bench: only {acks.acked} of {len(rows)} rows were committed ({acks.failed[:1]})")
    return elapsed, sink.stats()["batches_committed"]


def render(results: list[tuple[str, int, float]], notes: list[str]) -> str:
    floor = results[0][1] / results[0][2]
    lines = ["| path | rows | seconds | rows/s | vs direct pyarrow |", "| --- | ---: | ---: | ---: | ---: |"]
    for label, n, secs in results:
        rate = n / secs
        lines.append(f"| {label} | {n:,} | {secs:.2f} | {rate:,.0f} | {rate / floor:.3f} |")
    return "\n".join(lines + [""] + notes)


def write_into_performance_md(block: str, path: Path) -> None:
    if path.exists():
        text = path.read_text()
    else:
        text = f"# Performance\n\n{START}\n{END}\n"
    if START not in text or END not in text:
        text = text.rstrip("\n") + f"\n\n## Spark sink\n\n{START}\n{END}\n"
    pattern = re.compile(re.escape(START) + r".*?" + re.escape(END), re.S)
    text = pattern.sub(lambda m: f"{START}\n{block}\n{END}", text, count=1)
    path.write_text(text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=200_000, help="rows per path (default 200000)")
    ap.add_argument("--batch-rows", type=int, default=50_000, help="SparkSink batch_rows (default 50000)")
    ap.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    ap.add_argument("--no-write", action="store_true", help="do not update docs/PERFORMANCE.md")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "PERFORMANCE.md")
    args = ap.parse_args(argv)
    if args.rows < 1 or args.batch_rows < 1:
        ap.error("--rows and --batch-rows must be >= 1")

    rows = make_rows(args.rows)
    work = Path(tempfile.mkdtemp(prefix="esault-bench-sink-"))
    try:
        t0 = time.perf_counter()
        spark = get_session(master=args.master, warehouse=work / "wh")
        startup = time.perf_counter() - t0
        t0 = time.perf_counter()
        through_sink(make_rows(100), work / "warm", "spark", 100, "bench_warmup")
        warmup = time.perf_counter() - t0
        print(f"Spark session start {startup:.1f}s, warm-up commit {warmup:.1f}s (excluded)", flush=True)
        small, _ = through_sink(make_rows(100), work / "small", "spark", 100, "bench_small")
        print(f"one 100-row Spark batch, open to close: {small:.2f}s", flush=True)

        results = [("direct `pyarrow.parquet.write_table`", args.rows, direct_pyarrow(rows, work / "direct"))]
        print(f"direct pyarrow: {results[-1][2]:.2f}s", flush=True)
        secs, batches_a = through_sink(make_rows(args.rows), work / "a", "pyarrow", args.batch_rows, "bench_pyarrow")
        results.append(("`SparkSink(engine=\"pyarrow\")`", args.rows, secs))
        print(f"SparkSink pyarrow engine: {secs:.2f}s ({batches_a} batches)", flush=True)
        secs, batches_s = through_sink(make_rows(args.rows), work / "s", "spark", args.batch_rows, "bench_spark")
        results.append(("`SparkSink(engine=\"spark\")`", args.rows, secs))
        print(f"SparkSink spark engine: {secs:.2f}s ({batches_s} batches)", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    notes = [
        f"`python bench/sink.py --rows {args.rows} --batch-rows {args.batch_rows}` on "
        f"{dt.date.today().isoformat()}: {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"PySpark {spark.version} ({spark.sparkContext.master}), pyarrow {pa.__version__}. "
        f"Each sink run committed {batches_s} batches of up to {args.batch_rows:,} rows and waited for "
        f"every commit (close()); Spark start-up ({startup:.1f} s) and a warm-up commit "
        f"({warmup:.1f} s) are not included. Rows are (word STRING, count BIGINT, event_time TIMESTAMP); "
        "process() is called directly, so the esault runtime's own per-tuple cost (routing, acking) is not included.",
        "",
        f"Where the time goes: the sink's own work (to_row, event-time placement, batching, schema check, "
        f"Arrow encoding, the fsync'd commit protocol) is the pyarrow-engine row, about "
        f"{results[1][2] / args.rows * 1e6:.1f} µs of wall time per row. Having Spark write each batch "
        f"instead adds about {(results[2][2] - results[1][2]) / batches_s:.2f} s per {args.batch_rows:,}-row "
        f"batch: a Spark job's fixed cost (a whole 100-row sink run with Spark took {small:.2f} s) plus "
        "the Arrow transfer to the JVM and Parquet encoding there, which grow with the rows. Larger batches "
        "amortise only the fixed part. Commits run on the committer thread, overlapping process().",
    ]
    block = render(results, notes)
    print()
    print(block)
    if not args.no_write:
        write_into_performance_md(block, args.out)
        print(f"\nwritten to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
