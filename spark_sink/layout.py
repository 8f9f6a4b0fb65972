"""Where rows go on disk: partition values of a row, and the table's directory tree.

Pure (no Spark). A table directory looks like:

    <table>/
      event_date=2025-01-31/event_hour=7/esault_batch=<batch id>/part-00000-<batch id>.snappy.parquet
      _esault/                 hidden from Spark and pyarrow (leading '_', no '=')
        schema.json            the table's data columns, written once
        commits/<writer>.log   one append-only commit log per writer
        staging/<batch id>/    a batch being written; never visible to readers
        rejected/<writer>.jsonl   rows that did not fit the schema, with the reason

Each batch holds rows of exactly one partition value and is published by one
directory rename, so a reader sees all of a batch or none of it.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from esault.errors import ConfigError, SchemaError
from spark_sink.schema import BATCH_COLUMN, Column, check_column_name

DERIVED_PARTITIONS = ("event_date", "event_hour")
"""The default partitioning: UTC date and hour of each row's event time."""

NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"
"""How Spark (and Hive) name the directory of a null partition value."""

# Spark's ExternalCatalogUtils.escapePathName escapes exactly these characters.
_ESCAPE = frozenset([chr(c) for c in range(0x01, 0x20)] + list("\"#%'*/:=?\\\x7f{[]^"))

_UTC = dt.timezone.utc


def escape_path_name(value: str) -> str:
    """A partition value as Spark writes it in a directory name (%XX escapes)."""
    if not any(ch in _ESCAPE for ch in value):
        return value
    return "".join(f"%{ord(ch):02X}" if ch in _ESCAPE else ch for ch in value)


def partition_dir_value(value: Any) -> str:
    if value is None:
        return NULL_PARTITION
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, str):
        return escape_path_name(value) if value else NULL_PARTITION
    return str(value)


def writer_id(topology: str, unit: str, spu_id: int) -> str:
    """A file-name-safe, stable name for one sink instance: '<topology>.<unit>.<spu>'.

    Characters outside [A-Za-z0-9_-] in the topology or unit name become '_' and a
    short hash of the original name is appended, so distinct names stay distinct.
    """

    def safe(name: str) -> str:
        clean = re.sub(r"[^A-Za-z0-9_-]", "_", name)
        if clean != name or not clean:
            clean += "-" + hashlib.sha1(name.encode()).hexdigest()[:8]
        return clean

    return f"{safe(topology)}.{safe(unit)}.{int(spu_id)}"


def instance_writer_id(topology: str, unit: str, instance: int) -> str:
    """The writer name of an exactly-once sink instance: '<topology>.<unit>.i<instance>'.

    Stable across the SPU relaunches of a rollback or a restart (an SPU id is
    not), so the instance finds the epochs it staged before.
    """
    return writer_id(topology, unit, 0).rsplit(".", 1)[0] + f".i{int(instance)}"


def epoch_batch_id(writer: str, epoch: int, part: int) -> str:
    """The id of the `part`-th partition's batch of checkpoint `epoch`: the same rows always get the same id."""
    return f"{writer}.e{epoch:012d}.p{part:04d}"


def batch_id(writer: str, seq: int) -> str:
    """The deterministic id of a writer's seq-th batch; sorts in commit order."""
    return f"{writer}.{seq:010d}"


@dataclass(frozen=True, slots=True)
class TablePaths:
    """The directories of one table (see the module docstring)."""

    root: Path

    @property
    def meta(self) -> Path:
        return self.root / "_esault"

    @property
    def schema_file(self) -> Path:
        return self.meta / "schema.json"

    @property
    def staging(self) -> Path:
        return self.meta / "staging"

    def commit_log(self, writer: str) -> Path:
        return self.meta / "commits" / f"{writer}.log"

    def rejected(self, writer: str) -> Path:
        return self.meta / "rejected" / f"{writer}.jsonl"


