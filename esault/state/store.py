"""StateStore: per-key state rows in SQLite, one file per unit, shared by the unit's SPUs in any process.

A row is (key_hash, key, state): `key` and `state` are the codec's msgpack
bytes, `key_hash` the routing hash (indexed: checkpoints will read an SPU's
key range in one query). SQLite in WAL mode with a busy timeout lets
SPUs of several local processes write the same file; each call is one
transaction. Today idle PEs park their state here (esault.state.parking);
docs/CHECKPOINTS.md builds checkpoints on the same rows.
"""

from __future__ import annotations

from pathlib import Path

from esault.state.sqlite import SharedSqlite

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
        self._file = SharedSqlite(path, _SCHEMA, busy_timeout)
        self.path = self._file.path
        self._db = self._file.db
        self._retrying = self._file.retrying

    def put_many(self, rows: list[tuple[int, bytes, bytes]]) -> None:
        """Store (key_hash, key, state) rows, replacing a key's older row; one transaction."""
        if rows:
            self._file.write(lambda db: db.executemany(
                "INSERT OR REPLACE INTO states (key_hash, key, state) VALUES (?, ?, ?)",
                [(_signed(h), k, s) for h, k, s in rows]))

    def take(self, key: bytes) -> bytes | None:
        """Remove and return a key's state, or None."""
        return self.take_many([key])[0]

    def take_many(self, keys: list[bytes]) -> list[bytes | None]:
        """Remove and return the states of `keys` (None where a key has none), in order; one transaction."""
        def take(db) -> list[bytes | None]:
            out: list[bytes | None] = []
            for key in keys:
                row = db.execute("SELECT state FROM states WHERE key = ?", (key,)).fetchone()
                out.append(None if row is None else row[0])
            db.executemany("DELETE FROM states WHERE key = ?", [(k,) for k in keys])
            return out
        return self._file.write(take)

    def __len__(self) -> int:
        return self._db.execute("SELECT COUNT(*) FROM states").fetchone()[0]

    def close(self) -> None:
        self._file.close()


def _signed(h: int) -> int:
    """SQLite integers are signed 64-bit; key hashes fit (KEY_SPACE_MAX < 2**63), checked here."""
    if not 0 <= h < 2**63:
        raise ValueError(f"key hash {h} is outside [0, 2**63)")
    return h
