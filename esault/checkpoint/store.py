"""CheckpointStore: the job's durable record of checkpoints and the state rows they consist of.

One SQLite file per job, `<data_dir>/<job>/checkpoints.sqlite`, shared by the
driver and by the SPUs of every local worker process (WAL mode, busy timeout;
a static cluster needs data_dir on a shared path, docs/CHECKPOINTS.md):

- `checkpoints(epoch, kind, completed_at, positions, rows, digest, checksum)`:
  a row (the checkpoint's manifest) exists only for a *completed* checkpoint,
  written by the coordinator after every SPU acked; `positions` are the
  spouts' and, per non-keyed bolt, the instances that took part, and whether
  the job's input had ended by it (msgpack `[positions, instances,
  input_ended]`; older stores: without the flag, or a bare positions map). kind:
  checkpoint | savepoint | final. `rows` and `digest` sum up the bucket rows
  of that epoch, `checksum` the manifest itself.
- `buckets(unit, bucket, epoch, writer, entries, checksum)`: the keys of one key-hash
  bucket (2**BUCKET_BITS buckets over the hash space) that changed in that
  epoch on SPU `writer`, as one msgpack array `[key, state, key, state, ...]`
  (incremental). One row, one encode and one insert carry many keys: a
  checkpoint costs ~2 us per changed key where a row per key cost ~7 us
  (docs/PERFORMANCE.md). A non-keyed instance's row has bucket
  `instance_slot(i)` = -1 - i, outside every key range, and its whole state,
  written at every checkpoint (an empty state too): so the latest row <= E of
  an instance that took part in E is its row of E, never an older one.

State at checkpoint E is, per key, its entry in the latest row of a completed
epoch <= E: rows of epochs that never completed (an SPU wrote them, then a
failure came) are invisible and compacted away. Any layout can read any key
range, so a restore may use a different parallelism than the checkpoint had.
Compaction at the oldest *retained* checkpoint merges a bucket's rows up to it
into one, never across a savepoint, and drops the manifests of the periodic
checkpoints before it: every checkpoint still recorded restores exactly (the
retained ones and every savepoint). Epoch numbers are never reused:
`next_epoch()` starts above everything stored or ever discarded.

Every row and manifest carries a CRC-32 (rows and manifests of an older
esault have none and are trusted). `verify()` reads them all and says which
checkpoints are intact: a damaged row of epoch e spoils every checkpoint >= e,
since those read it (docs/GUARANTEES.md, "Faults").
"""

from __future__ import annotations

import bisect
import itertools
import secrets
import sqlite3
import time
import zlib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from esault.errors import ConfigError, StoreDamaged
from esault.keyhash import KEY_SPACE_MAX, key_hash
from esault.state.sqlite import SharedSqlite
from esault.transport.codec import decode, encode

__all__ = ["BUCKET_BITS", "CheckpointStore", "Completed", "Verified", "bucket_of", "instance_slot", "pack_entries"]

BUCKET_BITS = 12
"""4096 buckets: a full snapshot of 100k keys is ~25 keys per row; a small delta is a row per key, as before."""
_SHIFT = KEY_SPACE_MAX.bit_length() - BUCKET_BITS
STORE_ID = "store_id"
"""The meta row naming the store this job's driver opened (mark_identity)."""
_MERGED = -1
"""The writer of a row compaction merged from several."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS checkpoints (
    epoch INTEGER PRIMARY KEY,
    kind TEXT NOT NULL,
    completed_at REAL NOT NULL,
    positions BLOB NOT NULL,
    rows INTEGER,
    digest INTEGER,
    checksum INTEGER
);
CREATE TABLE IF NOT EXISTS buckets (
    unit TEXT NOT NULL,
    bucket INTEGER NOT NULL,
    epoch INTEGER NOT NULL,
    writer INTEGER NOT NULL,
    entries BLOB NOT NULL,
    checksum INTEGER,
    PRIMARY KEY (unit, bucket, epoch, writer)
);
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
"""
_ADDED_COLUMNS = (("checkpoints", "rows", "INTEGER"), ("checkpoints", "digest", "INTEGER"),
                  ("checkpoints", "checksum", "INTEGER"), ("buckets", "checksum", "INTEGER"))
