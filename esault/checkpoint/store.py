"""CheckpointStore: the job's durable record of checkpoints and the state rows they consist of.

One SQLite file per job, `<data_dir>/<job>/checkpoints.sqlite`, shared by the
driver and by the SPUs of every local worker process (WAL mode, busy timeout;
a static cluster needs data_dir on a shared path, docs/CHECKPOINTS.md):

- `checkpoints(epoch, kind, completed_at, positions)`: a row exists only for a
  *completed* checkpoint, written by the coordinator after every SPU acked;
  `positions` are the spouts' (msgpack). kind: checkpoint | savepoint | final.
- `buckets(unit, bucket, epoch, writer, entries)`: the keys of one key-hash
  bucket (2**BUCKET_BITS buckets over the hash space) that changed in that
  epoch on SPU `writer`, as one msgpack array `[key, state, key, state, ...]`
  (incremental). One row, one encode and one insert carry many keys: a
  checkpoint costs ~2 us per changed key where a row per key cost ~7 us
  (docs/PERFORMANCE.md). A non-keyed instance's row has bucket
  `instance_slot(i)` = -1 - i, outside every key range, and its whole state.

State at checkpoint E is, per key, its entry in the latest row of a completed
epoch <= E: rows of epochs that never completed (an SPU wrote them, then a
failure came) are invisible and compacted away. Any layout can read any key
range, so a restore may use a different parallelism than the checkpoint had.
Compaction merges a bucket's rows into one, never across a savepoint: the
latest checkpoint and every savepoint stay exact (an older periodic checkpoint
does not, so only those two can be restored). Epoch numbers are never reused:
`next_epoch()` starts above everything stored.
"""

from __future__ import annotations

import bisect
import sqlite3
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from esault.errors import ConfigError
from esault.keyhash import KEY_SPACE_MAX, key_hash
from esault.state.sqlite import SharedSqlite
from esault.transport.codec import decode, encode

__all__ = ["BUCKET_BITS", "CheckpointStore", "Completed", "bucket_of", "instance_slot", "pack_entries"]

BUCKET_BITS = 12
"""4096 buckets: a full snapshot of 100k keys is ~25 keys per row; a small delta is a row per key, as before."""
_SHIFT = KEY_SPACE_MAX.bit_length() - BUCKET_BITS
_MERGED = -1
"""The writer of a row compaction merged from several."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS checkpoints (
    epoch INTEGER PRIMARY KEY,
    kind TEXT NOT NULL,
    completed_at REAL NOT NULL,
    positions BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS buckets (
    unit TEXT NOT NULL,
    bucket INTEGER NOT NULL,
    epoch INTEGER NOT NULL,
    writer INTEGER NOT NULL,
    entries BLOB NOT NULL,
    PRIMARY KEY (unit, bucket, epoch, writer)
);
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


def instance_slot(instance: int) -> int:
    """The bucket of a non-keyed instance's row: negative, outside every key range."""
    return -1 - instance


def bucket_of(hash_: int) -> int:
    """The bucket of a key hash (in [0, KEY_SPACE_MAX])."""
    return hash_ >> _SHIFT


