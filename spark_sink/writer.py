"""BatchWriter: the idempotent, crash-safe commit of one batch into the table.

Protocol for batch B (id I, rows of one partition value P), one writer per
(topology, unit, spu_id) and table:

  0. If the log says I is committed: return ALREADY (same rows count, or SinkError).
  1. Remove any leftover staging/I; the stager writes B's Parquet file(s) there;
     files are renamed to part-NNNNN-I.<ext>, then fsync'd with the directory.
  2. Append {"begin", I, P, rows} to the commit log (fsync).
  3. rename(staging/I, <table>/P/esault_batch=I)  -- one atomic directory rename:
     readers see nothing of B before it and all of B after it. fsync the parent.
  4. Append {"commit", I} to the log (fsync). B is committed.

Exactly-once splits this in two (stage, publish): stage() does step 1 and
appends {"stage", I, P, rows, epoch} (fsync); publish(), called only once
that epoch's checkpoint completed, does steps 2-4 from the staged files.

On open, the writer resolves its log: a "begin" without "commit" whose
directory exists was published (the rename is atomic) and is logged as
committed; one whose directory does not exist is logged as aborted -- except
an exactly-once batch (one with an epoch), which is only begun once its
checkpoint completed: it is published from staging (rolled forward). Leftover
staging directories of this writer are deleted, except those of staged
exactly-once batches, which wait for their checkpoint (spark_sink/epochs.py).
Sequence numbers continue after the highest one in the log, so a restarted
writer never reuses a batch id. A batch directory of this writer in the table
that the log has no record of means the log lost records (truncated, replaced):
SinkFileDamaged, before anything is written.

File I/O only (the Spark part is the stager); runs on the committer thread.
"""

from __future__ import annotations

import enum
import logging
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from esault.errors import SinkError
from spark_sink.commit_log import CommitLog, damaged_log, fsync_dir
from spark_sink.failpoints import Failpoint
from spark_sink.failpoints import from_env as failpoint_from_env
from spark_sink.layout import TablePaths
from spark_sink.schema import BATCH_COLUMN
from spark_sink.stager import Stager, is_data_file

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)


class Outcome(enum.Enum):
    COMMITTED = "committed"  # this call published the batch
    ALREADY_COMMITTED = "already-committed"  # the log already had it: nothing written


@dataclass(frozen=True, slots=True)
class Recovery:
    """What opening the writer found and fixed."""

    rolled_forward: tuple[str, ...] = ()  # published but not logged: now logged as committed
    aborted: tuple[str, ...] = ()  # begun, never published: logged as aborted
    staging_removed: tuple[str, ...] = ()  # leftover staging directories deleted


@dataclass(slots=True)
class WriterStats:
    committed: int = 0
    skipped: int = 0
    recovered: Recovery = field(default_factory=Recovery)