"""Columns a file made by an older esault lacks: added empty (NULL: written before checksums, trusted)."""


def row_checksum(unit: str, bucket: int, epoch: int, writer: int, entries: bytes) -> int:
    """CRC-32 of one bucket row, its place included (a row moved to another epoch or bucket fails too)."""
    return zlib.crc32(entries, zlib.crc32(f"{unit}\0{bucket}\0{epoch}\0{writer}\0".encode()))


def _rows_digest(checksums: list[tuple[str, int, int, int]]) -> tuple[int, int]:
    """(count, CRC-32) of an epoch's rows as (unit, bucket, writer, checksum): a lost row changes it."""
    return len(checksums), zlib.crc32(encode(sorted(checksums)))


def _manifest_checksum(epoch: int, kind: str, completed_at: float, positions: bytes, rows: int, digest: int) -> int:
    return zlib.crc32(positions, zlib.crc32(f"{epoch}\0{kind}\0{completed_at!r}\0{rows}\0{digest}\0".encode()))


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
    """A completed checkpoint as recorded: epoch, kind, the spouts' positions by (unit, instance), the
    instances of each non-keyed bolt that took part (their states are in its slots; None: not recorded), and
    `input_ended`: the job's input had ended by it (its bolts' finish() ran): a job restored from it does
    not call finish() again."""

    __slots__ = ("epoch", "kind", "completed_at", "positions", "instances", "input_ended")

    def __init__(self, epoch: int, kind: str, completed_at: float, positions: dict[str, dict[int, Any]],
                 instances: dict[str, list[int]] | None = None, input_ended: bool = False) -> None:
        self.epoch = epoch
        self.kind = kind
        self.completed_at = completed_at
        self.positions = positions
        self.instances = instances
        self.input_ended = input_ended

    def __repr__(self) -> str:
        return f"Completed(epoch={self.epoch}, kind={self.kind!r})"


class CheckpointStore:
    """One connection to the job's checkpoint file. Not thread-safe: one instance per thread."""

    def __init__(self, path: str | Path, busy_timeout: float = 30.0) -> None:
        try:
            self._file = SharedSqlite(path, _SCHEMA, busy_timeout, synchronous="FULL")
            self.path = self._file.path
            self.local_dir: Path | None = self.path.parent
            self._db = self._file.db
            self._retrying = self._file.retrying
            old = self._db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'states'").fetchone()
            if old is None:
                self._add_columns()
        except sqlite3.OperationalError:
            raise
        except sqlite3.DatabaseError as exc:  # not an SQLite file, or a damaged one
            raise damaged_store(Path(path), f"SQLite cannot open it ({exc})") from None
        if old is not None:
            raise ConfigError(f"{self.path} holds checkpoints in the format of an older esault (a row per key); "
                              "start the job afresh (esault run --fresh, or JobConfig(fresh_start=True))")

    def _add_columns(self) -> None:
        for table, column, kind in _ADDED_COLUMNS:
            present = {r[1] for r in self._db.execute(f"PRAGMA table_info({table})")}
            if column not in present:
                try:
                    self._write(lambda db: db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}"))
                except sqlite3.OperationalError as exc:
                    if "duplicate column" not in str(exc):  # another process added it first
                        raise

    def _write(self, statements: Callable[[sqlite3.Connection], None]) -> None:
        self._file.write(statements)

    # --- SPUs: state rows ---------------------------------------------------------

    def write_states(self, unit: str, epoch: int, writer: int, rows: Iterable[tuple[int, bytes]]) -> None:
        """Store (bucket, entries) rows SPU `writer` made of `unit` for `epoch`; one transaction."""
        rows = [(unit, bucket, epoch, writer, entries, row_checksum(unit, bucket, epoch, writer, entries))
                for bucket, entries in rows]
        if rows:
            self._write(lambda db: db.executemany(
                "INSERT OR REPLACE INTO buckets (unit, bucket, epoch, writer, entries, checksum) "
                "VALUES (?, ?, ?, ?, ?, ?)", rows))

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

    def read_key(self, unit: str, key: Any, epoch: int | None = None) -> tuple[bool, Any]:
        """(found, state) of one key in completed checkpoint `epoch` (None: the latest; a parked key waking up)."""
        last = (1 << 62) if epoch is None else epoch
        cursor = self._retrying(lambda: self._db.execute(
            "SELECT s.entries FROM buckets s JOIN checkpoints c ON c.epoch = s.epoch WHERE s.unit = ? AND s.bucket = ? "
            "AND s.epoch <= ? ORDER BY s.epoch DESC, s.rowid DESC", (unit, bucket_of(key_hash(key)), last)))
        for (blob,) in cursor:
            flat = decode(blob)
            for i in range(0, len(flat), 2):
                if flat[i] == key:
                    return True, flat[i + 1]
        return False, None

