"""The driver side of checkpoints: trigger, collect acks, record, publish; roll back after a failure.

Runs on the job's control thread (esault.job.coordinator), the one
place that also runs splits and merges: a checkpoint and a reconfiguration
never overlap, so the upstream SPU set each bolt aligns on is fixed while a
barrier travels (docs/CHECKPOINTS.md).

Checkpoint e:
  1. every bolt SPU hears CheckpointStart(e, its upstream SPUs), every spout SPU TriggerCheckpoint(e);
  2. spouts record positions and send Barrier(e); bolts align, snapshot, pass it on;
  3. every SPU's CheckpointAck (sent once its rows and pre-commits are durable) arrives here;
  4. the record (e, positions) is written; then CheckpointComplete(e) goes to every SPU: sinks publish.
Recovery (a worker died, or a checkpoint is stuck): every SPU is discarded
(Abandon, no close()), and every unit starts fresh SPUs restored from the
last completed checkpoint, spouts at its positions. Processes stay up.
"""

from __future__ import annotations

import json
import logging
import shutil
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import pykka

from esault.checkpoint.instance_states import stranded_refusal, stranded_stage_states
from esault.checkpoint.backends import open_checkpoint_store
from esault.checkpoint.store import Completed, damaged_store
from esault.errors import ConfigError, NoWorkerLeft, StoreDamaged, WorkerLost
from esault.storage.objects import StorageError
from esault.metrics import registry as metrics
from esault.messages.acking import FailPending
from esault.messages.checkpoints import (CheckpointAck, CheckpointAcks, CheckpointComplete, CheckpointStart,
                                         TriggerCheckpoint)
from esault.messages.control import GetRoutes, GetSpus, ScaleResult
from esault.transport.endpoint import PEER_GONE, tell_all

STORE_START_WAIT = 30.0
"""Seconds a starting job waits for an object store that does not answer yet (a container starting beside it)."""

log = logging.getLogger("esault.checkpoint")


