"""SQLite connections shared by processes: WAL mode, a busy timeout, and retries where SQLite does not wait.

Both stores of esault (parked state, the checkpoint store) are files several
local processes write at once. SQLite's busy handler waits for most locks,
but not for the WAL switch and schema creation on open, nor for a write that
upgrades a read transaction; `retrying` covers those.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


class SharedSqlite:
    """One connection to a file other processes use too. Not thread-safe: one per thread."""

    def __init__(self, path: str | Path, schema: str, busy_timeout: float = 30.0, synchronous: str = "NORMAL") -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.busy_timeout = busy_timeout
        self.db = sqlite3.connect(self.path, timeout=busy_timeout, isolation_level=None, check_same_thread=False)
        self.db.execute(f"PRAGMA synchronous={synchronous}")
        self.retrying(lambda: (self.db.execute("PRAGMA journal_mode=WAL"), self.db.executescript(schema)))

    def retrying(self, operation: Callable[[], T]) -> T:
        """Run `operation`, again while the file is locked by another connection, up to busy_timeout."""
        deadline = time.monotonic() + self.busy_timeout
        pause = threading.Event()
        while True:
            try:
                return operation()
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() >= deadline:
                    raise
                if self.db.in_transaction:
                    self.db.rollback()
                pause.wait(0.005)

    def write(self, statements: Callable[[sqlite3.Connection], T]) -> T:
        """Run `statements` in one immediate (write-locking) transaction, retried while locked."""
        def run() -> T:
            with self.db:
                self.db.execute("BEGIN IMMEDIATE")
                return statements(self.db)
        return self.retrying(run)

    def close(self) -> None:
        self.db.close()