# --- the coordinator: the record ------------------------------------------------

    def complete(self, epoch: int, kind: str, positions: dict[str, dict[int, Any]],
                 instances: dict[str, Iterable[int]] | None = None, input_ended: bool = False) -> None:
        """Record checkpoint `epoch` as complete (durable on return): from now on it can be restored.
        `instances`: per non-keyed bolt, the instances whose states the checkpoint holds; `input_ended`: the
        job's input had ended by it (see Completed)."""
        blob = encode([{unit: {int(i): p for i, p in by.items()} for unit, by in positions.items()},
                       {unit: sorted(int(i) for i in ids) for unit, ids in (instances or {}).items()},
                       bool(input_ended)])
        now = time.time()

        def record(db: sqlite3.Connection) -> None:
            db.execute("INSERT OR REPLACE INTO checkpoints (epoch, kind, completed_at, positions) VALUES (?, ?, ?, ?)",
                       (epoch, kind, now, blob))
            _seal(db, [epoch])
        self._write(record)

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
        """An epoch number above every one stored (completed or not) or discarded: never reused."""
        row = self._db.execute("SELECT MAX(m) FROM (SELECT MAX(epoch) AS m FROM checkpoints "
                               "UNION ALL SELECT MAX(epoch) FROM buckets)").fetchone()
        return max(row[0] or 0, int(self.get_meta("discarded_upto") or 0)) + 1

    def rows_by_writer(self, epoch: int) -> dict[int, int]:
        """How many state rows each SPU wrote for `epoch`: the coordinator checks them against the acks."""
        return dict(self._retrying(lambda: self._db.execute(
            "SELECT writer, COUNT(*) FROM buckets WHERE epoch = ? GROUP BY writer", (epoch,)).fetchall()))

    def mark_identity(self) -> str:
        """Give the store a new identity (a job's driver, at its start) and return it: workers that open the file
        at the same path check that they see it (store_refusal), so none writes into a file the driver never reads."""
        identity = secrets.token_hex(8)
        self.set_meta(STORE_ID, identity)
        return identity

    def get_meta(self, name: str) -> str | None:
        row = self._db.execute("SELECT value FROM meta WHERE name = ?", (name,)).fetchone()
        return None if row is None else row[0]

    def set_meta(self, name: str, value: str) -> None:
        self._write(lambda db: db.execute("INSERT OR REPLACE INTO meta (name, value) VALUES (?, ?)", (name, value)))

    def compact(self, epoch: int) -> int:
        """Drop what no restore can need once `epoch`, the oldest retained checkpoint, is complete; returns
        how many rows went.

        Rows of epochs < `epoch` that never completed go. A bucket's completed
        rows <= `epoch` are merged into one, except across a savepoint: rows up
        to a savepoint land at the savepoint's epoch, later ones at `epoch`. The
        manifests of the periodic checkpoints before `epoch` go (no row is at
        their epochs any more): every checkpoint still recorded restores exactly.
        Rows are read outside the write lock: SPUs only write epochs above the
        latest completed one, so only the short rewrite blocks them.
        """
        savepoints = [e for (e,) in self._db.execute(
            "SELECT epoch FROM checkpoints WHERE kind = 'savepoint' AND epoch <= ? ORDER BY epoch", (epoch,))]
        bounds = [*savepoints, epoch]
        # One scan in (unit, bucket, epoch) order, streamed: a bucket's rows at a time in memory, not one query
        # per row (that was ~40% of a compaction's CPU: 28k rows of a word count's 7 epochs).
        scan = self._retrying(lambda: self._db.execute(
            "SELECT s.rowid, s.unit, s.bucket, s.epoch, s.entries, s.writer FROM buckets s "
            "JOIN checkpoints c ON c.epoch = s.epoch WHERE s.epoch <= ? ORDER BY s.unit, s.bucket, s.epoch, s.rowid",
            (epoch,)))
        merged: list[tuple[str, int, int, int, bytes, int]] = []
        gone: list[tuple[int]] = []

        def group_of(row: tuple) -> tuple[str, int, int]:
            segment = bisect.bisect_left(savepoints, row[3])  # rows up to and including a savepoint stay apart
            return row[1], row[2], bounds[segment]

        for (unit, bucket, target), group in itertools.groupby(scan, key=group_of):
            rows = list(group)
            if len(rows) == 1 and rows[0][3] == target:
                continue
            if len(rows) == 1:  # a lone row moves to its segment's epoch
                entries, writer = rows[0][4], rows[0][5]
            elif bucket < 0:  # an instance's row is its whole state: the newest wins
                entries, writer = rows[-1][4], _MERGED
            else:
                state: dict[Any, Any] = {}
                for row in rows:
                    flat = decode(row[4])
                    state.update(zip(flat[::2], flat[1::2]))
                entries, writer = encode([x for pair in state.items() for x in pair]), _MERGED
            merged.append((unit, bucket, target, writer, entries, row_checksum(unit, bucket, target, writer, entries)))
            gone.extend((row[0],) for row in rows)

        deleted = [0]

        def run(db: sqlite3.Connection) -> None:
            cur = db.execute(
                "DELETE FROM buckets WHERE epoch < ? AND epoch NOT IN (SELECT epoch FROM checkpoints)", (epoch,))
            deleted[0] += cur.rowcount
            db.executemany("DELETE FROM buckets WHERE rowid = ?", gone)
            db.executemany("INSERT INTO buckets (unit, bucket, epoch, writer, entries, checksum) "
                           "VALUES (?, ?, ?, ?, ?, ?)", merged)
            db.execute("DELETE FROM checkpoints WHERE epoch < ? AND kind != 'savepoint'", (epoch,))
            deleted[0] += len(gone) - len(merged)
            _seal(db, bounds)
        self._write(run)
        return deleted[0]

    # --- verification ----------------------------------------------------------------

    def verify(self) -> "Verified":
        """Check the whole file and every recorded checkpoint against its checksums (reads every row).

        Raises StoreDamaged if SQLite finds the file itself damaged (its pages, not just a row's bytes):
        then no checkpoint in it can be trusted."""
        try:
            problems = [r[0] for r in self._db.execute("PRAGMA quick_check(5)").fetchall()]
            if problems != ["ok"]:
                raise damaged_store(self.path, "SQLite's quick_check finds its pages damaged: " + "; ".join(problems))
            return self._verify_rows()
        except sqlite3.OperationalError:
            raise
        except sqlite3.DatabaseError as exc:
            raise damaged_store(self.path, f"SQLite cannot read it ({exc})") from None

    def _verify_rows(self) -> "Verified":
        damage: dict[int, str] = {}
        manifests: dict[int, tuple] = {}
        checkpoints: list[Completed] = []
        for row in self._db.execute("SELECT epoch, kind, completed_at, positions, rows, digest, checksum "
                                    "FROM checkpoints ORDER BY epoch"):
            epoch = row[0]
            if not isinstance(epoch, int):
                damage[-1] = f"a manifest's epoch is {epoch!r}"
                continue
            if row[6] is not None and (not isinstance(row[3], bytes) or not isinstance(row[2], float)
                                       or row[6] != _manifest_checksum(epoch, row[1], row[2], row[3], row[4], row[5])):
                damage[epoch] = f"the manifest of checkpoint {epoch} fails its checksum"
                continue
            try:
                checkpoints.append(_completed(row))
            except Exception as exc:  # noqa: BLE001 - trusted legacy manifest with unreadable bytes
                damage[epoch] = f"the manifest of checkpoint {epoch} cannot be decoded ({exc!r})"
                continue
            manifests[epoch] = row
        seen: dict[int, list[tuple[str, int, int, int]]] = {}
        for unit, bucket, epoch, writer, entries, checksum in self._db.execute(
                "SELECT unit, bucket, epoch, writer, entries, checksum FROM buckets"):
            if epoch not in manifests:
                continue  # an epoch that never completed
            if checksum is not None and (not isinstance(entries, bytes) or not isinstance(unit, str) or
                    checksum != row_checksum(unit, bucket, epoch, writer, entries)):
                damage.setdefault(epoch, f"a state row of checkpoint {epoch} (unit {unit!r}, bucket {bucket}, "
                                         f"SPU {writer}) fails its checksum")
            seen.setdefault(epoch, []).append((unit, bucket, writer, checksum))
        for epoch, row in manifests.items():
            if row[6] is None or epoch in damage:
                continue
            count, digest = _rows_digest(seen.get(epoch, []))
            if (count, digest) != (row[4], row[5]):
                damage[epoch] = (f"checkpoint {epoch} has {count} state rows where its manifest lists {row[4]}"
                                 if count != row[4] else f"the state rows of checkpoint {epoch} differ from its manifest")
        return Verified(self.path, checkpoints, damage)

    def discard_after(self, epoch: int) -> None:
        """Forget every checkpoint and row above `epoch` (damaged ones a restore fell back from); their epoch
        numbers are never used again."""
        top = self.next_epoch() - 1

        def run(db: sqlite3.Connection) -> None:
            db.execute("DELETE FROM checkpoints WHERE epoch > ?", (epoch,))
            db.execute("DELETE FROM buckets WHERE epoch > ?", (epoch,))
            db.execute("INSERT OR REPLACE INTO meta (name, value) VALUES ('discarded_upto', ?)", (str(top),))
        self._write(run)

    def state_bytes(self) -> tuple[int, int]:
        """(rows, bytes of entries) stored: for the state-size measurement."""
        row = self._db.execute("SELECT COUNT(*), COALESCE(SUM(LENGTH(entries)), 0) FROM buckets").fetchone()
        return int(row[0]), int(row[1])

    def close(self) -> None:
        self._file.close()


