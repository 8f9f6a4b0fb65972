"""CommitLog: one writer's append-only, fsync'd record of its batches.

A JSON line per event:
    {"op": "stage",  "batch": id, "seq": n, "path": ..., "rows": r, "epoch": e, "time": t}   (exactly-once)
    {"op": "begin",  "batch": id, "seq": n, "path": "<dir under the table>", "rows": r, "time": t}
    {"op": "commit", "batch": id, "time": t}
    {"op": "abort",  "batch": id, "time": t}
    {"op": "retract", "batch": id, "time": t}   (exactly-once: a published batch taken out again)

"begin" is written (and fsync'd) before the batch directory is renamed into
the table, "commit" after; a begin with neither commit nor abort is a commit
cut short, which the writer resolves on open. An exactly-once batch is first
"stage"d (its files durable in staging, tagged with its checkpoint epoch);
its "begin" (written only once that checkpoint completed) keeps the epoch.
Logs without "stage" records read as before. A published batch of an epoch
after the checkpoint a job restores (it fell back from a damaged checkpoint,
or started afresh) is "retract"ed: logged first, then its directory leaves
the table, and the replay writes its rows again. Each append is one write() of a
whole line, ending in `"crc":` (the CRC-32 of the line before it), followed by
fsync; a crash can only leave a torn *last* line, which is dropped on open. Any
other line that does not parse or fails its CRC is damage: SinkFileDamaged
names the line and the ways out (lines of an older esault have no CRC). The open log holds an exclusive flock, so two live writers
can never share it. Pure file I/O: no Spark.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from esault.errors import SinkError, SinkFileDamaged

_CRC = b',"crc":'


@dataclass(frozen=True, slots=True)
class BatchRecord:
    """What the log says about one batch."""

    batch: str
    seq: int
    path: str
    rows: int
    state: str  # "staged" | "begun" | "committed" | "aborted" | "retracted"
    epoch: int | None = None  # the checkpoint epoch of an exactly-once batch


class CommitLog:
    """Open (creating if needed) and lock the log at `path`; read its history."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise SinkError(
                f"commit log {self.path} is locked by another live sink writer; each writer "
                "((topology, unit, spu_id), or (topology, unit, instance) under exactly-once) must run "
                "once per table -- stop the other instance "
                "or give this one another topology/unit name"
            ) from None
        self._fd: int | None = fd
        self._batches: dict[str, BatchRecord] = {}
        self.max_seq = -1
        self.dropped_torn_tail = False
        self._load()
        fsync_dir(self.path.parent)

    def _load(self) -> None:
        assert self._fd is not None
        with open(self._fd, "rb", closefd=False) as fh:
            fh.seek(0)
            data = fh.read()
        good_end = 0
        lines = data.split(b"\n")
        for i, line in enumerate(lines):
            last = i == len(lines) - 1
            if last:
                if line:  # no newline: a torn final append
                    self.dropped_torn_tail = True
                break
            try:
                rec = json.loads(_checked(line))
                self._apply(rec)
            except (ValueError, KeyError, TypeError) as exc:
                if i == len(lines) - 2 and not lines[-1] and not isinstance(exc, _BadCrc):
                    self.dropped_torn_tail = True  # torn last line that happened to end in '\n'
                    break
                raise damaged_log(self.path, f"line {i + 1} ({line[:80]!r}) {exc}") from None
            good_end += len(line) + 1
        if good_end != len(data):
            os.ftruncate(self._fd, good_end)
            os.fsync(self._fd)
        os.lseek(self._fd, 0, os.SEEK_END)

    def _apply(self, rec: dict[str, Any]) -> None:
        op, batch = rec["op"], rec["batch"]
        if op in ("begin", "stage"):
            seq = int(rec["seq"])
            old = self._batches.get(batch)
            epoch = rec.get("epoch", old.epoch if old is not None else None)
            self._batches[batch] = BatchRecord(batch, seq, str(rec["path"]), int(rec["rows"]),
                                               "begun" if op == "begin" else "staged",
                                               None if epoch is None else int(epoch))
            self.max_seq = max(self.max_seq, seq)
        elif op in ("commit", "abort", "retract"):
            old = self._batches[batch]
            state = {"commit": "committed", "abort": "aborted", "retract": "retracted"}[op]
            self._batches[batch] = BatchRecord(old.batch, old.seq, old.path, old.rows, state, old.epoch)
        else:
            raise ValueError(op)

    def _append(self, rec: dict[str, Any]) -> None:
        if self._fd is None:
            raise SinkError(f"commit log {self.path} is closed")
        body = json.dumps(rec, separators=(",", ":")).encode()
        line = body[:-1] + _CRC + str(zlib.crc32(body)).encode() + b"}\n"
        start = os.lseek(self._fd, 0, os.SEEK_END)
        written = os.write(self._fd, line)
        if written != len(line):
            os.ftruncate(self._fd, start)
            raise SinkError(f"commit log {self.path}: short write ({written} of {len(line)} bytes); is the disk full?")
        os.fsync(self._fd)
        self._apply(rec)

    def stage(self, batch: str, seq: int, path: str, rows: int, epoch: int) -> None:
        """Record (durably) that `batch` of checkpoint `epoch` is staged: published only once it completes."""
        self._append({"op": "stage", "batch": batch, "seq": seq, "path": path, "rows": rows, "epoch": epoch,
                      "time": time.time()})

    def staged(self) -> list[BatchRecord]:
        """Staged batches neither published nor aborted, in epoch order."""
        return sorted((r for r in self._batches.values() if r.state == "staged"), key=lambda r: (r.epoch, r.batch))

    def unpublished(self) -> list[BatchRecord]:
        """Exactly-once batches not yet committed or aborted (staged, or begun and cut short), in epoch order."""
        return sorted((r for r in self._batches.values() if r.epoch is not None and r.state in ("staged", "begun")),
                      key=lambda r: (r.epoch, r.batch))

    def begin(self, batch: str, seq: int, path: str, rows: int) -> None:
        """Record (durably) that `batch` is about to be renamed to `path`."""
        self._append({"op": "begin", "batch": batch, "seq": seq, "path": path, "rows": rows, "time": time.time()})

    def commit(self, batch: str) -> None:
        """Record (durably) that `batch` is published; from here it counts as committed."""
        self._append({"op": "commit", "batch": batch, "time": time.time()})

    def abort(self, batch: str) -> None:
        self._append({"op": "abort", "batch": batch, "time": time.time()})

    def retract(self, batch: str) -> None:
        """Record (durably) that published `batch` leaves the table: its epoch's rows come again."""
        self._append({"op": "retract", "batch": batch, "time": time.time()})

    def get(self, batch: str) -> BatchRecord | None:
        return self._batches.get(batch)

    def is_committed(self, batch: str) -> bool:
        rec = self._batches.get(batch)
        return rec is not None and rec.state == "committed"

    def unfinished(self) -> list[BatchRecord]:
        """Begun batches with no commit or abort: commits cut short by a crash or error."""
        return [r for r in self._batches.values() if r.state == "begun"]

    def records(self) -> list[BatchRecord]:
        """Every batch the log knows, in its latest state (for tools and tests)."""
        return list(self._batches.values())

    def committed(self) -> list[BatchRecord]:
        return [r for r in self._batches.values() if r.state == "committed"]

    def close(self) -> None:
        """Release the lock (a crashed process releases it too)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    @property
    def closed(self) -> bool:
        return self._fd is None


class _BadCrc(ValueError):
    """A whole line whose bytes changed after it was written."""


def _checked(line: bytes) -> bytes:
    """The record of a log line (without its CRC); _BadCrc if the CRC does not match."""
    at = line.rfind(_CRC)
    if at < 0:
        return line  # written by an older esault: no CRC
    body = line[:at] + b"}"
    try:
        crc = int(line[at + len(_CRC):-1])
    except ValueError:
        raise _BadCrc("has an unreadable CRC") from None
    if zlib.crc32(body) != crc or not line.endswith(b"}"):
        raise _BadCrc("fails its CRC")
    return body


def damaged_log(path: Path, damage: str) -> SinkFileDamaged:
    """The error for a commit log that cannot be trusted: the file, the damage, the ways out."""
    table = path.parent.parent.parent if path.parent.parent.name == "_esault" else None
    return SinkFileDamaged(
        f"the sink's commit log {path} is damaged: {damage}. It says which batches of the table are published, "
        "so the sink cannot go on without it. Ways out: put back a copy of the file from a backup and run "
        f"again; or move the table{f' ({table})' if table else ''} aside and run the job with --fresh "
        "(JobConfig(fresh_start=True)), which writes the table again from the beginning")


def fsync_dir(path: Path) -> None:
    """Make a rename or create inside `path` durable (POSIX needs the directory fsynced)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
