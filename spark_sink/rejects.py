"""RejectedRows: the JSON-lines file of rows that did not fit the table, with the reason.

One line per row: {"time": iso, "table": t, "batch": id or null, "reason": "...",
"row": {...}}. Values JSON cannot hold are written as strings (datetimes in ISO
8601, bytes as hex, anything else as repr). Thread-safe: the topology's thread
and the committer thread both write here.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import threading
from pathlib import Path
from typing import Any, Mapping


def _json_default(v: Any) -> Any:
    if isinstance(v, (dt.datetime, dt.date, dt.time)):
        return v.isoformat()
    if isinstance(v, (bytes, bytearray)):
        return {"base64": base64.b64encode(bytes(v)).decode()}
    if isinstance(v, (set, frozenset)):
        return sorted(v, key=repr)
    return repr(v)


class RejectedRows:
    """Append rejected rows to `path`; flush() makes them durable (fsync)."""

    def __init__(self, path: Path, table: str) -> None:
        self.path = Path(path)
        self.table = table
        self._lock = threading.Lock()
        self._fh: Any = None
        self.count = 0

    def write(self, row: Mapping[str, Any] | Any, reason: str, batch: str | None = None) -> None:
        record = {
            "time": dt.datetime.now(dt.timezone.utc).isoformat(),
            "table": self.table,
            "batch": batch,
            "reason": reason,
            "row": row,
        }
        try:
            line = json.dumps(record, default=_json_default, ensure_ascii=False)
        except (TypeError, ValueError):  # e.g. non-str dict keys
            record["row"] = repr(row)
            line = json.dumps(record, default=_json_default, ensure_ascii=False)
        with self._lock:
            if self._fh is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._fh = open(self.path, "a", encoding="utf-8")
            self._fh.write(line + "\n")
            self.count += 1

    def flush(self, durable: bool = True) -> None:
        with self._lock:
            if self._fh is not None:
                self._fh.flush()
                if durable:
                    os.fsync(self._fh.fileno())

    def close(self) -> None:
        with self._lock:
            if self._fh is not None:
                self._fh.flush()
                os.fsync(self._fh.fileno())
                self._fh.close()
                self._fh = None


def read_rejected(path: Path) -> list[dict[str, Any]]:
    """Every record of a rejected-rows file (for tests and tools)."""
    if not Path(path).exists():
        return []
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]