class Verified:
    """What verify() found: the readable checkpoints (oldest first) and, by epoch, what is damaged."""

    def __init__(self, path: Path, checkpoints: list[Completed], damage: dict[int, str]) -> None:
        self.path = path
        self.checkpoints = checkpoints
        self.damage = damage

    def get(self, epoch: int) -> Completed | None:
        return next((c for c in self.checkpoints if c.epoch == epoch), None)

    def spoiled(self, epoch: int) -> str | None:
        """Why checkpoint `epoch` cannot be restored (damage at or below it: it reads those rows), or None."""
        below = [e for e in self.damage if e <= epoch]
        return self.damage[min(below)] if below else None

    def newest_intact(self) -> Completed | None:
        return next((c for c in reversed(self.checkpoints) if self.spoiled(c.epoch) is None), None)

    @property
    def newest_recorded(self) -> int | None:
        """The newest epoch with a manifest, readable or not."""
        epochs = [c.epoch for c in self.checkpoints] + [e for e in self.damage if e >= 0]
        return max(epochs) if epochs else None


def damaged_store(path: Path, damage: str) -> StoreDamaged:
    """The error for a checkpoint store no checkpoint of which can be used: the file, the damage, the ways out."""
    return StoreDamaged(
        f"the checkpoint store {path} is damaged: {damage}. No checkpoint in it can be restored. Ways out: "
        f"run again with --fresh (JobConfig(fresh_start=True)) to start the job from the beginning without "
        f"these checkpoints (an exactly-once sink then retracts what this job committed and writes it again); "
        f"or put back a copy of {path.name} from a backup and run again, with --restore-from EPOCH "
        f"(JobConfig(restore_from=...)) to pick a savepoint in it")


