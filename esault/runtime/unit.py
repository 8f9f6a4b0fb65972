"""UnitActor: one processing unit (a spout or bolt) = SPU manager + SPU routing table.

It starts its SPUs through a launcher (in this process, or in worker
processes), answers route queries, and runs the paper's split and merge steps
for one SPU at a time as a three-phase reconfiguration (prepare -> switch
routes -> hand off state); see docs/PROTOCOLS.md.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import pykka

from esault.dsl.bolt import Bolt
from esault.dsl.topology import Grouping, UnitSpec
from esault.errors import ScalingError, WorkerLost
from esault.keyhash import KEY_SPACE_MAX
from esault.metrics import registry as metrics
from esault.routing.interval_table import IntervalTable
from esault.checkpoint.coordinator import AbandonSpus, RelaunchSpus
from esault.runtime.context import JobContext, log
from esault.runtime.messages import (
    Abandon, GetLayout, GetRoutes, GetSpus, HandoffFinished, InstallRoutes, Prepared, PrepareGive,
    PrepareReceive, RouteSpec, ScaleCommand, ScaleResult, SpuConfig,
)


class SpuLauncher(Protocol):
    """Starts and stops SPU actors wherever the resource manager put them."""

    def start_spu(self, spec: UnitSpec, cfg: SpuConfig, job: JobContext) -> Any: ...

    def stop_spu(self, mailbox: Any, block: bool) -> None: ...


class LaunchSpus:
    """driver -> unit (ask), in this process only: start the initial SPUs (restored from `epoch` if given)."""

    def __init__(self, epoch: int | None = None, positions: dict[int, Any] | None = None) -> None:
        self.epoch = epoch
        self.positions = positions or {}


class AbortReconfiguration:
    """job -> unit (tell), in this process only: fail the split or merge in flight now (a worker died); the
    rollback that follows discards its SPUs. Frees the control thread, which waits for that result."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