def pack_entries(flat: list) -> bytes:
    """One bucket row's entries, `[key, state, key, state, ...]`; SerializationError if one cannot be encoded."""
    return encode(flat)


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
        old = self._db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'states'").fetchone()
        if old is not None:
            raise ConfigError(f"{self.path} holds checkpoints in the format of an older esault (a row per key); "
                              "start the job afresh (esault run --fresh, or JobConfig(fresh_start=True))")

    def _write(self, statements: Callable[[sqlite3.Connection], None]) -> None:
        self._file.write(statements)

    # --- SPUs: state rows ---------------------------------------------------------

    def write_states(self, unit: str, epoch: int, writer: int, rows: Iterable[tuple[int, bytes]]) -> None:
        """Store (bucket, entries) rows SPU `writer` made of `unit` for `epoch`; one transaction."""
        rows = [(unit, bucket, epoch, writer, entries) for bucket, entries in rows]
        if rows:
            self._write(lambda db: db.executemany(
                "INSERT OR REPLACE INTO buckets (unit, bucket, epoch, writer, entries) VALUES (?, ?, ?, ?, ?)", rows))

    def read_range(self, unit: str, epoch: int, lo: int, hi: int) -> dict[Any, Any]:
        """key -> state of `unit`'s keys hashing into [lo, hi], as of completed checkpoint `epoch`."""
        lo, hi = max(lo, 0), min(hi, KEY_SPACE_MAX)
        first, last = bucket_of(lo), bucket_of(hi)
        rows = self._retrying(lambda: self._db.execute(
            "SELECT s.bucket, s.entries FROM buckets s JOIN checkpoints c ON c.epoch = s.epoch "
            "WHERE s.unit = ? AND s.epoch <= ? AND s.bucket BETWEEN ? AND ? ORDER BY s.epoch, s.rowid",
            (unit, epoch, first, last)).fetchall())
        out: dict[Any, Any] = {}
        for bucket, blob in rows:  # ascending epochs: the latest entry of each key wins
            flat = decode(blob)
            pairs = zip(flat[::2], flat[1::2])
            if bucket == first or bucket == last:  # a bucket the range cuts: keep its keys in [lo, hi] only
                out.update((k, s) for k, s in pairs if lo <= key_hash(k) <= hi)
            else:
                out.update(pairs)
        return out

    def read_slot(self, unit: str, epoch: int, slot: int) -> Any:
        """A non-keyed instance's state (slot = instance_slot(i)) as of completed checkpoint `epoch`, or None."""
        row = self._retrying(lambda: self._db.execute(
            "SELECT s.entries FROM buckets s JOIN checkpoints c ON c.epoch = s.epoch "
            "WHERE s.unit = ? AND s.epoch <= ? AND s.bucket = ? ORDER BY s.epoch DESC, s.rowid DESC LIMIT 1",
            (unit, epoch, slot)).fetchone())
        return None if row is None else decode(row[0])

    def read_key(self, unit: str, key: Any) -> tuple[bool, Any]:
        """(found, state) of one key in its latest completed checkpoint (a parked key waking up)."""
        cursor = self._retrying(lambda: self._db.execute(
            "SELECT s.entries FROM buckets s JOIN checkpoints c ON c.epoch = s.epoch WHERE s.unit = ? AND s.bucket = ? "
            "ORDER BY s.epoch DESC, s.rowid DESC", (unit, bucket_of(key_hash(key)))))
        for (blob,) in cursor:
            flat = decode(blob)
            for i in range(0, len(flat), 2):
                if flat[i] == key:
                    return True, flat[i + 1]
        return False, None

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
                               "UNION ALL SELECT MAX(epoch) FROM buckets)").fetchone()
        return (row[0] or 0) + 1

    def get_meta(self, name: str) -> str | None:
        row = self._db.execute("SELECT value FROM meta WHERE name = ?", (name,)).fetchone()
        return None if row is None else row[0]

    def set_meta(self, name: str, value: str) -> None:
        self._write(lambda db: db.execute("INSERT OR REPLACE INTO meta (name, value) VALUES (?, ?)", (name, value)))

    def compact(self, epoch: int) -> int:
        """Drop what no restore can need once `epoch` is complete; returns how many rows went.

        Rows of epochs < `epoch` that never completed go. A bucket's completed
        rows <= `epoch` are merged into one (at the newest of them), except
        across a savepoint: every savepoint and the latest checkpoint restore
        exactly as before. Rows are read outside the write lock: SPUs only
        write epochs above `epoch`, so only the short rewrite blocks them.
        """
        savepoints = [e for (e,) in self._db.execute(
            "SELECT epoch FROM checkpoints WHERE kind = 'savepoint' AND epoch <= ? ORDER BY epoch", (epoch,))]
        listing = self._retrying(lambda: self._db.execute(
            "SELECT s.rowid, s.unit, s.bucket, s.epoch FROM buckets s JOIN checkpoints c ON c.epoch = s.epoch "
            "WHERE s.epoch <= ? ORDER BY s.unit, s.bucket, s.epoch, s.rowid", (epoch,)).fetchall())
        groups: dict[tuple[str, int, int], list[tuple[int, int]]] = {}
        for rowid, unit, bucket, row_epoch in listing:
            segment = bisect.bisect_left(savepoints, row_epoch)  # rows up to and including a savepoint stay apart
            groups.setdefault((unit, bucket, segment), []).append((rowid, row_epoch))
        merged: list[tuple[str, int, int, int, bytes]] = []
        gone: list[tuple[int]] = []
        for (unit, bucket, _), rows in groups.items():
            if len(rows) < 2:
                continue
            blobs = [self._db.execute("SELECT entries FROM buckets WHERE rowid = ?", (rowid,)).fetchone()[0]
                     for rowid, _ in rows]
            if bucket < 0:  # an instance's row is its whole state: the newest wins
                entries = blobs[-1]
            else:
                state: dict[Any, Any] = {}
                for blob in blobs:
                    flat = decode(blob)
                    state.update(zip(flat[::2], flat[1::2]))
                entries = encode([x for pair in state.items() for x in pair])
            merged.append((unit, bucket, rows[-1][1], _MERGED, entries))
            gone.extend((rowid,) for rowid, _ in rows)

        deleted = [0]

        def run(db: sqlite3.Connection) -> None:
            cur = db.execute(
                "DELETE FROM buckets WHERE epoch < ? AND epoch NOT IN (SELECT epoch FROM checkpoints)", (epoch,))
            deleted[0] += cur.rowcount
            db.executemany("DELETE FROM buckets WHERE rowid = ?", gone)
            db.executemany("INSERT INTO buckets (unit, bucket, epoch, writer, entries) VALUES (?, ?, ?, ?, ?)", merged)
            deleted[0] += len(gone) - len(merged)
        self._write(run)
        return deleted[0]

    def state_bytes(self) -> tuple[int, int]:
        """(rows, bytes of entries) stored: for the state-size measurement."""
        row = self._db.execute("SELECT COUNT(*), COALESCE(SUM(LENGTH(entries)), 0) FROM buckets").fetchone()
        return int(row[0]), int(row[1])

    def close(self) -> None:
        self._file.close()


def _completed(row: tuple) -> Completed:
    positions = decode(row[3]) or {}
    return Completed(int(row[0]), str(row[1]), float(row[2]),
                     {str(u): {int(i): p for i, p in by.items()} for u, by in positions.items()})
