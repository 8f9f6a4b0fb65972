"""CheckpointStore: the job's durable record of checkpoints and the state rows they consist of.

One SQLite file per job, `<data_dir>/<job>/checkpoints.sqlite`, shared by the
driver and by the SPUs of every local worker process (WAL mode, busy timeout;
a static cluster needs data_dir on a shared path, docs/CHECKPOINTS.md):

- `checkpoints(epoch, kind, completed_at, positions)`: a row exists only for a
  *completed* checkpoint, written by the coordinator after every SPU acked;
  `positions` are the spouts' (msgpack). kind: checkpoint | savepoint | final.
- `states(unit, key, epoch, key_hash, state)`: one row per key that changed
  in that epoch (incremental). A key-grouped PE's row has its routing hash;
  a non-keyed instance (a shuffle bolt, a chained stage) has key_hash
  -1 - instance, so no key range ever includes it.

State at checkpoint E is, per key, its latest row of a completed epoch <= E:
rows of epochs that never completed (an SPU wrote them, then a failure came)
are invisible and compacted away. Any layout can read any key range, so a
restore may use a different parallelism than the checkpoint had. Epoch
numbers are never reused: `next_epoch()` starts above everything stored.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from esault.state.sqlite import SharedSqlite
from esault.transport.codec import decode, encode

__all__ = ["CheckpointStore", "Completed", "instance_slot"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS checkpoints (
    epoch INTEGER PRIMARY KEY,
    kind TEXT NOT NULL,
    completed_at REAL NOT NULL,
    positions BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS states (
    unit TEXT NOT NULL,
    key BLOB NOT NULL,
    epoch INTEGER NOT NULL,
    key_hash INTEGER NOT NULL,
    state BLOB NOT NULL,
    PRIMARY KEY (unit, key, epoch)
);
CREATE INDEX IF NOT EXISTS states_by_hash ON states (unit, key_hash);
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


def instance_slot(instance: int) -> int:
    """The key_hash of a non-keyed instance's row: negative, outside every key range."""
    return -1 - instance


class Completed:
    """A completed checkpoint as recorded: epoch, kind and the spouts' positions by (unit, instance)."""

    __slots__ = ("epoch", "kind", "completed_at", "positions")

    def __init__(self, epoch: int, kind: str, completed_at: float, positions: dict[str, dict[int, Any]]) -> None:
        self.epoch = epoch
        self.kind = kind
        self.completed_at = completed_at
        self.positions = positions

    def __repr__(self) -> str:
        return f"Completed(epoch={self.epoch}, kind={self.kind!r})"