class AckCollector:
    """Thread-safe: the acks of the checkpoint in flight, and whether it was aborted."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.epoch: int | None = None
        self._expected: set[int] = set()
        self._units: dict[int, str] = {}
        self.acks: dict[int, CheckpointAck] = {}
        self.aborted: str | None = None
        self.fatal: str | None = None
        """Why the job cannot keep its guarantee (the first fatal ack's error, of any epoch); never cleared."""

    def begin(self, epoch: int, expected: set[int], units: dict[int, str] | None = None) -> None:
        """`units`: each expected SPU's unit, for a timeout's message."""
        with self._cond:
            self.epoch, self._expected, self.acks, self.aborted = epoch, set(expected), {}, None
            self._units = units or {}

    def add(self, *acks: CheckpointAck) -> None:
        """One SPU's ack, or a worker's batch of them (one wake-up for the waiter)."""
        with self._cond:
            woke = False
            for ack in acks:
                if ack.fatal and self.fatal is None:
                    self.fatal = ack.error or f"{ack.unit} SPU {ack.spu_id} lost a state it had to keep"
                    woke = True
                if ack.epoch == self.epoch and ack.spu_id in self._expected:
                    self.acks[ack.spu_id] = ack
                    woke = True
            if woke:
                self._cond.notify_all()

    def abort(self, reason: str) -> None:
        with self._cond:
            self.aborted = reason
            self._cond.notify_all()

    def wait(self, timeout: float) -> str | None:
        """None once every expected SPU acked; else why not (aborted, an SPU's error, or a timeout)."""
        with self._cond:
            done = self._cond.wait_for(lambda: self.aborted is not None or self.fatal is not None
                                       or len(self.acks) == len(self._expected), timeout)
            if self.fatal is not None:  # no checkpoint completes once a state was lost: fail it at once
                return self.fatal
            if self.aborted is not None:
                return f"aborted: {self.aborted}"
            if not done:
                missing = sorted(self._expected - set(self.acks))
                named = ", ".join(f"{self._units[s]} SPU {s}" for s in missing[:8] if s in self._units)
                why = (f" ({named}: an SPU acks once its snapshot is durable, a sink's once its pre-commit is: "
                       "a slow disk or store, or an SPU behind its input)") if named else ""
                return f"timed out after {timeout}s waiting for SPUs {missing}{why}"
            errors = [f"{a.unit} SPU {a.spu_id}: {a.error}" for a in self.acks.values() if a.error]
            return "; ".join(errors) if errors else None

    def finish(self) -> list[CheckpointAck]:
        with self._cond:
            acks = list(self.acks.values())
            self.epoch = None
            return acks


class CheckpointAcksActor(pykka.ThreadingActor):
    """Registered as "checkpoints" in the driver: hands every CheckpointAck to the collector (a worker's come
    in one CheckpointAcks a checkpoint: checkpoint/ack_batcher.py)."""

    def __init__(self, collector: AckCollector) -> None:
        super().__init__()
        self.collector = collector

    def on_receive(self, message: Any) -> Any:
        kind = type(message)
        if kind is CheckpointAcks:
            self.collector.add(*message.acks)
        elif kind is CheckpointAck:
            self.collector.add(message)
        return None


class AbandonSpus:
    """control thread -> unit (ask), in this process only: discard every SPU (except the `lost` ones, already gone)."""

    def __init__(self, lost: frozenset[int], reason: str) -> None:
        self.lost = lost
        self.reason = reason


class RelaunchSpus:
    """control thread -> unit (ask): start fresh SPUs in the discarded ones' places, restored from `epoch`."""

    def __init__(self, epoch: int | None, positions: dict[int, Any], downstream: tuple,
                 instances: list[int] | None = None) -> None:
        self.epoch = epoch
        self.positions = positions
        self.downstream = downstream
        self.instances = instances  # a non-keyed bolt's instances in that checkpoint (None: not recorded)


@dataclass
class Recovery:
    """One rollback, as measured by the control thread."""

    reason: str
    restored_epoch: int | None
    started: float
    seconds: float = 0.0


@dataclass
class CheckpointStats:
    completed: int = 0
    failed: int = 0
    last_epoch: int | None = None
    last_seconds: float = 0.0
    durations: list[float] = field(default_factory=list)
    completed_at: list[float] = field(default_factory=list)  # time.monotonic() of each completion (last 1000)
    recoveries: list[Recovery] = field(default_factory=list)
    failed_in_a_row: int = 0
    """Failures since the last completed checkpoint, those a rollback caused left out."""
    last_failure: str | None = None


def _size(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB" if n >= 1 << 20 else f"{n} bytes"


def topology_fingerprint(topology: Any) -> str:
    """What must match for a checkpoint to be restored into a job: its units, their kinds, and the
    parallelism of every unit that is not key-grouped (spouts and such bolts keep a position or a
    state per instance: fewer instances would lose some, more would start from nothing), except spouts
    with a merge hook (esault_merge_positions: any count restores from the merged position)."""
    return json.dumps([[u.name, "spout" if u.is_spout else "bolt", bool(u.per_key),
                        None if u.per_key or getattr(u.cls, "esault_chain", False)
                        or (u.is_spout and getattr(u.cls, "esault_merge_positions", None) is not None)
                        else u.parallelism]
                       for u in topology.units])


def fingerprints_compatible(stored: str, current: str) -> bool:
    """Whether a checkpoint recorded under `stored` restores into a job whose fingerprint is `current`.

    Equal fingerprints are; so is one where the only differences are spouts that recorded a number and
    now record None. topology_fingerprint gives a spout None only when its class has the
    esault_merge_positions hook, which merges any count of positions: a data dir written before the
    hook existed (a KafkaSource's parallelism in its record) still restores, at any parallelism."""
    if stored == current:
        return True
    try:
        before = {u[0]: u for u in json.loads(stored)}
        now = {u[0]: u for u in json.loads(current)}
    except (ValueError, TypeError, IndexError, KeyError):
        return False
    if set(before) != set(now):
        return False
    for name, unit in now.items():
        old = before[name]
        if not isinstance(old, list) or len(old) < 4 or old[1:3] != unit[1:3]:
            return False
        if old[3] != unit[3] and not (unit[1] == "spout" and unit[3] is None and isinstance(old[3], int)):
            return False
    return True


def fingerprint_difference(stored: str, current: str) -> str:
    """What differs between two fingerprints, in words."""
    try:
        before = {u[0]: u for u in json.loads(stored)}
    except (ValueError, TypeError, IndexError):
        return f"an unreadable topology record {stored!r}"
    now = {u[0]: u for u in json.loads(current)}
    if set(before) != set(now):
        return f"units {sorted(before)} in the checkpoint, {sorted(now)} now"
    for name, unit in now.items():
        old = before[name]
        if len(old) < 4 or old[1:3] != unit[1:3]:
            return f"unit {name!r} was a {old[1]} ({'key-grouped' if old[2] else 'not key-grouped'}) in the checkpoint"
        if old[3] != unit[3]:
            return (f"unit {name!r} had parallelism {old[3]} in the checkpoint and {unit[3]} now: only key-grouped "
                    "bolts can change parallelism on restore (their state is re-split by key range), and spouts "
                    "whose class has an esault_merge_positions hook; other spouts and bolts keep a position or "
                    "state per instance")
    return "a different topology"


class CheckpointCoordinator:
    """Owns the job's checkpoint record; every method runs on the control thread."""

    COMPACT_EVERY = 10
    RELAUNCH_ATTEMPTS = 3
    """Relaunches of a unit within one rollback while workers die under its new SPUs."""

    def __init__(self, job: Any, collector: AckCollector) -> None:
        self.job = job
        self.config = job.config
        self.topology = job.topology
        self.collector = collector
        self.store = open_checkpoint_store(job.ctx)
        try:
            if self.store.local_dir is None:  # an object store: refusing writes fails the job now, naming it
                self.store.objects.check_writable(wait=STORE_START_WAIT)
            self.next_epoch = self.store.next_epoch()
        except sqlite3.OperationalError:
            raise
        except sqlite3.DatabaseError as exc:
            self.store.close()
            raise damaged_store(self.store.path, f"SQLite cannot read it ({exc})") from None
        except StorageError as exc:
            raise ConfigError(f"the checkpoint storage {self.store.path} cannot be used: {exc}. Check the bucket "
                              "exists, the endpoint (AWS_ENDPOINT_URL or the URL's endpoint_override) and the "
                              "credentials (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE)") from None
        self.stats = CheckpointStats()
        self._last = time.monotonic()
        self.ended = False  # a final checkpoint ran: the spouts stopped at its barrier, no periodic ones follow
        self.input_ended = False  # the input ended in a checkpoint this job restored or took: finish() ran there
        self.failure: str | None = None
        """Set once more than tolerable_checkpoint_failures checkpoints failed in a row: why the job stops,
        what is committed and how to resume. No checkpoint is taken after it."""
        self.fallback: str | None = None
        """Set by restore_point() when the latest checkpoint was damaged: what it fell back to, in words."""
        self.rewound: str | None = None
        """Set by restore_point() when restore_from is older than the newest checkpoint: what it forgot, in words."""

    # --- start ---------------------------------------------------------------------

    def restore_point(self, restore_from: int | None = None) -> Completed | None:
        """The checkpoint a starting job resumes from: `restore_from`, or the newest intact one.

        Every checkpoint is verified first (store.verify()). A damaged latest one falls back to the newest
        intact one (`self.fallback` says so) and the damaged ones are discarded; none intact is
        StoreDamaged, naming the file, the damage and the ways out."""
        fingerprint = topology_fingerprint(self.topology)
        verified = self.store.verify()
        if restore_from is not None:
            point = verified.get(restore_from)
            if point is None and restore_from not in verified.damage:
                raise ConfigError(f"no completed checkpoint {restore_from} in {self.store.path} (checkpoints before "
                                  f"the {self.config.retained_checkpoints} retained ones are compacted away); "
                                  f"recorded: {[c.epoch for c in verified.checkpoints][-10:]}")
            problem = verified.spoiled(restore_from)
            if problem is not None:
                intact = [c.epoch for c in verified.checkpoints if verified.spoiled(c.epoch) is None]
                raise StoreDamaged(
                    f"checkpoint {restore_from} in {self.store.path} cannot be restored: {problem}. Intact "
                    f"checkpoints: {intact[-10:] or 'none'}; restore one of those with --restore-from EPOCH, or "
                    "start afresh with --fresh")
        else:
            point = verified.newest_intact()
            newest = verified.newest_recorded
            if newest is not None and point is None:
                raise damaged_store(self.store.path, verified.spoiled(newest) or "no manifest can be read")
            if point is not None and newest is not None and point.epoch < newest:
                self.fallback = (
                    f"checkpoint {newest} in {self.store.path} is damaged ({verified.spoiled(newest)}); "
                    f"falling back to checkpoint {point.epoch}, the newest intact one: the job replays from "
                    f"there and exactly-once sinks retract what they committed after it")
                log.warning("topology %r: %s", self.job.name, self.fallback)
                self.store.discard_after(point.epoch)
        stored = self.store.get_meta("topology")
        if point is not None and stored is not None and not fingerprints_compatible(stored, fingerprint):
            raise ConfigError(
                f"{self.store.path} holds checkpoints of topology {self.topology.name!r} that this one cannot "
                f"restore: {fingerprint_difference(stored, fingerprint)}. Restore with the same layout, or run with "
                "fresh_start=True (--fresh) to discard them, or use another data_dir")
        self.store.set_meta("topology", fingerprint)
        if point is not None:
            for spec in self.topology.units:
                recorded = point.positions.get(spec.name, {}) if spec.is_spout else {}
                stranded = stranded_stage_states(self.store, [s.name for s in spec.stages], point.epoch, recorded,
                                                 spec.parallelism)
                if stranded:
                    why = stranded_refusal(spec.name, spec.parallelism, stranded, point.epoch)
                    raise ConfigError(f"cannot restore: {why} (it had {len(recorded)} when the checkpoint was taken)")
        newest = verified.newest_recorded
        if restore_from is not None and point is not None and newest is not None and newest > point.epoch:
            self._rewind(point, newest)
        self.input_ended = point is not None and point.input_ended
        return point

    def _rewind(self, point: Completed, newest: int) -> None:
        """Forget every checkpoint after `point`, the one an explicit restore_from starts the job over from.

        State rows are incremental: the restored job's next checkpoints store only the keys it changes,
        and read the rest from earlier epochs. Rows of the abandoned later epochs would then be read
        as if the new timeline had written them (a key unchanged since the restore would come back
        with its abandoned later state). Those checkpoints cannot be restored consistently anyway: the
        exactly-once sinks retract what they published after `point`."""
        later = [c.epoch for c in self.store.completed() if c.epoch > point.epoch]
        self.rewound = (
            f"restoring checkpoint {point.epoch} ({point.kind}) of {self.store.path} forgets every later one "
            f"(epochs {point.epoch + 1} to {newest}: {len(later)} recorded, savepoints included): the job starts "
            f"over from {point.epoch}, and exactly-once sinks retract what they committed after it")
        log.warning("topology %r: %s", self.job.name, self.rewound)
        self.store.discard_after(point.epoch)

    # --- periodic ------------------------------------------------------------------

    def due_in(self) -> float | None:
        """Seconds until the next periodic checkpoint (running it when due); None: none are taken."""
        if not self.job.ctx.exactly_once or self.job.stopped or self.ended or self.collector.fatal is not None:
            return None
        if self.job.recovering:  # a rollback is queued: a checkpoint now could record a broken layout
            return 0.05
        wait = self._last + self.config.checkpoint_interval - time.monotonic()
        if wait > 0:
            return wait
        self.checkpoint()
        return self.config.checkpoint_interval

    def _start(self, unit: str, mailboxes: dict[int, Any], message: Any) -> None:
        """A unit's SPUs' part of starting a checkpoint: one message, encoded once for them all. An SPU whose
        worker is gone (declared dead between the list of SPUs and this send) aborts the checkpoint, as its
        death's rollback would: the rollback follows, and the checkpoint fails as aborted instead of with the
        transport's error."""
        spu_of = {mailbox: spu for spu, mailbox in mailboxes.items()}
        for mailbox, exc in tell_all(spu_of, message):
            if not isinstance(exc, PEER_GONE):
                raise exc
            self.collector.abort(f"{unit} SPU {spu_of[mailbox]} cannot be reached, its worker is gone ({exc})")

    def checkpoint(self, kind: str = "checkpoint", final: bool = False) -> int | None:
        """Take one checkpoint; its epoch once complete, None if it failed (the next one retries, unless
        the job lost a state it had to keep: then none is taken any more, see AckCollector.fatal)."""
        self._last = time.monotonic()
        if self.failure is not None:
            return None
        short = self._space_short()
        if short is not None:
            self._failed("a checkpoint was not started", short, counted=True)
            return None
        self.ended = self.ended or final
        if self.collector.fatal is not None:
            log.error("topology %r: no checkpoint taken: %s", self.job.name, self.collector.fatal)
            return None
        started = time.perf_counter()
        epoch = self.next_epoch
        self.next_epoch += 1
        units = self.job.units
        spus: dict[str, dict[int, Any]] = {}
        for spec in self.topology.units:
            if not self.topology.chained(spec.name):
                spus[spec.name] = units[spec.name].ask(GetSpus(), timeout=self.config.checkpoint_timeout)
        self.collector.begin(epoch, {s for by in spus.values() for s in by},
                             {s: unit for unit, by in spus.items() for s in by})
        if self.job.recovering:  # a worker died before begin(): its rollback's abort() came too early for us
            self.collector.abort("a rollback is queued")
        for spec in self.topology.units:
            if spec.name not in spus or spec.is_spout:
                continue
            upstream = frozenset(s for i in spec.inputs for s in spus[self.topology.host_of(i.source)])
            self._start(spec.name, spus[spec.name], CheckpointStart(epoch, upstream, final))
        for spec in self.topology.units:
            if spec.is_spout:
                self._start(spec.name, spus[spec.name],
                            TriggerCheckpoint(epoch, final, may_finish=final and not self.input_ended))
        failure = self.collector.wait(self.config.checkpoint_timeout)
        acks = self.collector.finish()
        if failure is not None:
            self._failed(f"checkpoint {epoch} failed", failure, counted=not failure.startswith("aborted"))
            if failure.startswith("timed out") and not self.job.stopped and self.failure is None and self.collector.fatal is None:
                # Some SPU may hold channels for a barrier that never comes: only a rollback frees them. Through
                # the job, like every rollback: the job is not complete while it runs, and its probers, counts
                # and completion follow the relaunched SPUs.
                self.job.roll_back_now(frozenset(), f"checkpoint {epoch} {failure}")
            return None
        missing = self._rows_missing(epoch, acks)
        if missing is not None:
            self._failed(f"checkpoint {epoch} failed", missing, counted=True)
            if self.failure is None:  # no checkpoint of this job can be restored: take none any more
                self.failure, self.ended = missing, True
            return None
        positions: dict[str, dict[int, Any]] = {}
        instances: dict[str, set[int]] = {}
        ended: list[bool] = []  # per spout SPU: its source had finished at this (final) barrier
        for ack in acks:
            spec = self.topology.unit(ack.unit)
            if spec.is_spout:
                positions.setdefault(ack.unit, {})[ack.instance] = ack.position
                ended.append(ack.input_ended)
            elif not spec.per_key:  # its instances' states are in their slots: a rollback restores these
                instances.setdefault(ack.unit, set()).add(ack.instance)
        self.input_ended = self.input_ended or (final and bool(ended) and all(ended))
        self.store.complete(epoch, kind, positions, instances, self.input_ended)
        self._ship_dead_letters(epoch)
        complete = CheckpointComplete(epoch)
        for _mailbox, exc in tell_all([m for by in spus.values() for m in by.values()], complete):
            log.warning("checkpoint %d: CheckpointComplete not delivered: %r", epoch, exc)  # a rollback follows
        seconds = time.perf_counter() - started
        self.stats.failed_in_a_row = 0
        self.stats.completed += 1
        self.stats.last_epoch = epoch
        self.stats.last_seconds = seconds
        self.stats.durations.append(seconds)
        self.stats.completed_at.append(time.monotonic())
        del self.stats.completed_at[:-1000]
        metrics.record_checkpoint(self.job.name, True, seconds, 0)
        del self.stats.durations[:-1000]
        log.info("topology %r: checkpoint %d (%s) complete in %.1f ms", self.job.name, epoch, kind, seconds * 1000)
        if self.stats.completed % self.COMPACT_EVERY == 0:
            self.compact()
        return epoch

    def _rows_missing(self, epoch: int, acks: list[CheckpointAck]) -> str | None:
        """Why checkpoint `epoch` cannot complete because state rows an SPU wrote are not in this store, or None.

        An SPU acks only what it made durable; rows it wrote that the driver's store does not hold went into
        another file at the same path (a worker with a disk of its own: a misconfiguration the start check,
        store_refusal, refuses first): completing the checkpoint would record states it cannot restore."""
        written = {a.spu_id: a for a in acks if a.rows}
        if not written:
            return None
        found = self.store.rows_by_writer(epoch)
        short = [(a, found.get(spu, 0)) for spu, a in sorted(written.items()) if found.get(spu, 0) < a.rows]
        if not short:
            return None
        where = ", ".join(f"{a.unit} SPU {a.spu_id} wrote {a.rows} and {n} are there" for a, n in short[:5])
        workers = sorted({str(self.job.worker_of(a.spu_id)) for a, _ in short})
        return (f"state rows of checkpoint {epoch} are missing from the driver's checkpoint store {self.store.path} "
                f"({where}): worker(s) {', '.join(workers)} wrote them into another file at that path, which the "
                "driver never reads, and a rollback would restart their keys empty. Under guarantee "
                "'exactly_once' the driver and every worker must see one data dir (a volume shared by every host, "
                "or NFS with working locks; docs/CHECKPOINTS.md)")

    def _ship_dead_letters(self, epoch: int) -> None:
        """On an object store, the driver's disk is not durable: each completed checkpoint copies the dead
        letters written since the last one to <job>/dead_letters/ there (a rerun on another host finds them)."""
        letters = self.job.ctx.dead_letters if self.store.local_dir is None else None
        if letters is None:
            return
        text = letters.take_unshipped()
        if not text:
            return
        name = f"dead_letters/e{epoch:012d}.{time.time_ns():x}.jsonl"
        try:
            self.store.objects.put(name, text.encode())
        except StorageError as exc:  # kept in the local file; logged, the checkpoint itself is complete
            log.error("topology %r: dead letters of checkpoint %d not copied to %s: %s", self.job.name, epoch,
                      self.store.objects.where(name), exc)

    def _space_short(self) -> str | None:
        """Why a checkpoint should not start for want of disk space where the store is, or None."""
        folder = self.store.local_dir
        if folder is None:  # an object store: its space is the provider's
            return None
        try:
            free = shutil.disk_usage(folder).free
        except OSError as exc:
            return f"the free space in {folder} cannot be read ({exc})"
        need = self.config.checkpoint_min_free_bytes
        if free < need:
            return f"{folder} has only {_size(free)} free, below checkpoint_min_free_bytes={need}"
        return None

    def _failed(self, what: str, reason: str, counted: bool) -> None:
        """Count a failed checkpoint; past the budget, stop taking them (self.failure says why)."""
        self.stats.failed += 1
        if counted:
            self.stats.failed_in_a_row += 1
            self.stats.last_failure = f"{what}: {reason}"
        metrics.record_checkpoint(self.job.name, False, 0.0, self.stats.failed_in_a_row)
        log.error("topology %r: %s: %s", self.job.name, what, reason)
        if self.failure is None and self.stats.failed_in_a_row > self.config.tolerable_checkpoint_failures:
            self.failure = self._give_up_message()
            self.ended = True
            log.error("topology %r: %s", self.job.name, self.failure)

    def _give_up_message(self) -> str:
        return self.explain(f"{self.stats.failed_in_a_row} checkpoints in a row failed (tolerable_checkpoint_failures="
                            f"{self.config.tolerable_checkpoint_failures}), the last: {self.stats.last_failure}")

    def explain(self, what: str) -> str:
        """`what` went wrong with the checkpoints, then where they are, what is committed and how to go on."""
        folder = self.store.local_dir
        try:
            free = "an object store" if folder is None else f"{_size(shutil.disk_usage(folder).free)} free there"
        except OSError:
            free = "its free space unreadable"
        try:
            last = self.store.latest()
        except (sqlite3.Error, StorageError):
            last = None
        if last is None:
            committed = "nothing is committed (no checkpoint completed): a restart starts from the beginning"
            resume = "run the same command again"
        else:
            at = ", ".join(f"{unit}[{i}] at {p!r}" for unit, by in sorted(last.positions.items())
                           for i, p in sorted(by.items()))
            committed = (f"committed is everything up to checkpoint {last.epoch} (spouts {at}), which the sinks "
                         "published exactly; nothing after it")
            resume = f"run the same command again: it resumes from checkpoint {last.epoch}"
        return (f"{what}. The checkpoint store is {self.store.path} ({free}); {committed}. To go on: if that "
                f"disk is full, make room on it (or move {folder} to a larger one and point --data-dir at it), "
                f"then {resume}")

    def compact(self) -> None:
        """Compact at the oldest of the retained_checkpoints newest checkpoints: those stay restorable."""
        periodic = [c.epoch for c in self.store.completed() if c.kind != "savepoint"]
        retained = periodic[-self.config.retained_checkpoints:]
        if retained:
            self.store.compact(retained[0])

    # --- recovery --------------------------------------------------------------------

    def recover(self, lost: frozenset[int], reason: str, abandoned: Callable[[], None] | None = None) -> Recovery:
        """Global rollback to the last completed checkpoint (see the module doc). `abandoned` runs once every
        SPU is discarded, before any is relaunched (a spout rescale's step, which tests cut there)."""
        point = self.store.latest()
        record = Recovery(reason, None if point is None else point.epoch, time.monotonic())
        log.warning("topology %r: rolling back to checkpoint %s: %s", self.job.name, record.restored_epoch, reason)
        timeout = max(self.config.checkpoint_timeout, 60.0)
        order = [s for s in self.topology.units if not self.topology.chained(s.name)]
        for spec in order:  # spouts first: nothing new enters while the bolts go
            self.job.units[spec.name].ask(AbandonSpus(lost, reason), timeout=timeout)
        if self.job.ctx.acker is not None:
            self.job.ctx.acker.tell(FailPending(f"rolled back: {reason}"))
        if abandoned is not None:
            abandoned()
        for spec in reversed(order):  # downstream first, so each SPU starts knowing its routes
            downstream = tuple(self.job.units[d.name].ask(GetRoutes(g.value), timeout=timeout)
                               for d, g in self.topology.downstream(self.topology.output_unit(spec.name)))
            positions = {} if point is None else point.positions.get(spec.name, {})
            instances = None if point is None or point.instances is None else point.instances.get(spec.name)
            for attempt in range(1, self.RELAUNCH_ATTEMPTS + 1):
                failed = self.job.units[spec.name].ask(
                    RelaunchSpus(record.restored_epoch, positions, downstream, instances), timeout=timeout)
                instances = None  # a retry fills only the places that did not start
                if not isinstance(failed, (WorkerLost, NoWorkerLeft)) or attempt == self.RELAUNCH_ATTEMPTS:
                    break
                # Another worker died as this unit's SPUs started on it: those places are still empty (the
                # unit kept them), so start them now, elsewhere, before any unit upstream sends a tuple. With
                # every worker gone, that is on the workers a cluster that can grow starts in their place (a
                # death this rollback did not know of when it reserved room): wait for them first.
                log.warning("topology %r: unit %r: %s; relaunching its SPUs that did not start", self.job.name,
                            spec.name, failed)
                if isinstance(failed, NoWorkerLeft) and not self.job.await_a_worker(
                        f"the relaunch of unit {spec.name!r}"):
                    break
            if isinstance(failed, Exception):
                self.job.fail(f"unit {spec.name!r} could not be restored after {reason}: {failed}")
        record.seconds = time.monotonic() - record.started
        self.stats.recoveries.append(record)
        metrics.record_recovery(self.job.name, record.seconds)
        self._last = time.monotonic()
        log.warning("topology %r: restored checkpoint %s in %.0f ms", self.job.name, record.restored_epoch,
                    record.seconds * 1000)
        for spec in order:
            result = ScaleResult("restore", spec.name, 0, 0, None, None, 0, 0.0, record.seconds, reason)
            self.job.tell_listeners(result)
        return record

    def close(self) -> None:
        self.store.close()