def _seal(db: sqlite3.Connection, epochs: Iterable[int]) -> None:
    """Record each completed epoch's row count and digest in its manifest, and the manifest's checksum."""
    for epoch in set(epochs):
        found = db.execute("SELECT kind, completed_at, positions FROM checkpoints WHERE epoch = ?",
                           (epoch,)).fetchone()
        if found is None:
            continue
        count, digest = _rows_digest([tuple(r) for r in db.execute(
            "SELECT unit, bucket, writer, checksum FROM buckets WHERE epoch = ?", (epoch,))])
        db.execute("UPDATE checkpoints SET rows = ?, digest = ?, checksum = ? WHERE epoch = ?",
                   (count, digest, _manifest_checksum(epoch, found[0], found[1], found[2], count, digest), epoch))


def _completed(row: tuple) -> Completed:
    recorded = decode(row[3]) or {}
    if not isinstance(recorded, list):  # older: positions only
        recorded = [recorded, None]
    positions, instances = recorded[0], recorded[1]
    input_ended = len(recorded) > 2 and recorded[2] is True  # older: no flag
    return Completed(int(row[0]), str(row[1]), float(row[2]),
                     {str(u): {int(i): p for i, p in by.items()} for u, by in positions.items()},
                     None if instances is None else {str(u): [int(i) for i in ids] for u, ids in instances.items()},
                     input_ended)