class BatchWriter:
    """Commit batches of one writer into the table at `table_dir` (see module doc)."""

    def __init__(
        self,
        table_dir: Path,
        writer: str,
        stager: Stager,
        failpoint: Failpoint | None = None,
    ) -> None:
        self.paths = TablePaths(Path(table_dir))
        self.writer = writer
        self.stager = stager
        self.failpoint = failpoint if failpoint is not None else failpoint_from_env()
        self.paths.staging.mkdir(parents=True, exist_ok=True)
        self.log = CommitLog(self.paths.commit_log(writer))
        self.stats = WriterStats()
        self.stats.recovered = self._recover()

    @property
    def next_seq(self) -> int:
        """The first sequence number never used by this writer."""
        return self.log.max_seq + 1

    def _check_log_against_table(self) -> None:
        """Every published batch directory of this writer must be in the log (see the module doc)."""
        known = {r.batch for r in self.log.records() if r.state in ("begun", "committed", "retracted")}
        prefix = f"{BATCH_COLUMN}={self.writer}."
        unknown = []
        for folder, subdirs, _ in os.walk(self.paths.root):
            batches = [d for d in subdirs if d.startswith(prefix)]
            unknown += [os.path.join(folder, d) for d in batches if d[len(BATCH_COLUMN) + 1:] not in known]
            subdirs[:] = [d for d in subdirs if d != self.paths.meta.name and d not in batches]
        if unknown:
            raise damaged_log(self.log.path, f"it has no record of {len(unknown)} published batch(es) of writer "
                                             f"{self.writer} in the table, e.g. {unknown[0]}: records were lost "
                                             "(the file was truncated or replaced)")

    def _recover(self) -> Recovery:
        self._check_log_against_table()
        forward, aborted = [], []
        for rec in self.log.unfinished():
            if (self.paths.root / rec.path).is_dir():
                self.log.commit(rec.batch)
                forward.append(rec.batch)
            elif rec.epoch is not None and (self.paths.staging / rec.batch).is_dir():
                self._rename_into_table(rec.batch, self.paths.root / rec.path)  # its checkpoint completed
                self.log.commit(rec.batch)
                forward.append(rec.batch)
            else:
                self.log.abort(rec.batch)
                aborted.append(rec.batch)
        removed = []
        prefix = self.writer + "."
        keep = {r.batch for r in self.log.staged()}  # exactly-once: staged epochs wait for their checkpoint
        for entry in sorted(self.paths.staging.iterdir()):
            if entry.name.startswith(prefix) and entry.name not in keep:
                shutil.rmtree(entry, ignore_errors=True)
                removed.append(entry.name)
        if forward or aborted or removed:
            log.warning(
                "sink writer %s recovered table %s: rolled forward %s, aborted %s, removed staging %s",
                self.writer, self.paths.root, forward, aborted, removed,
            )
        return Recovery(tuple(forward), tuple(aborted), tuple(removed))

    def is_committed(self, batch_id: str) -> bool:
        return self.log.is_committed(batch_id)

    def commit(self, batch_id: str, seq: int, rel_path: str, table: "pa.Table") -> Outcome:
        """Publish `table` as batch `batch_id` at <table>/<rel_path>, at most once.

        Safe to call again with the same arguments after any exception (or
        after a crash, from a new writer on the same directory). Raises
        SinkError if batch_id was committed with a different row count or path.
        """
        rows = table.num_rows
        rec = self.log.get(batch_id)
        if rec is not None and rec.state == "committed":
            if rec.rows != rows or rec.path != rel_path:
                raise SinkError(
                    f"batch {batch_id} was already committed with {rec.rows} rows at {rec.path}, "
                    f"now offered with {rows} rows at {rel_path}: batch ids must never be reused "
                    "(two writers with one (topology, unit, spu_id)?)"
                )
            self.stats.skipped += 1
            return Outcome.ALREADY_COMMITTED
        dest = self.paths.root / rel_path
        if dest.exists():
            if rec is not None and rec.state == "begun":  # retry after an error past the rename
                self.log.commit(batch_id)
                self.stats.committed += 1
                return Outcome.COMMITTED
            raise SinkError(
                f"batch directory {dest} exists but commit log {self.log.path} has no 'begin' for it; "
                "the table directory was changed outside the sink -- move that directory aside"
            )
        fp = self.failpoint
        stage = self.paths.staging / batch_id
        if stage.exists():
            shutil.rmtree(stage)
        if fp:
            fp("before-stage", batch_id)
        self.stager.stage(table, stage)
        self._finalize(stage, batch_id)
        if fp:
            fp("staged", batch_id)
        self.log.begin(batch_id, seq, rel_path, rows)
        if fp:
            fp("begun", batch_id)
        self._rename_into_table(batch_id, dest)
        if fp:
            fp("published", batch_id)
        self.log.commit(batch_id)
        if fp:
            fp("committed", batch_id)
        self.stats.committed += 1
        return Outcome.COMMITTED

    # --- exactly-once: two phases per checkpoint epoch -------------------------------

    def stage(self, batch_id: str, seq: int, rel_path: str, table: "pa.Table", epoch: int) -> bool:
        """Phase one: write `table` durably into staging and log it as epoch `epoch`'s; False if the
        log has it committed already (a replayed epoch after a restart)."""
        rec = self.log.get(batch_id)
        if rec is not None and rec.state in ("committed", "begun"):
            return False
        stage = self.paths.staging / batch_id
        if stage.exists():
            shutil.rmtree(stage)
        self.stager.stage(table, stage)
        self._finalize(stage, batch_id)
        fsync_dir(self.paths.staging)
        if self.failpoint:
            self.failpoint("staged", batch_id)
        self.log.stage(batch_id, seq, rel_path, table.num_rows, epoch)
        return True

    def publish(self, batch_id: str) -> int:
        """Phase two: move a staged batch into the table (atomic rename), at most once; its rows."""
        rec = self.log.get(batch_id)
        if rec is None or rec.state in ("committed", "aborted"):
            return 0
        dest = self.paths.root / rec.path
        if not dest.exists():
            self.log.begin(batch_id, rec.seq, rec.path, rec.rows)
            if self.failpoint:
                self.failpoint("begun", batch_id)
            self._rename_into_table(batch_id, dest)
            if self.failpoint:
                self.failpoint("published", batch_id)
        self.log.commit(batch_id)
        self.stats.committed += 1
        return rec.rows

    def _rename_into_table(self, batch_id: str, dest: Path) -> None:
        _makedirs_durable(dest.parent)
        os.rename(self.paths.staging / batch_id, dest)
        fsync_dir(dest.parent)
        fsync_dir(self.paths.staging)

    def retract_after(self, epoch: int | None) -> list[str]:
        """Exactly-once: take out of the table every batch this writer published for an epoch after
        `epoch`, the checkpoint being restored (None: the job starts from nothing). The restore replays
        those epochs' input, so their rows come again; leaving them would count them twice. Each is
        logged before its directory goes (renamed into staging, then removed), so a crash in between
        is finished by the next call."""
        gone = []
        for rec in self.log.records():
            if rec.state == "committed" and rec.epoch is not None and rec.epoch > (epoch or 0):
                self.log.retract(rec.batch)
            elif rec.state != "retracted":
                continue
            dest = self.paths.root / rec.path
            if dest.exists():
                aside = self.paths.staging / f"{rec.batch}.retracted"
                shutil.rmtree(aside, ignore_errors=True)
                os.rename(dest, aside)
                fsync_dir(dest.parent)
                shutil.rmtree(aside, ignore_errors=True)
                gone.append(rec.batch)
        return gone

    def abort_staged(self, batch_id: str) -> None:
        """A staged batch whose checkpoint never completed: its rows will be produced again."""
        rec = self.log.get(batch_id)
        if rec is not None and rec.state == "staged":
            self.log.abort(batch_id)
        shutil.rmtree(self.paths.staging / batch_id, ignore_errors=True)

    def _finalize(self, stage: Path, batch_id: str) -> list[Path]:
        """Name data files after the batch, drop checksum/marker files, fsync everything."""
        files = []
        names = sorted(os.listdir(stage))
        data = [n for n in names if is_data_file(n)]
        if not data:
            raise SinkError(f"stager {getattr(self.stager, 'name', self.stager)!r} wrote no data file into {stage}")
        for n in names:
            if not is_data_file(n):
                p = stage / n
                if p.is_dir():
                    shutil.rmtree(p)
                else:
                    p.unlink()
        for i, n in enumerate(data):
            ext = n[n.index("."):] if "." in n else ".parquet"
            target = stage / f"part-{i:05d}-{batch_id}{ext}"
            os.rename(stage / n, target)
            fd = os.open(target, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            files.append(target)
        fsync_dir(stage)
        return files

    def close(self) -> None:
        """Release the commit log (and its lock)."""
        self.log.close()


def _makedirs_durable(path: Path) -> None:
    """mkdir -p, fsync'ing the parent of each directory created."""
    missing = []
    p = path
    while not p.exists():
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        try:
            d.mkdir()
        except FileExistsError:
            continue  # another writer created it
        fsync_dir(d.parent)
