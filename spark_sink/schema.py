"""Table schemas: parse a declared schema, infer one from rows, check rows against it.

Pure: no Spark import. A schema is a tuple of Columns with Spark SQL type
names; `check(row)` says why a row does not fit (or None), and the Arrow
mapping in `arrow_type()` is what the encoder builds columns with.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

from esault.errors import SchemaError

_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)

TYPE_ALIASES: dict[str, str] = {
    "STRING": "STRING",
    "BIGINT": "BIGINT",
    "LONG": "BIGINT",
    "INT": "INT",
    "INTEGER": "INT",
    "DOUBLE": "DOUBLE",
    "FLOAT": "FLOAT",
    "BOOLEAN": "BOOLEAN",
    "BOOL": "BOOLEAN",
    "TIMESTAMP": "TIMESTAMP",
    "DATE": "DATE",
    "BINARY": "BINARY",
}
"""Accepted type names (case-insensitive) and the Spark SQL type each means."""

SUPPORTED_TYPES = ("STRING", "BIGINT", "INT", "DOUBLE", "FLOAT", "BOOLEAN", "TIMESTAMP", "DATE", "BINARY")

BATCH_COLUMN = "esault_batch"
"""The partition column holding each row's batch id; added by the sink, never declared."""

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _in(lo_hi: tuple[int, int]) -> Callable[[Any], bool]:
    lo, hi = lo_hi
    return lambda v: type(v) is int and lo <= v <= hi


_CHECKS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "STRING": (lambda v: type(v) is str, "a str"),
    "BIGINT": (_in(_INT64), "an int in the 64-bit range"),
    "INT": (_in(_INT32), "an int in the 32-bit range"),
    "DOUBLE": (lambda v: type(v) is float or type(v) is int, "a float or int"),
    "FLOAT": (lambda v: type(v) is float or type(v) is int, "a float or int"),
    "BOOLEAN": (lambda v: type(v) is bool, "a bool"),
    "TIMESTAMP": (lambda v: isinstance(v, dt.datetime), "a datetime"),
    "DATE": (lambda v: type(v) is dt.date, "a date (not a datetime)"),
    "BINARY": (lambda v: isinstance(v, (bytes, bytearray)), "bytes"),
}


def check_column_name(name: Any, where: str) -> None:
    if not isinstance(name, str) or not _NAME.match(name):
        raise SchemaError(
            f"{where}: column name {name!r} is invalid; use letters, digits and '_', "
            "not starting with a digit (e.g. 'word_count')"
        )


def normalize_type(type_name: Any, where: str) -> str:
    if not isinstance(type_name, str) or type_name.strip().upper() not in TYPE_ALIASES:
        raise SchemaError(
            f"{where}: unsupported type {type_name!r}; use one of {', '.join(SUPPORTED_TYPES)}"
        )
    return TYPE_ALIASES[type_name.strip().upper()]


@dataclass(frozen=True, slots=True)
class Column:
    """One table column: a name, a Spark SQL type from SUPPORTED_TYPES, nullability."""

    name: str
    type: str
    nullable: bool = True

    def __post_init__(self) -> None:
        check_column_name(self.name, "schema")
        object.__setattr__(self, "type", normalize_type(self.type, f"column {self.name!r}"))

    def ddl(self) -> str:
        return f"`{self.name}` {self.type}" + ("" if self.nullable else " NOT NULL")


@dataclass(frozen=True)
class TableSchema:
    """The ordered columns of a table's data (partition columns are described separately)."""

    columns: tuple[Column, ...]
    _by_name: dict[str, Column] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        seen: dict[str, str] = {}
        for c in self.columns:
            low = c.name.lower()
            if low in seen:
                raise SchemaError(
                    f"schema declares column {c.name!r} twice (Spark column names are "
                    f"case-insensitive: {seen[low]!r} and {c.name!r}); keep one"
                )
            seen[low] = c.name
        object.__setattr__(self, "columns", tuple(self.columns))
        object.__setattr__(self, "_by_name", {c.name: c for c in self.columns})

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def column(self, name: str) -> Column:
        try:
            return self._by_name[name]
        except KeyError:
            raise SchemaError(f"schema has no column {name!r}; columns are: {', '.join(self.names)}") from None

    def with_column(self, column: Column) -> "TableSchema":
        return TableSchema(self.columns + (column,))

    def without(self, names: Iterable[str]) -> "TableSchema":
        drop = set(names)
        return TableSchema(tuple(c for c in self.columns if c.name not in drop))

    def ddl(self) -> str:
        """'`a` STRING, `b` BIGINT NOT NULL' -- parse_schema() reads it back."""
        return ", ".join(c.ddl() for c in self.columns)

    def to_json(self) -> str:
        return json.dumps([[c.name, c.type, c.nullable] for c in self.columns])

    @classmethod
    def from_json(cls, text: str) -> "TableSchema":
        return cls(tuple(Column(n, t, bool(nl)) for n, t, nl in json.loads(text)))

    def checker(self) -> Callable[[Mapping[str, Any]], str | None]:
        """A fast check(row) -> reason or None, with the per-column tests bound once."""
        cols = [(c.name, c.nullable, *_CHECKS[c.type], c.type) for c in self.columns]
        names = frozenset(self.names)

        def check(row: Mapping[str, Any]) -> str | None:
            if not names.issuperset(row):
                extra = sorted(k for k in row if k not in names)
                return (
                    f"field(s) {', '.join(map(repr, extra))} not in the table schema "
                    f"(columns: {', '.join(self.names)}); declare them, or drop them in to_row()"
                )
            for name, nullable, ok, expected, type_name in cols:
                v = row.get(name)
                if v is None:
                    if not nullable:
                        return f"column {name!r} is NOT NULL but the row has no value for it"
                elif not ok(v):
                    return (
                        f"column {name!r} is {type_name} and needs {expected}, "
                        f"got {type(v).__name__} {_short(v)}"
                    )
            return None

        return check

    def check(self, row: Mapping[str, Any]) -> str | None:
        """Why `row` does not fit (missing NOT NULL, wrong type, unknown field), or None."""
        return self.checker()(row)

    def arrow_schema(self) -> Any:
        import pyarrow as pa

        return pa.schema([pa.field(c.name, arrow_type(c.type), nullable=c.nullable) for c in self.columns])


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def arrow_type(type_name: str) -> Any:
    """The Arrow type Spark reads back as `type_name` (timestamps are UTC instants)."""
    import pyarrow as pa

    return {
        "STRING": pa.string(),
        "BIGINT": pa.int64(),
        "INT": pa.int32(),
        "DOUBLE": pa.float64(),
        "FLOAT": pa.float32(),
        "BOOLEAN": pa.bool_(),
        "TIMESTAMP": pa.timestamp("us", tz="UTC"),
        "DATE": pa.date32(),
        "BINARY": pa.binary(),
    }[type_name]