class CheckpointStore:
    """One connection to the job's checkpoint file. Not thread-safe: one instance per thread."""

    def __init__(self, path: str | Path, busy_timeout: float = 30.0) -> None:
        self._file = SharedSqlite(path, _SCHEMA, busy_timeout, synchronous="FULL")
        self.path = self._file.path
        self._db = self._file.db
        self._retrying = self._file.retrying

    def _write(self, statements: Callable[[sqlite3.Connection], None]) -> None:
        self._file.write(statements)

    # --- SPUs: state rows ---------------------------------------------------------

    def write_states(self, unit: str, epoch: int, rows: Iterable[tuple[int, bytes, bytes]]) -> None:
        """Store (key_hash, key, state) rows of `unit` for `epoch`; one transaction."""
        rows = [(unit, key, epoch, h, state) for h, key, state in rows]
        if rows:
            self._write(lambda db: db.executemany(
                "INSERT OR REPLACE INTO states (unit, key, epoch, key_hash, state) VALUES (?, ?, ?, ?, ?)", rows))

    def read_range(self, unit: str, epoch: int, lo: int, hi: int) -> dict[bytes, bytes]:
        """key -> state of `unit`'s keys hashing into [lo, hi], as of completed checkpoint `epoch`."""
        return self._read(unit, epoch, "s.key_hash BETWEEN ? AND ?", (lo, hi))

    def read_slot(self, unit: str, epoch: int, slot: int) -> bytes | None:
        """A non-keyed instance's state (slot = instance_slot(i)) as of completed checkpoint `epoch`."""
        found = self._read(unit, epoch, "s.key_hash = ?", (slot,))
        return next(iter(found.values()), None)

    def read_key(self, unit: str, key: bytes) -> bytes | None:
        """One key's state in its latest completed checkpoint (a parked key waking up)."""
        row = self._retrying(lambda: self._db.execute(
            "SELECT s.state FROM states s JOIN checkpoints c ON c.epoch = s.epoch WHERE s.unit = ? AND s.key = ? "
            "ORDER BY s.epoch DESC LIMIT 1", (unit, key)).fetchone())
        return None if row is None else row[0]

    def _read(self, unit: str, epoch: int, where: str, args: tuple) -> dict[bytes, bytes]:
        rows = self._retrying(lambda: self._db.execute(
            "SELECT s.key, s.state FROM states s JOIN checkpoints c ON c.epoch = s.epoch "
            f"WHERE s.unit = ? AND s.epoch <= ? AND {where} ORDER BY s.epoch", (unit, epoch, *args)).fetchall())
        return {key: state for key, state in rows}  # ascending epochs: the latest row of each key wins

    # --- the coordinator: the record ------------------------------------------------

    def complete(self, epoch: int, kind: str, positions: dict[str, dict[int, Any]]) -> None:
        """Record checkpoint `epoch` as complete (durable on return): from now on it can be restored."""
        blob = encode({unit: {int(i): p for i, p in by.items()} for unit, by in positions.items()})
        self._write(lambda db: db.execute(
            "INSERT OR REPLACE INTO checkpoints (epoch, kind, completed_at, positions) VALUES (?, ?, ?, ?)",
            (epoch, kind, time.time(), blob)))

    def latest(self, kind: str | None = None) -> Completed | None:
        """The newest completed checkpoint (of `kind` if given), or None."""
        query = "SELECT epoch, kind, completed_at, positions FROM checkpoints"
        args: tuple = ()
        if kind is not None:
            query += " WHERE kind = ?"
            args = (kind,)
        row = self._retrying(lambda: self._db.execute(query + " ORDER BY epoch DESC LIMIT 1", args).fetchone())
        return None if row is None else _completed(row)

    def get(self, epoch: int) -> Completed | None:
        row = self._retrying(lambda: self._db.execute(
            "SELECT epoch, kind, completed_at, positions FROM checkpoints WHERE epoch = ?", (epoch,)).fetchone())
        return None if row is None else _completed(row)

    def completed(self) -> list[Completed]:
        rows = self._db.execute("SELECT epoch, kind, completed_at, positions FROM checkpoints ORDER BY epoch")
        return [_completed(r) for r in rows.fetchall()]

    def next_epoch(self) -> int:
        """An epoch number above every one stored (completed or not): never reused."""
        row = self._db.execute("SELECT MAX(m) FROM (SELECT MAX(epoch) AS m FROM checkpoints "
                               "UNION ALL SELECT MAX(epoch) FROM states)").fetchone()
        return (row[0] or 0) + 1

    def get_meta(self, name: str) -> str | None:
        row = self._db.execute("SELECT value FROM meta WHERE name = ?", (name,)).fetchone()
        return None if row is None else row[0]

    def set_meta(self, name: str, value: str) -> None:
        self._write(lambda db: db.execute("INSERT OR REPLACE INTO meta (name, value) VALUES (?, ?)", (name, value)))

    def compact(self, epoch: int) -> int:
        """Delete rows no restore can need once `epoch` is complete; returns how many.

        A row goes if a newer completed row of its key is <= `epoch` and no
        savepoint lies between the two, or if its epoch (< `epoch`) never completed.
        """
        deleted = [0]

        def run(db: sqlite3.Connection) -> None:
            cur = db.execute(
                "DELETE FROM states WHERE epoch < ? AND epoch NOT IN (SELECT epoch FROM checkpoints)", (epoch,))
            deleted[0] += cur.rowcount
            cur = db.execute(
                "DELETE FROM states WHERE rowid IN (SELECT s.rowid FROM states s WHERE s.epoch < ? AND EXISTS ("
                " SELECT 1 FROM states n JOIN checkpoints c ON c.epoch = n.epoch"
                " WHERE n.unit = s.unit AND n.key = s.key AND n.epoch > s.epoch AND n.epoch <= ?"
                " AND NOT EXISTS (SELECT 1 FROM checkpoints p WHERE p.kind = 'savepoint'"
                "                 AND p.epoch >= s.epoch AND p.epoch < n.epoch)))", (epoch, epoch))
            deleted[0] += cur.rowcount
        self._write(run)
        return deleted[0]

    def state_bytes(self) -> tuple[int, int]:
        """(rows, bytes of key + state) stored: for the state-size measurement."""
        row = self._db.execute("SELECT COUNT(*), COALESCE(SUM(LENGTH(key) + LENGTH(state)), 0) FROM states").fetchone()
        return int(row[0]), int(row[1])

    def close(self) -> None:
        self._file.close()


def _completed(row: tuple) -> Completed:
    positions = decode(row[3]) or {}
    return Completed(int(row[0]), str(row[1]), float(row[2]),
                     {str(u): {int(i): p for i, p in by.items()} for u, by in positions.items()})