def store_refusal(path: Path, expected: str, process: str) -> str | None:
    """Why worker `process` cannot take part in the job's checkpoints, or None: the store it sees at `path` must be
    the one the driver marked (`expected`, from CheckpointStore.mark_identity). A worker with its own disk at that
    path would write its checkpoint state where the driver never reads it, and a rollback would restart its keys
    empty (until checkpoints live on an object store, every process of an exactly-once job shares one data dir)."""
    try:
        store = CheckpointStore(path)
        try:
            seen = store.get_meta(STORE_ID)
        finally:
            store.close()
    except (OSError, sqlite3.Error) as exc:
        seen, detail = None, f"it cannot be opened ({type(exc).__name__}: {exc})"
    else:
        detail = "it holds no store of a driver" if seen is None else "it is another driver's store"
    if seen == expected:
        return None
    return (f"worker {process} does not see the driver's checkpoint store at {path}: {detail}. Under guarantee "
            "'exactly_once' every worker writes its checkpoint state into that file, so the driver and every worker "
            "must see the same data dir: point --data-dir (JobConfig.data_dir) of the driver and of every worker at "
            "one shared directory (a volume mounted on every host, or NFS with working locks; docs/CHECKPOINTS.md), "
            "or run the job with guarantee='at_least_once'")

