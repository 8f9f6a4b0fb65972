"""Benchmark: rows/s through SparkSink against a direct pyarrow Parquet write of the same rows.

    python bench/sink.py                 # 200k rows, about a minute (most of it Spark start-up)
    python bench/sink.py --rows 1000000 --batch-rows 100000

Three paths write the same rows (word, count, event_time) as snappy Parquet:
  direct pyarrow   rows -> pa.Table -> pyarrow.parquet.write_table: the floor
  SparkSink/pyarrow  the whole sink (to_row, batching, schema check, Arrow encode,
                     commit protocol with fsyncs) with pyarrow writing the files
  SparkSink/spark    the same with Spark's executors writing the files (from a
                     pyarrow transfer file, see spark_sink/stager.py)
A second table compares the engines alone on large batches (--engine-rows): the
same pa.Table written by pyarrow.parquet.write_table, by SparkStager, and by the
old createDataFrame(arrow).coalesce(1) path, as ratios to pyarrow within one
run (best of --repeats), with SparkStager's time split into its two steps.
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
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from esault.dsl.context import TopologyContext  # noqa: E402
from esault.dsl.tuple import Tuple  # noqa: E402
from spark_sink import SparkSink  # noqa: E402
from spark_sink.session import get_session  # noqa: E402
from spark_sink.stager import ArrowStager, SparkStager, spark_schema  # noqa: E402

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


MASTER = {"url": "local[*]"}  # --master, for every sink the benchmark opens


def through_sink(rows: list[dict], work: Path, engine: str, batch_rows: int, name: str) -> tuple[float, int]:
    """Drive SparkSink as an SPU would: open, process(Tuple) per row, close (waits for commits)."""
    params = {"table": name, "schema": SCHEMA, "engine": engine, "batch_rows": batch_rows, "master": MASTER["url"],
              "batch_seconds": None, "key_column": None, "warehouse": work / "wh",
              "max_buffered_batches": 4}
    acks = _Acks()
    started = time.perf_counter()
    sink = SparkSink(**params)
    sink._esault_defer = lambda: acks  # what the runtime installs around process()
    sink.open(TopologyContext("bench", "sink", 0, work, params, guarantee="at_least_once"))
    process = sink.process
    for row in rows:
        process(Tuple(None, row, "src"))
    sink.close()
    elapsed = time.perf_counter() - started
    if acks.acked != len(rows):
        raise SystemExit(f"bench: only {acks.acked} of {len(rows)} rows were committed ({acks.failed[:1]})")
    return elapsed, sink.stats()["batches_committed"]


def make_table(n: int) -> pa.Table:
    rows = make_rows(n)
    return pa.table({
        "word": pa.array([r["word"] for r in rows], pa.string()),
        "count": pa.array([r["count"] for r in rows], pa.int64()),
        "event_time": pa.array([r["event_time"] for r in rows], pa.timestamp("us", tz="UTC")),
    })


def _best_interleaved(fns: dict[str, Callable[[Path], None]], repeats: int, work: Path) -> dict[str, float]:
    """Best wall time of each fn(fresh directory) over `repeats` rounds, the fns taking turns in each
    round, so a burst of other load on the machine hits them alike; the best is the least disturbed."""
    best = {name: float("inf") for name in fns}
    for i in range(repeats):
        for name, fn in fns.items():
            out = work / f"{name}-{i}"
            started = time.perf_counter()
            fn(out)
            best[name] = min(best[name], time.perf_counter() - started)
            shutil.rmtree(out, ignore_errors=True)
    return best


def engine_writes(spark, sizes: list[int], repeats: int, work: Path) -> list[dict]:
    """One large batch per size, written by each engine; SparkStager's time split into its steps."""
    stager = SparkStager(lambda: spark)
    stager.stage(make_table(100), work / "warm")  # JIT and the reader/writer classes
    out = []
    for n in sizes:
        table = make_table(n)

        def old_path(d: Path) -> None:
            spark.createDataFrame(table).coalesce(1).write.parquet(str(d))

        def transfer_only(d: Path) -> None:
            d.mkdir(parents=True)
            pq.write_table(table, d / "batch.parquet", compression="none")

        src = work / f"src-{n}"
        transfer_only(src)

        def spark_job_only(d: Path) -> None:
            spark.read.schema(spark_schema(table.schema)).parquet(str(src)).coalesce(1) \
                .write.mode("error").option("compression", "snappy").parquet(str(d))

        row = {"rows": n, **_best_interleaved({
            "pyarrow": lambda d: ArrowStager().stage(table, d),
            "spark": lambda d: stager.stage(table, d),
            "transfer": transfer_only,
            "job": spark_job_only,
            "old": old_path,
        }, repeats, work / f"n{n}")}
        shutil.rmtree(src, ignore_errors=True)
        print(f"engines, {n:,} rows: pyarrow {row['pyarrow']:.2f}s, SparkStager {row['spark']:.2f}s "
              f"(transfer {row['transfer']:.2f}s + Spark job {row['job']:.2f}s), old path {row['old']:.2f}s",
              flush=True)
        out.append(row)
    small = make_table(1)
    fixed = _best_interleaved({"fixed": lambda d: stager.stage(small, d)}, repeats, work)["fixed"]
    return out + [{"rows": 1, "fixed": fixed}]


