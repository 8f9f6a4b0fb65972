"""Dead letters: tuples the runtime gave up on after max_retries, one JSON line each.

A JSON-lines file is greppable, appendable from several threads, and readable
after a crash up to the last complete line.
"""

from __future__ import annotations

import json
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from esault.errors import EsaultError

__all__ = ["DeadLetterWriter", "read_dead_letters"]


def _jsonable(value: Any) -> Any:
    """value itself if it round-trips as JSON, else its repr()."""
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return repr(value)
    return value


def _error_text(error: BaseException | str) -> str:
    if isinstance(error, BaseException):
        return f"{type(error).__name__}: {error}"
    return str(error)


class DeadLetterWriter:
    """Appends one JSON line per dead letter to `path`; thread-safe.

    Fields: topology, unit, msg_id, key, value, error, attempts, time (ISO
    8601, UTC). msg_id, key and value are stored as JSON when they can be,
    else as their repr(). Parent directories are created on the first write.
    Each line is flushed before write() returns.
    """

    def __init__(self, path: Path | str, now: Callable[[], datetime] | None = None) -> None:
        self._path = Path(path)
        self._now = now or (lambda: datetime.now(timezone.utc))
        self._lock = threading.Lock()
        self._fh: Any = None
        self._count = 0
        self._unshipped: list[str] = []  # lines not yet copied to durable storage (take_unshipped)
        self.ships = False
        """Keep the lines for take_unshipped() (a job whose checkpoints are on an object store: the driver's
        disk is not durable, so each completed checkpoint copies the new ones there)."""

    @property
    def path(self) -> Path:
        return self._path

    @property
    def count(self) -> int:
        """Dead letters written by this writer."""
        return self._count

    def write(
        self,
        *,
        topology: str,
        unit: str,
        msg_id: Any,
        key: Any,
        value: Any,
        error: BaseException | str,
        attempts: int,
    ) -> dict[str, Any]:
        """Append one dead letter; returns the record as written."""
        record = {
            "topology": topology,
            "unit": unit,
            "msg_id": _jsonable(msg_id),
            "key": _jsonable(key),
            "value": _jsonable(value),
            "error": _error_text(error),
            "attempts": attempts,
            "time": self._now().isoformat(),
        }
        line = json.dumps(record, ensure_ascii=False, allow_nan=False) + "\n"
        with self._lock:
            if self._fh is None:
                self._path.parent.mkdir(parents=True, exist_ok=True)
                self._fh = self._path.open("a", encoding="utf-8")
            self._fh.write(line)
            self._fh.flush()
            self._count += 1
            if self.ships:
                self._unshipped.append(line)
        return record

    def take_unshipped(self) -> str:
        """The lines written since the last call (ships on), as one JSON-lines text; "" if none."""
        with self._lock:
            lines, self._unshipped = self._unshipped, []
        return "".join(lines)

    def close(self) -> None:
        """Close the file; a later write() reopens it in append mode."""
        with self._lock:
            if self._fh is not None:
                self._fh.close()
                self._fh = None

    def __enter__(self) -> "DeadLetterWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_dead_letters(path: Path | str) -> list[dict[str, Any]]:
    """Every dead letter in the file, oldest first; [] if the file does not exist.

    A torn last line (the process died mid-write) is skipped; a bad line
    elsewhere raises EsaultError naming file:line.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    lines = text.split("\n")
    out = []
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            if lineno == len(lines):  # no trailing newline: a torn final write
                break
            raise EsaultError(
                f"{path}:{lineno}: not a dead-letter JSON line ({exc.msg}); "
                "was the file edited by hand or written by something else?"
            ) from None
        if not isinstance(record, dict):
            raise EsaultError(f"{path}:{lineno}: expected a JSON object per line, got {type(record).__name__}")
        out.append(record)
    return out
