"""Encode a batch's rows as an Arrow table, setting aside rows that do not fit.

Pure (pyarrow, no Spark). The schema's per-row check decides what fits; a
rejected row gets a reason naming its column instead of failing the whole
column's conversion.

Fast path: when every row's fields are schema columns and every column's
Python value types are exactly the ones its type accepts, no row can fail the
check, so it is skipped and Arrow converts whole columns (Arrow still refuses
out-of-range ints; then the per-row path runs). Otherwise every row is checked.
O(rows x columns) either way; the fast path is about 3x cheaper.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

import pyarrow as pa

from spark_sink.schema import Column, TableSchema, arrow_type

_ARROW_ERRORS = (pa.ArrowException, OverflowError, TypeError, ValueError)

# Exact Python types that can never fail the check for a column type (ints may
# still be out of range: Arrow raises for those, and the checked path runs).
_SAFE_TYPES: dict[str, frozenset[type]] = {
    "STRING": frozenset({str}),
    "BIGINT": frozenset({int}),
    "INT": frozenset({int}),
    "DOUBLE": frozenset({float, int}),
    "FLOAT": frozenset({float, int}),
    "BOOLEAN": frozenset({bool}),
    "TIMESTAMP": frozenset({dt.datetime}),
    "DATE": frozenset({dt.date}),
    "BINARY": frozenset({bytes, bytearray}),
}
_NONE = frozenset({type(None)})


@dataclass(slots=True)
class Encoded:
    """The rows that fit, as Arrow (None if none did), and (index, reason) of those that did not."""

    table: pa.Table | None
    rows: int
    rejected: list[tuple[int, str]] = field(default_factory=list)


def encode(rows: list[Mapping[str, Any]], schema: TableSchema, drop: Iterable[str] = ()) -> Encoded:
    """Check rows against `schema`; build Arrow columns of the good ones.

    drop: columns not stored in the files (partition columns, constant per batch
    and encoded in the directory name).
    """
    dropped = set(drop)
    file_cols = [c for c in schema.columns if c.name not in dropped]
    if rows and _all_fit(rows, schema):
        try:
            return Encoded(_table(rows, file_cols), len(rows), [])
        except _ARROW_ERRORS:
            pass  # e.g. an int out of range: find it row by row
    return _encode_checked(rows, schema, file_cols)


def _all_fit(rows: list[Mapping[str, Any]], schema: TableSchema) -> bool:
    """True only if no row can fail schema.check() (except int ranges, see module doc)."""
    if not all(map(frozenset(schema.names).issuperset, rows)):
        return False
    for c in schema.columns:
        allowed = (_SAFE_TYPES[c.type] | _NONE) if c.nullable else _SAFE_TYPES[c.type]
        name = c.name
        if not set(map(type, [r.get(name) for r in rows])) <= allowed:
            return False
    return True


def _table(rows: list[Mapping[str, Any]], file_cols: list[Column]) -> pa.Table:
    arrays = [pa.array([r.get(c.name) for r in rows], type=arrow_type(c.type)) for c in file_cols]
    fields = [pa.field(c.name, arrow_type(c.type), nullable=c.nullable) for c in file_cols]
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def _encode_checked(rows: list[Mapping[str, Any]], schema: TableSchema, file_cols: list[Column]) -> Encoded:
    check = schema.checker()
    rejected: list[tuple[int, str]] = []
    good: list[Mapping[str, Any]] = []
    for i, row in enumerate(rows):
        reason = check(row)
        if reason is None:
            good.append(row)
        else:
            rejected.append((i, reason))
    if not good:
        return Encoded(None, 0, rejected)
    try:
        return Encoded(_table(good, file_cols), len(good), rejected)
    except _ARROW_ERRORS:
        pass
    # The check accepted a value Arrow cannot hold (e.g. an int a double cannot
    # represent exactly): find such rows one by one and reject them too.
    bad = {i for i, _ in rejected}
    for i, row in enumerate(rows):
        if i in bad:
            continue
        for c in file_cols:
            try:
                pa.array([row.get(c.name)], type=arrow_type(c.type))
            except _ARROW_ERRORS as exc:
                rejected.append((i, f"column {c.name!r} ({c.type}) cannot hold {row.get(c.name)!r}: {exc}"))
                bad.add(i)
                break
    rejected.sort()
    good = [r for i, r in enumerate(rows) if i not in bad]
    if not good:
        return Encoded(None, 0, rejected)
    return Encoded(_table(good, file_cols), len(good), rejected)