def even_table(spu_ids: list[int]) -> IntervalTable:
    """Initial intervals of a key-grouped unit: equal slices of the key space."""
    n = len(spu_ids)
    return IntervalTable.from_intervals([(i * (KEY_SPACE_MAX + 1) // n, s) for i, s in enumerate(spu_ids)])


@dataclass
class _Reconfiguration:
    cmd: ScaleCommand
    reconfig_id: int
    giver: int
    receiver: int
    lo: int | None
    hi: int | None
    new_table: IntervalTable | None
    new_spus: dict[int, Any]
    awaiting_prepared: set[int]
    awaiting_finished: set[int]
    started: float = field(default_factory=time.monotonic)
    moved_keys: int = 0
    paused: float = 0.0
    retire: Any = None


class UnitActor(pykka.ThreadingActor):
    """Manages the SPUs of one unit; never touches PEs (hierarchical management)."""

    def __init__(self, spec: UnitSpec, job: JobContext, launcher: SpuLauncher,
                 downstream: tuple[RouteSpec, ...]) -> None:
        super().__init__()
        self.spec = spec
        self.job = job
        self.launcher = launcher
        self.downstream = downstream
        self.spus: dict[int, Any] = {}
        self.instance_of: dict[int, int] = {}
        self.table: IntervalTable | None = None
        self.version = 0
        self._op: _Reconfiguration | None = None
        self._discarded: list[int] = []  # SPUs a rollback discarded, whose places RelaunchSpus fills
        self.history: list[ScaleResult] = []

    def launch_initial_spus(self, epoch: int | None = None, positions: dict[int, Any] | None = None) -> None:
        """Start the unit's first SPUs (after the unit is registered, so they can name it)."""
        ids = [self.job.next_id() for _ in range(self.spec.parallelism)]
        if self.spec.per_key:
            self.table = even_table(ids)
        for instance, spu_id in enumerate(ids):
            self.instance_of[spu_id] = instance
            self.spus[spu_id] = self._launch(spu_id, self.downstream, None, epoch, (positions or {}).get(instance))

    # --- rollback (esault.checkpoint.coordinator) ------------------------------------------

    def _abandon(self, msg: AbandonSpus) -> None:
        """Discard every SPU: told Abandon (no close(), nothing published), then stopped; a split or
        merge in flight is aborted, and its half-started SPU discarded too."""
        op, self._op = self._op, None
        extra: dict[int, Any] = {}
        if op is not None:
            extra = {s: m for s, m in op.new_spus.items() if s not in self.spus}
            if op.retire is not None and op.giver not in self.spus:
                extra[op.giver] = op.retire
            if not op.cmd.reply.done():
                op.cmd.reply.set_exception(ScalingError(
                    f"{op.cmd.action} of {self.spec.name!r} SPU {op.giver} aborted: {msg.reason}; the job rolled "
                    "back to its last checkpoint and the unit can scale again"))
        self._discarded = sorted(self.spus)
        for spu_id, mailbox in {**self.spus, **extra}.items():
            if spu_id in msg.lost:
                continue
            try:
                mailbox.tell(Abandon())
                self.launcher.stop_spu(mailbox, block=True)
            except Exception as exc:  # noqa: BLE001 - its process is gone too
                log.warning("unit %r: SPU %d not stopped cleanly: %r", self.spec.name, spu_id, exc)
        self.spus = {}

    def _relaunch(self, msg: RelaunchSpus) -> None:
        """Fresh SPUs in the discarded ones' places (same intervals and instances), restored from msg.epoch."""
        self.downstream = msg.downstream
        renamed = {old: self.job.next_id() for old in self._discarded}
        for old, new in renamed.items():
            self.instance_of[new] = self.instance_of.pop(old, 0)
        if self.table is not None:
            self.table = IntervalTable.from_intervals(
                [(start, renamed.get(spu, spu)) for start, _end, spu in self.table.intervals()],
                version=self.table.version + 1)
        self.version += 1
        self._discarded = []
        for new in renamed.values():
            self.spus[new] = self._launch(new, self.downstream, None, msg.epoch,
                                          msg.positions.get(self.instance_of[new]))

    def on_stop(self) -> None:
        for mailbox in self.spus.values():
            self.launcher.stop_spu(mailbox, block=True)

    def _launch(self, spu_id: int, downstream: tuple[RouteSpec, ...], receive: PrepareReceive | None,
                epoch: int | None = None, position: Any = None) -> Any:
        interval = self.table.interval_of(spu_id) if self.table is not None and spu_id in self.table else None
        cfg = SpuConfig(self.job.name, self.spec.name, spu_id, interval, downstream, receive,
                        extra={"unit_ref": self.actor_ref}, instance=self.instance_of.get(spu_id, 0),
                        instances=self.spec.parallelism, restore_epoch=epoch, position=position)
        return self.launcher.start_spu(self.spec, cfg, self.job)

    def on_receive(self, message: Any) -> Any:
        try:
            kind = type(message)
            if kind is LaunchSpus:
                try:
                    return self.launch_initial_spus(message.epoch, message.positions)
                except Exception as exc:  # the asker (Job) fails the job with it
                    return exc
            if kind is AbortReconfiguration:
                op = self._op
                if op is not None and not op.cmd.reply.done():
                    op.cmd.reply.set_exception(ScalingError(
                        f"{op.cmd.action} of {self.spec.name!r} SPU {op.giver} aborted: {message.reason}"))
                return None
            if kind is AbandonSpus:
                return self._abandon(message)
            if kind is RelaunchSpus:
                try:
                    return self._relaunch(message)
                except Exception as exc:  # the control thread logs it
                    return exc
            if kind is GetRoutes:
                return self.route_spec(message.grouping)
            if kind is GetSpus:
                return dict(self.spus)
            if kind is GetLayout:
                return self.layout()
            if kind is ScaleCommand:
                return self._on_scale(message)
            if kind is Prepared:
                return self._on_prepared(message)
            if kind is HandoffFinished:
                return self._on_finished(message)
            metrics.count_unknown_message("UnitActor")
            log.warning("unit %r ignored unknown message %r", self.spec.name, kind.__name__)
        except Exception:
            log.exception("unit %r failed handling %s", self.spec.name, type(message).__name__)
        return None

    def route_spec(self, grouping: str, table: IntervalTable | None = None,
                   spus: dict[int, Any] | None = None) -> RouteSpec:
        table = self.table if table is None else table
        return RouteSpec(
            unit=self.spec.name, grouping=grouping,
            table=table.to_wire() if (grouping == "key" and table is not None) else None,
            spus=dict(self.spus if spus is None else spus), version=self.version,
        )

    def layout(self) -> dict[int, tuple[int, int] | None]:
        return {
            spu: (self.table.interval_of(spu) if self.table is not None else None) for spu in sorted(self.spus)
        }

    # --- split and merge ----------------------------------------------------

    def _on_scale(self, cmd: ScaleCommand) -> None:
        try:
            self._check_scalable(cmd)
            if cmd.action == "split":
                self._begin_split(cmd)
            elif cmd.action == "replace":
                self._replace(cmd)
            else:
                self._begin_merge(cmd)
        except Exception as exc:
            if not cmd.reply.done():
                cmd.reply.set_exception(exc)

    def _check_scalable(self, cmd: ScaleCommand) -> None:
        name = self.spec.name
        if self._op is not None:
            raise ScalingError(f"unit {name!r} is already reconfiguring; retry when it finishes")
        if cmd.action == "replace":
            if cmd.spu_id not in self.spus:
                raise ScalingError(f"unit {name!r} has no SPU {cmd.spu_id} to replace")
            return
        if self.spec.is_spout:
            raise ScalingError(f"spout {name!r} cannot split or merge: only bolts scale")
        if any(i.grouping is Grouping.GLOBAL for i in self.spec.inputs):
            raise ScalingError(f"bolt {name!r} reads with global_grouping: all its data goes to one SPU, "
                               "so splitting it cannot help")
        if cmd.spu_id not in self.spus:
            raise ScalingError(f"bolt {name!r} has no SPU {cmd.spu_id}; its SPUs are {sorted(self.spus)}")
        if (self.job.exactly_once and not self.spec.per_key
                and getattr(self.spec.cls, "on_checkpoint", None) is not getattr(Bolt, "on_checkpoint")):
            raise ScalingError(f"bolt {name!r} takes part in checkpoints per instance (a sink staging epochs) and "
                               "cannot split or merge under exactly_once: declare it with elastic=False")
        if cmd.action == "merge" and len(self.spus) < 2:
            raise ScalingError(f"bolt {name!r} has a single SPU: there is nothing to merge it into")
        if cmd.action not in ("split", "merge"):
            raise ScalingError(f"unknown scaling action {cmd.action!r}; use 'split', 'merge' or 'replace'")

    def _begin_split(self, cmd: ScaleCommand) -> None:
        giver = cmd.spu_id
        receiver = self.job.next_id()
        rid = self.job.next_id()
        per_key = self.spec.per_key
        new_table = None
        lo = hi = None
        if per_key:
            new_table = self.table.copy()
            lo, hi = new_table.split(giver, receiver, cmd.at)
        receive = PrepareReceive(rid, lo, hi, giver) if per_key else None
        old_table, self.table = self.table, new_table  # so the new SPU learns its interval
        try:
            mailbox = self._launch(receiver, cmd.downstream_routes, receive)
        except WorkerLost as exc:
            raise ScalingError(f"split of {self.spec.name!r} SPU {giver} aborted: {exc}; nothing moved, "
                               "and the unit can scale again") from exc
        finally:
            self.table = old_table
        op = _Reconfiguration(
            cmd, rid, giver, receiver, lo, hi, new_table, {**self.spus, receiver: mailbox},
            awaiting_prepared={giver, receiver} if per_key else set(),
            awaiting_finished={giver, receiver} if per_key else set(),
        )
        self._op = op
        if per_key:
            self.spus[giver].tell(PrepareGive(rid, lo, hi, receiver, mailbox, frozenset(cmd.upstream), False))
        else:
            self._switch_routes(op)

    def _begin_merge(self, cmd: ScaleCommand) -> None:
        giver = cmd.spu_id
        rid = self.job.next_id()
        per_key = self.spec.per_key
        new_spus = {s: m for s, m in self.spus.items() if s != giver}
        if per_key:
            new_table = self.table.copy()
            lo, hi, receiver = new_table.merge(giver, cmd.into)
        else:
            new_table, lo, hi = None, 1, 0  # nothing moves: an empty range
            receiver = cmd.into if cmd.into in new_spus else min(new_spus)
        op = _Reconfiguration(
            cmd, rid, giver, receiver, lo, hi, new_table, new_spus,
            awaiting_prepared={giver, receiver} if per_key else {giver},
            awaiting_finished={giver, receiver} if per_key else {giver},
            retire=self.spus[giver],
        )
        self._op = op
        self.spus[giver].tell(PrepareGive(rid, lo, hi, receiver, self.spus[receiver] if per_key else None,
                                          frozenset(cmd.upstream), True))
        if per_key:
            self.spus[receiver].tell(PrepareReceive(rid, lo, hi, giver))

    def _replace(self, cmd: ScaleCommand) -> None:
        """An SPU was lost with its process: a fresh SPU takes its interval (its PE state is gone;
        the ack server's timeouts replay the tuples it held)."""
        lost = cmd.spu_id
        new = self.job.next_id()
        self.instance_of[new] = self.instance_of.pop(lost, 0)  # a spout's replacement reads its partition
        if self.table is not None:
            self.table = IntervalTable.from_intervals(
                [(start, new if spu == lost else spu) for start, _end, spu in self.table.intervals()],
                version=self.table.version + 1,
            )
        mailbox = self._launch(new, cmd.downstream_routes, None)
        self.spus = {**{s: m for s, m in self.spus.items() if s != lost}, new: mailbox}
        self.version += 1
        self._install_upstream(cmd, self.job.next_id(), {})
        interval = self.table.interval_of(new) if self.table is not None else None
        result = ScaleResult("replace", self.spec.name, lost, new, interval[0] if interval else None,
                             interval[1] if interval else None, 0, 0.0, 0.0, cmd.reason)
        self.history.append(result)
        log.warning("topology %r: SPU %d of %r was lost with its worker; SPU %d took over its keys",
                    self.job.name, lost, self.spec.name, new)
        cmd.reply.set_result(result)

    def _on_prepared(self, msg: Prepared) -> None:
        op = self._op
        if op is None or op.reconfig_id != msg.reconfig_id:
            return
        op.awaiting_prepared.discard(msg.spu_id)
        if not op.awaiting_prepared:
            self._switch_routes(op)

    def _switch_routes(self, op: _Reconfiguration) -> None:
        """Phase 2: every upstream SPU switches tables, then marks its channel to the giver."""
        self.table = op.new_table
        self.spus = dict(op.new_spus)
        self.version += 1
        needs_marker = op.awaiting_finished and op.giver in op.awaiting_finished
        giver_mailbox = op.retire if op.retire is not None else self.spus.get(op.giver)
        self._install_upstream(op.cmd, op.reconfig_id, {op.giver: giver_mailbox} if needs_marker else {})
        if not op.awaiting_finished:
            self._complete(op)

    def _install_upstream(self, cmd: ScaleCommand, reconfig_id: int, notify: dict[int, Any]) -> None:
        """Send every upstream SPU this unit's current routes (one RouteSpec per grouping)."""
        specs: dict[str, RouteSpec] = {}
        for spu, (mailbox, grouping) in cmd.upstream.items():
            spec = specs.get(grouping) or specs.setdefault(grouping, self.route_spec(grouping))
            try:
                mailbox.tell(InstallRoutes(reconfig_id, spec, notify))
            except Exception as exc:  # that upstream SPU died with its worker and is being replaced too
                log.warning("unit %r: upstream SPU %d unreachable: %r", self.spec.name, spu, exc)

    def _on_finished(self, msg: HandoffFinished) -> None:
        op = self._op
        if op is None or op.reconfig_id != msg.reconfig_id:
            return
        op.awaiting_finished.discard(msg.spu_id)
        op.moved_keys = max(op.moved_keys, msg.moved_keys)
        op.paused = max(op.paused, msg.paused_seconds)
        if not op.awaiting_finished:
            self._complete(op)

    def _complete(self, op: _Reconfiguration) -> None:
        self._op = None
        if op.retire is not None:
            self.launcher.stop_spu(op.retire, block=False)
        result = ScaleResult(
            action=op.cmd.action, unit=self.spec.name, giver=op.giver, receiver=op.receiver,
            lo=op.lo, hi=op.hi, moved_keys=op.moved_keys, paused_seconds=op.paused,
            seconds=time.monotonic() - op.started, reason=op.cmd.reason,
        )
        self.history.append(result)
        metrics.record_scaling_event(self.job.name, self.spec.name, op.cmd.action, op.cmd.reason)
        log.info("topology %r: %s of %r SPU %d -> %d moved %d keys in %.1f ms (keys paused %.1f ms)",
                 self.job.name, op.cmd.action, self.spec.name, op.giver, op.receiver, op.moved_keys,
                 result.seconds * 1000, op.paused * 1000)
        if not op.cmd.reply.done():
            op.cmd.reply.set_result(result)
