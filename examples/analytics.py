"""Batch analytics over a SparkSink table with Spark SQL: top-k words and rows per minute.

After a word count run (its sink table is `word_counts`):

    python examples/analytics.py --data-dir esault-data/wordcount
    python examples/analytics.py --warehouse /data/warehouse --table word_counts --k 20
    python examples/analytics.py --data-dir esault-data/wordcount --sql "SELECT COUNT(*) FROM word_counts"

Without a run, --demo writes a small table first (with the sink's pyarrow
engine, into a temporary directory) and queries that.
"""

from __future__ import annotations

import argparse
import datetime as dt
import random
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from esault.errors import SinkError  # noqa: E402
from spark_sink import analytics  # noqa: E402


def write_demo_table(warehouse: Path, table: str) -> None:
    """A few hundred (word, running count) rows over three minutes, committed by SparkSink."""
    from esault.testing.harness import BoltHarness
    from spark_sink import SparkSink

    params = {"table": table, "schema": "word STRING, count BIGINT", "key_column": "word",
              "value_column": "count", "engine": "pyarrow", "warehouse": warehouse, "batch_rows": 100}
    start = dt.datetime(2025, 1, 1, 12, 0, tzinfo=dt.timezone.utc)
    counts: dict[str, int] = {}
    words = ["spark", "sink", "stream", "actor", "split", "merge", "key", "tuple"]
    rnd = random.Random(7)
    with BoltHarness(SparkSink, params, data_dir=warehouse.parent, topology="demo") as h:
        for i in range(300):
            word = rnd.choices(words, weights=[1 / (r + 1) for r in range(len(words))])[0]
            counts[word] = counts.get(word, 0) + 1
            h.feed(word, {"count": counts[word], "event_time": start + dt.timedelta(seconds=i * 0.6)})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Spark SQL over a SparkSink table")
    where = ap.add_mutually_exclusive_group()
    where.add_argument("--warehouse", type=Path, help="directory holding the table directories")
    where.add_argument("--data-dir", type=Path, help="the job's data directory (warehouse = <data-dir>/warehouse)")
    where.add_argument("--demo", action="store_true", help="write a small demo table first and query it")
    ap.add_argument("--table", default="word_counts")
    ap.add_argument("--k", type=int, default=10, help="how many top words")
    ap.add_argument("--word-column", default="word")
    ap.add_argument("--count-column", default="count",
                    help="running count column: top words by its MAX (use --agg count to count rows)")
    ap.add_argument("--agg", choices=("max", "sum", "count"), default="max")
    ap.add_argument("--sql", help="run this Spark SQL instead (the table is registered first)")
    args = ap.parse_args(argv)

    if args.demo:
        warehouse = Path(tempfile.mkdtemp(prefix="esault-analytics-")) / "warehouse"
        write_demo_table(warehouse, args.table)
    elif args.data_dir is not None:
        warehouse = analytics.default_warehouse(args.data_dir)
    else:
        warehouse = analytics.resolve_warehouse(args.warehouse)

    try:
        df = analytics.open_table(args.table, warehouse)
    except SinkError as exc:
        print(f"analytics: {exc}", file=sys.stderr)
        return 2
    spark = df.sparkSession
    if args.sql:
        result = spark.sql(args.sql)
        print(analytics.format_rows([tuple(r) for r in result.collect()], result.columns))
        return 0

    value = None if args.agg == "count" else args.count_column
    top = analytics.top_k(args.table, k=args.k, key=args.word_column, value=value, agg=args.agg, spark=spark)
    label = "rows" if args.agg == "count" else f"{args.agg}({args.count_column})"
    print(f"Top {args.k} {args.word_column}s in {args.table} ({warehouse / args.table}):")
    print(analytics.format_rows(top, (args.word_column, label)))
    print()
    per_minute = analytics.counts_per_minute(args.table, spark=spark)
    print(f"Rows per minute of event_time ({len(per_minute)} minutes):")
    print(analytics.format_rows([(m.strftime("%Y-%m-%d %H:%M"), n) for m, n in per_minute], ("minute (UTC)", "rows")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
