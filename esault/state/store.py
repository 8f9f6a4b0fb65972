"""StateStore: per-key state rows in SQLite, one file per unit, shared by the unit's SPUs in any process.

A row is (key_hash, key, state): `key` and `state` are the codec's msgpack
bytes, `key_hash` the routing hash (indexed: checkpoints will read an SPU's
key range in one query). SQLite in WAL mode with a busy timeout lets
SPUs of several local processes write the same file; each call is one
transaction. Today idle PEs park their state here (esault.state.parking);
docs/CHECKPOINTS.md builds checkpoints on the same rows.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

__all__ = ["StateStore"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS states (
    key BLOB PRIMARY KEY,
    key_hash INTEGER NOT NULL,
    state BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS states_by_hash ON states (key_hash);
"""


class StateStore:
    """One unit's parked state. Not thread-safe: one instance per SPU actor (open as many as needed)."""

    def __init__(self, path: str | Path, busy_timeout: float = 30.0) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._busy_timeout = busy_timeout
        self._db = sqlite3.connect(self.path, timeout=busy_timeout, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA synchronous=NORMAL")
        # Switching to WAL and creating the schema take locks SQLite's busy handler does not wait for:
        # SPUs opening the file at the same moment retry instead of failing.
        self._retrying(lambda: (self._db.execute("PRAGMA journal_mode=WAL"), self._db.executescript(_SCHEMA)))

    def _retrying(self, operation: Callable[[], T]) -> T:
        """Run `operation`, again while the file is locked by another connection, up to busy_timeout."""
        deadline = time.monotonic() + self._busy_timeout
        pause = threading.Event()
        while True:
            try:
                return operation()
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() >= deadline:
                    raise
                if self._db.in_transaction:
                    self._db.rollback()
                pause.wait(0.005)

    def put_many(self, rows: list[tuple[int, bytes, bytes]]) -> None:
        """Store (key_hash, key, state) rows, replacing a key's older row; one transaction."""
        if rows:
            self._retrying(lambda: self._put(rows))

    def _put(self, rows: list[tuple[int, bytes, bytes]]) -> None:
        if rows:
            with self._db:
                self._db.execute("BEGIN IMMEDIATE")
                self._db.executemany("INSERT OR REPLACE INTO states (key_hash, key, state) VALUES (?, ?, ?)",
                                     [(_signed(h), k, s) for h, k, s in rows])

    def take(self, key: bytes) -> bytes | None:
        """Remove and return a key's state, or None."""
        with self._db:
            self._db.execute("BEGIN IMMEDIATE")
            row = self._db.execute("SELECT state FROM states WHERE key = ?", (key,)).fetchone()
            if row is not None:
                self._db.execute("DELETE FROM states WHERE key = ?", (key,))
        return None if row is None else row[0]

    def take_many(self, keys: list[bytes]) -> list[bytes | None]:
        """Remove and return the states of `keys` (None where a key has none), in order; one transaction."""
        return self._retrying(lambda: self._take(keys))

    def _take(self, keys: list[bytes]) -> list[bytes | None]:
        out: list[bytes | None] = []
        with self._db:
            self._db.execute("BEGIN IMMEDIATE")
            for key in keys:
                row = self._db.execute("SELECT state FROM states WHERE key = ?", (key,)).fetchone()
                out.append(None if row is None else row[0])
            self._db.executemany("DELETE FROM states WHERE key = ?", [(k,) for k in keys])
        return out

    def __len__(self) -> int:
        return self._db.execute("SELECT COUNT(*) FROM states").fetchone()[0]

    def close(self) -> None:
        self._db.close()


def _signed(h: int) -> int:
    """SQLite integers are signed 64-bit; key hashes fit (KEY_SPACE_MAX < 2**63), checked here."""
    if not 0 <= h < 2**63:
        raise ValueError(f"key hash {h} is outside [0, 2**63)")
    return h