def render_engines(rows: list[dict], notes: list[str]) -> str:
    lines = ["| batch rows | pyarrow `write_table` s | SparkStager s | SparkStager vs pyarrow | "
             "of which: transfer file s | Spark read+write job s | old `createDataFrame(arrow)` s | old vs pyarrow |",
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        if "fixed" in r:
            continue
        lines.append(f"| {r['rows']:,} | {r['pyarrow']:.2f} | {r['spark']:.2f} | {r['pyarrow'] / r['spark']:.3f} | "
                     f"{r['transfer']:.2f} | {r['job']:.2f} | {r['old']:.2f} | {r['pyarrow'] / r['old']:.3f} |")
    return "\n".join(lines + [""] + notes)


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
    ap.add_argument("--master", default="local[*]", help="Spark master: local[*] (default), spark://..., sc://...")
    ap.add_argument("--engine-rows", default="200000,1000000",
                    help="batch sizes for the engine comparison, comma-separated ('' to skip)")
    ap.add_argument("--repeats", type=int, default=3, help="engine comparison: best of this many writes")
    ap.add_argument("--no-write", action="store_true", help="do not update docs/PERFORMANCE.md")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "PERFORMANCE.md")
    args = ap.parse_args(argv)
    if args.rows < 1 or args.batch_rows < 1:
        ap.error("--rows and --batch-rows must be >= 1")

    MASTER["url"] = args.master
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
        sizes = [int(x) for x in args.engine_rows.split(",") if x.strip()]
        engines = engine_writes(spark, sizes, max(1, args.repeats), work / "engines") if sizes else []
    finally:
        shutil.rmtree(work, ignore_errors=True)

    notes = [
        f"`python bench/sink.py --rows {args.rows} --batch-rows {args.batch_rows}` on "
        f"{dt.date.today().isoformat()}: {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"PySpark {spark.version} ({args.master}), pyarrow {pa.__version__}. "
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
        "the transfer file and Spark's read and Parquet encoding, which grow with the rows. Larger batches "
        "amortise only the fixed part. Commits run on the committer thread, overlapping process().",
    ]
    block = render(results, notes)
    if engines:
        fixed = next(r["fixed"] for r in engines if "fixed" in r)
        big = max((r for r in engines if "fixed" not in r), key=lambda r: r["rows"])
        block += "\n\n### The engines alone, on large batches\n\n" + render_engines(engines, [
            f"The same `pa.Table` (one batch) written by each engine, best of {args.repeats}, on {args.master}. "
            "SparkStager is the sink's Spark engine: pyarrow writes an uncompressed transfer file, then one Spark "
            "job reads it on an executor and writes the batch's snappy file (`coalesce(1)`). The old path "
            "parallelised the Arrow batches from the driver, so its one task carried every row "
            "(Spark's 'task of very large size' warning).",
            "",
            f"Where SparkStager's time goes, at {big['rows']:,} rows (each step timed alone): the transfer file "
            f"{big['transfer']:.2f} s, the Spark job that reads it and writes the batch {big['job']:.2f} s, of "
            f"which a fixed {fixed:.2f} s is what a whole one-row batch costs (job scheduling, the output "
            "committer's renames). The rest is the JVM decoding the transfer file into rows and parquet-mr "
            "encoding them in one task: it grows with the rows, so larger batches do not close the gap to "
            "pyarrow's C++ writer, which writes the dictionary-friendly columns here in well under a second.",
        ])
    print()
    print(block)
    if not args.no_write:
        write_into_performance_md(block, args.out)
        print(f"\nwritten to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
