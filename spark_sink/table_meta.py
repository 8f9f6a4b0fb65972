"""TableMeta: a table's row schema and partition columns, stored once in _esault/schema.json.

Every sink instance writing the table (other SPUs, restarted jobs) and every
reader (spark_sink.analytics) reads the same file, so an inferred schema is
decided once and then enforced everywhere. The first writer to store it wins
(an atomic link), a racing writer adopts the winner's. The file carries the
CRC-32 of its content: a changed file is SinkFileDamaged, naming the ways out.
"""

from __future__ import annotations

import json
import os
import uuid
import zlib
from dataclasses import dataclass
from pathlib import Path

from esault.errors import SinkFileDamaged
from spark_sink.schema import Column, TableSchema


@dataclass(frozen=True)
class TableMeta:
    """columns: what each row must fit (including row-valued partition columns).
    partitions: the directory levels, outermost first, ending with esault_batch."""

    columns: TableSchema
    partitions: tuple[Column, ...]

    @property
    def partition_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.partitions)

    def data_columns(self) -> TableSchema:
        """Columns stored in the Parquet files (row columns minus partition columns)."""
        return self.columns.without(self.partition_names)

    def to_json(self) -> str:
        content = {
            "version": 1,
            "columns": [[c.name, c.type, c.nullable] for c in self.columns.columns],
            "partitions": [[c.name, c.type] for c in self.partitions],
        }
        return json.dumps({**content, "crc": _crc(content)}, indent=1)

    @classmethod
    def from_json(cls, text: str) -> "TableMeta":
        """ValueError if the text is not what to_json() wrote (its CRC, when it has one, fails)."""
        data = json.loads(text)
        crc = data.pop("crc", None)
        if crc is not None and crc != _crc(data):
            raise ValueError("its content fails its CRC")
        cols = TableSchema(tuple(Column(n, t, bool(nl)) for n, t, nl in data["columns"]))
        parts = tuple(Column(n, t) for n, t in data["partitions"])
        return cls(cols, parts)

    def describe(self) -> str:
        return f"columns ({self.columns.ddl()}) partitioned by ({', '.join(self.partition_names)})"


def load_meta(path: Path) -> TableMeta | None:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        return TableMeta.from_json(text)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise SinkFileDamaged(
            f"the table metadata {path} is damaged: {exc}. It holds the table's schema and partition columns, "
            "written once by the sink. Ways out: put back a copy of the file from a backup; or delete it and run "
            "again: the sink writes it again from its declared schema (or infers one from the next rows; check that "
            "it matches the data already in the table)") from None


def _crc(content: dict) -> int:
    return zlib.crc32(json.dumps(content, sort_keys=True, separators=(",", ":")).encode())


def store_meta(path: Path, meta: TableMeta) -> TableMeta:
    """Store meta unless the file exists; return what is stored (ours or the first writer's)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(meta.to_json())
        fh.flush()
        os.fsync(fh.fileno())
    try:
        os.link(tmp, path)
    except FileExistsError:
        pass
    finally:
        tmp.unlink()
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    stored = load_meta(path)
    assert stored is not None
    return stored
