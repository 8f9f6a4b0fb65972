"""Drive a SparkSink the way the runtime does under exactly_once (pyarrow engine, no JVM), and read its table.

Shared by tests/unit/test_sink_epochs.py and tests/system/test_spark_sink_epochs.py (and the latter's
SIGKILLed child processes, which import it by module name).
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow.dataset as ds

from esault.dsl.context import TopologyContext
from esault.dsl.tuple import Tuple
from spark_sink import SparkSink

A = [("a", 1), ("b", 2)]
B = [("c", 3), ("d", 4)]
C = [("e", 5)]


def open_sink(tmp_path: Path, restored: int | None = None, spu_id: int = 1, engine=None, table: str = "t",
              **params) -> SparkSink:
    """Instance 0 of sink `table` (word STRING, n BIGINT) under tmp_path/wh, opened at checkpoint `restored`."""
    sink = SparkSink(table=table, schema="word STRING, n BIGINT", key_column="word", value_column="n",
                     engine=engine or "pyarrow", warehouse=tmp_path / "wh", partition_by=[], **params)
    sink.open(TopologyContext("job", "sink", spu_id=spu_id, data_dir=tmp_path, instance=0,
                              guarantee="exactly_once", restored_epoch=restored))
    return sink


def feed(sink: SparkSink, rows: list[tuple[str, int]]) -> None:
    view = Tuple()
    for word, n in rows:
        view.key, view.value = word, n
        sink.process(view)


def table_dir(tmp_path: Path) -> Path:
    return tmp_path / "wh" / "t"


def rows_in(root: Path) -> list[tuple[str, int]]:
    """Every (word, n) a reader sees in the table at `root`: published batches only (staging is under '_esault')."""
    files = []
    for folder, subdirs, names in os.walk(root):  # never into '_esault': the sink renames staging there meanwhile
        subdirs[:] = [d for d in subdirs if d != "_esault"]
        files += [os.path.join(folder, n) for n in names if n.endswith(".parquet")]
    if not files:
        return []
    dataset = ds.dataset(files, format="parquet", partitioning="hive", partition_base_dir=str(root))
    data = dataset.to_table(columns=["word", "n"]).to_pydict()
    return sorted(zip(data["word"], data["n"]))