def parse_schema(spec: Any) -> TableSchema | None:
    """Read a declared schema; None means "infer from the first batch".

    Accepted forms, all equivalent:
      "word STRING, count BIGINT NOT NULL"
      [("word", "STRING"), ("count", "BIGINT")]      (or "name TYPE" strings)
      {"word": "STRING", "count": "BIGINT"}
    """
    if spec is None or isinstance(spec, TableSchema):
        return spec
    if isinstance(spec, str):
        parts = [p.strip() for p in spec.split(",")]
        if not spec.strip() or any(not p for p in parts):
            raise SchemaError(
                f"schema {spec!r} has an empty column; write 'name TYPE, name TYPE', e.g. 'word STRING, count BIGINT'"
            )
        return TableSchema(tuple(_parse_ddl_column(p) for p in parts))
    if isinstance(spec, Mapping):
        return TableSchema(tuple(Column(n, t) for n, t in spec.items()))
    if isinstance(spec, Sequence):
        cols = []
        for item in spec:
            if isinstance(item, str):
                cols.append(_parse_ddl_column(item))
            elif isinstance(item, Sequence) and len(item) == 2:
                cols.append(Column(item[0], item[1]))
            else:
                raise SchemaError(
                    f"schema entry {item!r} is not a (name, type) pair; "
                    "write [('word', 'STRING'), ('count', 'BIGINT')]"
                )
        if not cols:
            raise SchemaError("schema is an empty list; declare at least one column or pass schema=None to infer")
        return TableSchema(tuple(cols))
    raise SchemaError(
        f"schema must be a DDL string, a list of (name, type) pairs, a dict or None, got {type(spec).__name__}"
    )


def _parse_ddl_column(text: str) -> Column:
    words = text.replace("`", "").split()
    if len(words) == 2:
        return Column(words[0], words[1])
    if len(words) == 4 and [w.upper() for w in words[2:]] == ["NOT", "NULL"]:
        return Column(words[0], words[1], nullable=False)
    raise SchemaError(
        f"schema column {text!r} is not 'name TYPE' or 'name TYPE NOT NULL' (e.g. 'count BIGINT')"
    )


def _python_type(v: Any) -> str | None:
    t = type(v)
    if t is str:
        return "STRING"
    if t is bool:
        return "BOOLEAN"
    if t is int:
        return "BIGINT"
    if t is float:
        return "DOUBLE"
    if t is dt.datetime or isinstance(v, dt.datetime):
        return "TIMESTAMP"
    if t is dt.date:
        return "DATE"
    if t is bytes or t is bytearray:
        return "BINARY"
    return None


def infer_schema(rows: Iterable[Mapping[str, Any]]) -> TableSchema:
    """A schema for rows: columns in first-seen order, types from the first non-null value.

    int and float in one column widen to DOUBLE; a column only ever None is
    STRING. Fields whose values have no supported type, or whose names are not
    valid column names, get no column: rows carrying them are then rejected.
    """
    types: dict[str, str | None] = {}
    for row in rows:
        for name, v in row.items():
            if not isinstance(name, str) or not _NAME.match(name):
                continue
            seen = types.get(name)
            if v is None:
                types.setdefault(name, None)
                continue
            t = _python_type(v)
            if t is None:
                types[name] = seen if name in types else "UNSUPPORTED"
                continue
            if seen is None or seen == "UNSUPPORTED":
                types[name] = t
            elif {seen, t} == {"BIGINT", "DOUBLE"}:
                types[name] = "DOUBLE"
    cols = tuple(Column(n, t or "STRING") for n, t in types.items() if t != "UNSUPPORTED")
    if not cols:
        raise SchemaError("cannot infer a schema: the first batch has no field with a supported value type")
    return TableSchema(cols)