class PartitionScheme:
    """How a row is placed: its event time is normalised and its partition values read.

    partition_by=None derives event_date (DATE) and event_hour (INT) from the
    row's event time in UTC; a list of column names partitions by those row
    fields (str, int, bool or date values); () means unpartitioned. Every
    table also has the innermost partition column esault_batch.
    """

    def __init__(self, partition_by: tuple[str, ...] | None, event_time_column: str | None) -> None:
        if event_time_column is not None:
            check_column_name(event_time_column, "event_time_column")
        self.event_time_column = event_time_column
        self.derived = partition_by is None
        if partition_by is None:
            if event_time_column is None:
                raise ConfigError(
                    "SparkSink: the default partitioning (event_date, event_hour) needs an event time; "
                    "set event_time_column, or pass partition_by=[...] or partition_by=[] (unpartitioned)"
                )
            self.columns: tuple[str, ...] = DERIVED_PARTITIONS
        else:
            for name in partition_by:
                check_column_name(name, "partition_by")
                if name == BATCH_COLUMN:
                    raise ConfigError(f"partition_by must not name {BATCH_COLUMN!r}: the sink adds it to every table")
            if len(set(partition_by)) != len(partition_by):
                raise ConfigError(f"partition_by names a column twice: {list(partition_by)!r}")
            self.columns = tuple(partition_by)

    def derived_columns(self) -> tuple[Column, ...]:
        """Partition columns that are not row fields (derived ones, and esault_batch)."""
        derived = (Column("event_date", "DATE"), Column("event_hour", "INT")) if self.derived else ()
        return derived + (Column(BATCH_COLUMN, "STRING"),)

    def place(self, row: dict[str, Any], now: float) -> tuple[Any, ...]:
        """Normalise row's event time in place and return its partition values.

        now: wall-clock epoch seconds, used when the row has no event time.
        Raises SchemaError (the row is rejected) for an unusable value.
        """
        col = self.event_time_column
        when: dt.datetime | None = None
        if col is not None:
            when = _as_utc(row.get(col), col, now)
            row[col] = when
        if self.derived:
            assert when is not None
            return (when.date(), when.hour)
        values = []
        for name in self.columns:
            v = row.get(name)
            if v is not None and type(v) not in (str, int, bool, dt.date):
                raise SchemaError(
                    f"partition column {name!r} needs a str, int, bool or date value, "
                    f"got {type(v).__name__} {v!r}"
                )
            values.append(v)
        return tuple(values)

    def partition_path(self, values: tuple[Any, ...]) -> str:
        """'event_date=2025-01-31/event_hour=7' ('' when unpartitioned)."""
        return "/".join(f"{n}={partition_dir_value(v)}" for n, v in zip(self.columns, values, strict=True))

    def batch_path(self, values: tuple[Any, ...], batch: str) -> str:
        head = self.partition_path(values)
        leaf = f"{BATCH_COLUMN}={batch}"
        return f"{head}/{leaf}" if head else leaf


def _as_utc(value: Any, col: str, now: float) -> dt.datetime:
    if value is None:
        return dt.datetime.fromtimestamp(now, _UTC)
    if type(value) is dt.datetime and value.tzinfo is _UTC:
        return value  # the common case, already normalised
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            return value.replace(tzinfo=_UTC)
        return value.astimezone(_UTC)
    if type(value) in (int, float):
        try:
            return dt.datetime.fromtimestamp(value, _UTC)
        except (OverflowError, OSError, ValueError):
            raise SchemaError(f"event time {col!r} = {value!r} is not a valid epoch time in seconds") from None
    raise SchemaError(
        f"event time {col!r} needs a datetime or epoch seconds (int/float), got {type(value).__name__} {value!r}"
    )


def parse_partition_by(value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return (value,)
    if isinstance(value, (list, tuple)):
        return tuple(value)
    raise ConfigError(
        f"partition_by must be None (event_date/event_hour), a column name or a list of names, got {value!r}"
    )

