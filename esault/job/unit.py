"""UnitActor: one processing unit (a spout or bolt) = SPU manager + SPU routing table.

It starts its SPUs through a launcher (in this process, or in worker
processes), answers route queries, and carries out reconfigurations: a split,
a merge or an assign_workload becomes a `WorkloadPlan`, and the pure
`Reconfiguration` machine (esault.migration) runs it as prepare -> sync ->
update; this actor only turns messages into its inputs and its effects into
messages (docs/PROTOCOLS.md). Its parts: the messages it takes in this
process (unit_messages.py), the refusals of a command it cannot run
(scale_checks.py), how its SPUs start (spu_start.py) and its side of a live
spout rescale (unit_shares.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any, Iterable

import pykka

from esault.dsl.spout import merge_hook
from esault.dsl.topology import UnitSpec
from esault.errors import ResourceError, RoutingError, ScalingError, WorkerLost
from esault.keyhash import KEY_SPACE_MAX
from esault.metrics import registry as metrics
from esault.migration.plan import Move, WorkloadPlan, plan_instances, plan_keyed
from esault.migration.reconfiguration import (
    CancelPrepared, Completed, Effect, Failed, Phase, ReadyToSwitch, Reconfiguration, SendPrepareGive, SendPrepareReceive,
    StopSpus, SwitchRoutes,
)
from esault.routing.interval_table import IntervalTable
from esault.transport.endpoint import PEER_GONE, tell_all
from esault.checkpoint.coordinator import AbandonSpus, RelaunchSpus
from esault.datapath.context import JobContext, log
from esault.messages.checkpoints import Abandon
from esault.messages.control import GetLayout, GetRoutes, GetSpus, ScaleCommand, ScaleResult
from esault.job.unit_messages import (
    AbortReconfiguration, CancelHeld, CommitHeld, GetOperation, HeldOperation, LaunchSpus, ProposeLogic, ResizeSpout,
    SpusLost,
)
from esault.job.scale_checks import check_scalable
from esault.job.spu_start import SpuLauncher, SpuStarter, even_table, free_numbers
from esault.job.unit_shares import SHARE_MESSAGES, UnitShares
from esault.messages.handoff import (
    CancelReconfiguration,
    HandoffFinished,
    InstallRoutes,
    PeersLost,
    PrepareGive,
    PrepareReceive,
    Prepared,
    RouteSpec,
)


@dataclass
class _Operation:
    """A reconfiguration in flight: its command, its machine and the mailboxes it started or retires."""

    cmd: ScaleCommand
    machine: Reconfiguration
    launched: dict[int, Any]  # new SPUs, not in UnitActor.spus until the switch
    retiring: dict[int, Any] = field(default_factory=dict)  # retired SPUs, out of UnitActor.spus after it
    switched: float | None = None  # when the routes switched: prepare took switched - started
    giver: int = -1  # what the ScaleResult reports (-1 for assign_workload)
    receiver: int = -1
    lo: int | None = None
    hi: int | None = None
    started: float = field(default_factory=time.monotonic)
    spec: UnitSpec | None = None  # assign_logic: the new SPUs run this; the unit's own once it completes

    @property
    def plan(self) -> WorkloadPlan:
        return self.machine.plan


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
        self.generation = 0  # relaunches of every SPU (rollbacks, rescales): SpuConfig.generation
        self._replaced: dict[int, tuple[int, ...]] = {}  # spout SPU -> the lost ones it replaced (shared ranges)
        self._op: _Operation | None = None
        self._discarded: list[int] = []  # SPUs a rollback discarded, whose places RelaunchSpus fills
        self.history: list[ScaleResult] = []
        self._proposed: UnitSpec | None = None  # ProposeLogic's spec, for the assign_logic command after it
        self.chain = bool(getattr(spec.cls, "esault_chain", False))
        """An S2J join chain (esault.datapath.chain_spu): its SPUs in id order are the chain; it grows and shrinks at its
        tail, and every SPU is told the members (ChainMembers) whenever they change."""
        metrics.init_unknown_message_series("UnitActor")
        self.starter = SpuStarter(self)
        """How its SPUs start (config, launcher, watermark inputs, chain members): esault.job.spu_start."""
        self.shares = UnitShares(self)
        """Its side of a live spout rescale (at_least_once): esault.job.unit_shares."""

    def launch_initial_spus(self, epoch: int | None = None, positions: dict[int, Any] | None = None,
                            instances: list[int] | None = None) -> None:
        """Start the unit's first SPUs (after the unit is registered, so they can name it). A non-keyed bolt
        restored from a checkpoint starts each instance whose state it holds, and more up to its parallelism."""
        numbers = list(range(self.spec.parallelism))
        holding: set[int] | None = None  # the instances whose states the checkpoint holds (None: every one)
        if instances and self._keeps_instance_states:
            holding = set(instances)
            numbers = sorted(holding)
            free = free_numbers(holding)
            numbers += [next(free) for _ in range(self.spec.parallelism - len(numbers))]
            if len(instances) > self.spec.parallelism:
                log.warning("topology %r: bolt %r starts %d SPUs, not its parallelism %d: checkpoint %s holds the "
                            "states of %d instances, and a non-keyed instance's state can be neither split nor "
                            "merged; rescale it once it runs (a retiring instance's close() handles its state)",
                            self.job.name, self.spec.name, len(numbers), self.spec.parallelism, epoch,
                            len(instances))
        ids = [self.job.next_id() for _ in numbers]
        self.starter.tell_inputs(self.downstream, ids)
        if self.spec.per_key:
            self.table = even_table(ids)
        positions = self._shares(positions or {})
        starts = []
        for instance, spu_id in zip(numbers, ids):
            self.instance_of[spu_id] = instance
            # One the checkpoint did not have starts empty: its slot may hold an older instance's state.
            restore = epoch if holding is None or instance in holding else None
            starts.append((spu_id, restore, positions.get(instance)))
        started = self.starter.launch_many(starts, self.downstream)
        failed = None
        for (spu_id, _, _), mailbox in zip(starts, started):
            if isinstance(mailbox, Exception):
                failed = failed or mailbox
            else:
                self.spus[spu_id] = mailbox
        self.starter.announce_members()
        if failed is not None:  # the job fails with it (Job.start)
            raise failed

    @property
    def _keeps_instance_states(self) -> bool:
        """A bolt with SPUs of its own and not key grouped: each instance's state is one slot of a checkpoint,
        written and restored under its instance number (a join chain's are by rank, keyed PEs' by key)."""
        return not self.spec.is_spout and not self.spec.per_key and not self.chain

    # --- rollback (esault.checkpoint.coordinator) ------------------------------------------

    def _abandon(self, msg: AbandonSpus) -> None:
        """Discard every SPU: told Abandon (no close(), nothing published), then stopped; a split or
        merge in flight is aborted, and its half-started SPU discarded too."""
        op, self._op = self._op, None
        extra: dict[int, Any] = {}
        if op is not None:
            extra = {s: m for s, m in {**op.launched, **op.retiring}.items() if s not in self.spus}
            op.machine.abort(msg.reason)
            if not op.cmd.reply.done():
                op.cmd.reply.set_exception(ScalingError(
                    f"{self._describe(op)} aborted: {msg.reason}; the job rolled back to its last checkpoint "
                    "and the unit can scale again"))
        # With the ones an earlier relaunch could not start (their worker died as they started): the
        # interval table and the instances still name them, so this rollback's relaunch must fill them too.
        self._discarded = sorted(set(self.spus) | set(self._discarded))
        told = []
        for spu_id, mailbox in {**self.spus, **extra}.items():
            if spu_id in msg.lost:
                continue
            try:
                mailbox.tell(Abandon())
                told.append(mailbox)
            except Exception as exc:  # noqa: BLE001 - its process is gone too
                log.warning("unit %r: SPU %d not told to abandon: %r", self.spec.name, spu_id, exc)
        try:
            self.launcher.stop_spus(told)  # every StopSpu out before any confirmation is awaited
        except Exception as exc:  # noqa: BLE001 - a process is gone too
            log.warning("unit %r: SPUs not stopped cleanly: %r", self.spec.name, exc)
        self.spus = {}

    def _shares(self, positions: dict[int, Any]) -> dict[int, Any]:
        """Each instance's position. A spout with a merge hook: every instance gets the merge of all the
        checkpoint's positions (recorded by any number of instances) and keeps its own share of it."""
        hook = merge_hook(self.spec.cls) if self.spec.is_spout else None
        if hook is None or not positions:
            return positions
        merged = hook([positions[i] for i in sorted(positions)])
        return {instance: merged for instance in range(self.spec.parallelism)}

    def _relaunch(self, msg: RelaunchSpus) -> None:
        """Fresh SPUs in the discarded ones' places (same intervals and instances), restored from msg.epoch.
        A spout with a merge hook starts its current parallelism (a rescale may have changed it), instances
        0 .. n - 1, each from the merged position."""
        self.downstream = msg.downstream
        positions = msg.positions
        if msg.instances and self._keeps_instance_states:
            # The instances of the checkpoint, each with its state: SPUs started after it are gone, and ones
            # retired after it come back (their state at the checkpoint has no other home).
            self._relaunch_as(sorted(msg.instances))
        elif self.spec.is_spout and merge_hook(self.spec.cls) is not None:
            self._relaunch_as(range(self.spec.parallelism))
            positions = self._shares(positions)
        renamed = {old: self.job.next_id() for old in self._discarded}
        self.starter.tell_inputs(self.downstream, renamed.values())
        for old, new in renamed.items():
            self.instance_of[new] = self.instance_of.pop(old, 0)
        if self.table is not None:
            self.table = IntervalTable.from_intervals(
                [(start, renamed.get(spu, spu)) for start, _end, spu in self.table.intervals()],
                version=self.table.version + 1)
        self.version += 1
        self.generation += 1
        self._discarded = []
        failed: list[tuple[int, Exception]] = []
        news = list(renamed.values())
        started = self.starter.launch_many(
            [(new, msg.epoch, positions.get(self.instance_of[new])) for new in news], self.downstream)
        for new, mailbox in zip(news, started):
            if isinstance(mailbox, Exception):  # e.g. WorkerLost: its death queues another rollback
                failed.append((new, mailbox))
                self._discarded.append(new)  # the next rollback relaunches it with the others
            else:
                self.spus[new] = mailbox
        self.starter.tell_inputs(self.downstream, (), [new for new, _ in failed])
        self.starter.announce_members()
        if failed:
            raise failed[0][1]

    def _relaunch_as(self, instances: Iterable[int]) -> None:
        """The next relaunch starts one SPU per instance number given, whatever SPUs were discarded."""
        self._discarded = []
        self.instance_of = {}
        for placeholder, instance in enumerate(instances, start=1):
            self._discarded.append(-placeholder)
            self.instance_of[-placeholder] = instance

    def on_stop(self) -> None:
        for mailbox in self.spus.values():
            self.launcher.stop_spu(mailbox, block=True)

    def on_receive(self, message: Any) -> Any:
        try:
            kind = type(message)
            if kind is LaunchSpus:
                try:
                    return self.launch_initial_spus(message.epoch, message.positions, message.instances)
                except Exception as exc:  # the asker (Job) fails the job with it
                    return exc
            if kind is AbortReconfiguration:
                op = self._op
                if op is not None:
                    self._apply(op, op.machine.abort(message.reason))
                return None
            if kind is SpusLost:
                self.shares.lost(message.spus)
                return self._on_spus_lost(message)
            if kind in SHARE_MESSAGES:
                return self.shares.on_receive(message)
            if kind is AbandonSpus:
                return self._abandon(message)
            if kind is ResizeSpout:
                self.spec = replace(self.spec, parallelism=message.spus)
                return None
            if kind is RelaunchSpus:
                try:
                    return self._relaunch(message)
                except Exception as exc:  # the control thread logs it
                    return exc
            if kind is CommitHeld or kind is CancelHeld:
                op = self._op
                ours = message.reconfig_id in (op.machine.reconfig_id, None) if op is not None else False
                if ours and op.cmd.prepared is not None:
                    machine = op.machine
                    self._apply(op, machine.commit() if kind is CommitHeld else machine.cancel(message.reason))
                return None
            if kind is ProposeLogic:
                self._proposed = message.spec
                return None
            if kind is GetRoutes:
                return self.route_spec(message.grouping)
            if kind is GetSpus:
                return dict(self.spus)
            if kind is GetLayout:
                return self.layout()
            if kind is GetOperation:
                op = self._op
                return None if op is None else f"{self._describe(op)}: {op.machine.phase.value}"
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

    def layout(self) -> dict[int, tuple[tuple[int, int], ...] | None]:
        """Each SPU's hash intervals (None for a unit that is not key grouped)."""
        return {
            spu: (tuple(self.table.intervals_of(spu)) if self.table is not None else None) for spu in sorted(self.spus)
        }

    # --- split and merge ----------------------------------------------------

    def _on_scale(self, cmd: ScaleCommand) -> None:
        try:
            check_scalable(self.spec, cmd, self.spus, busy=self._op is not None,
                           retired_by_rescale=self.shares.retired, proposed=self._proposed is not None,
                           exactly_once=self.job.exactly_once)
            if cmd.action == "replace":
                self._replace(cmd)
            elif cmd.action == "split":
                self._begin_split(cmd)
            elif cmd.action == "merge":
                self._begin_merge(cmd)
            elif cmd.action == "assign_resource":
                self._begin_move(cmd)
            elif cmd.action == "rescale":
                self._begin_rescale(cmd)
            elif cmd.action == "assign_logic":
                self._begin_logic(cmd)
            else:
                self._begin_assignment(cmd)
        except Exception as exc:
            if not cmd.reply.done():
                cmd.reply.set_exception(exc)

    def _begin_split(self, cmd: ScaleCommand) -> None:
        if self.chain:
            self._begin_chain_change(cmd, grow=True)
            return
        giver, receiver = cmd.spu_id, self.job.next_id()
        if self.spec.per_key:
            new_table = self.table.copy()
            lo, hi = new_table.split(giver, receiver, cmd.at)
            plan = plan_keyed(self.table, new_table)
        else:
            lo = hi = None
            plan = plan_instances(self.spus, [*self.spus, receiver])
        self._begin(cmd, plan, giver, receiver, lo, hi)

    def _begin_merge(self, cmd: ScaleCommand) -> None:
        if self.chain:
            self._begin_chain_change(cmd, grow=False)
            return
        giver = cmd.spu_id
        if self.spec.per_key:
            new_table = self.table.copy()
            lo, hi, receiver = new_table.merge(giver, cmd.into)
            plan = plan_keyed(self.table, new_table)
        else:
            rest = [s for s in self.spus if s != giver]
            lo, hi, receiver = None, None, (cmd.into if cmd.into in rest else min(rest))
            plan = plan_instances(self.spus, rest)
        self._begin(cmd, plan, giver, receiver, lo, hi)

    def _begin_assignment(self, cmd: ScaleCommand) -> None:
        """The user's {spu: ranges}: ids the unit does not have name new SPUs (they get fresh ids)."""
        assignment = dict(cmd.assignment or {})
        renamed = {spu: (spu if spu in self.spus else self.job.next_id()) for spu in assignment}
        try:
            new_table = self.table.assign({renamed[s]: ranges for s, ranges in assignment.items()})
        except RoutingError as exc:
            raise ScalingError(f"assign_workload of {self.spec.name!r} refused: {exc}") from None
        plan = plan_keyed(self.table, new_table)
        if plan.empty:
            raise ScalingError(f"assign_workload of {self.spec.name!r}: the assignment is the current one; "
                               "nothing to do")
        self._begin(cmd, plan, -1, -1, None, None)

    def _begin_logic(self, cmd: ScaleCommand) -> None:
        """assign_logic: every SPU is replaced by one running the new bolt, which gets each key's state
        through restore_state() (so it must read the old bolt's snapshot_state())."""
        spec, self._proposed = self._proposed, None
        renamed = {spu: self.job.next_id() for spu in self.spus}
        new_table = self.table.assign({renamed[s]: ranges for s, ranges in self.table.assignment().items()})
        for old, new in renamed.items():
            self.instance_of[new] = self.instance_of.get(old, 0)
        placement = {new: self.starter.worker_of(old) for old, new in renamed.items()}  # each on its old one's worker
        op_plan = plan_keyed(self.table, new_table, placement=placement)
        self._begin(cmd, op_plan, -1, -1, None, None, spec=spec)

    def _begin_chain_change(self, cmd: ScaleCommand, grow: bool) -> None:
        """A join chain changes at its tail, whichever SPU was named: a new SPU is linked after the tail (S
        enters there from the switch on), or the tail merges into its left neighbour (esault.joins.node)."""
        order = sorted(self.spus)
        tail = order[-1]
        if grow:
            new = self.job.next_id()
            plan = WorkloadPlan(table=None, moves=(Move(KEY_SPACE_MAX, KEY_SPACE_MAX, tail, new),), started=(new,))
            self._begin(cmd, plan, tail, new, None, None)
        else:
            left = order[-2]
            plan = WorkloadPlan(table=None, moves=(Move(KEY_SPACE_MAX, KEY_SPACE_MAX, tail, left),), retired=(tail,))
            self._begin(cmd, plan, tail, left, None, None)

    def _begin_rescale(self, cmd: ScaleCommand) -> None:
        """A unit that is not key grouped: SPUs start or retire (those that retire drain behind markers)."""
        if self.chain:
            if abs(cmd.spus - len(self.spus)) != 1:
                raise ScalingError(f"join chain {self.spec.name!r} grows or shrinks one worker at a time (it has "
                                   f"{len(self.spus)}, {cmd.spus} were asked for): rescale in steps of one")
            self._begin_chain_change(cmd, grow=cmd.spus > len(self.spus))
            return
        current = sorted(self.spus)
        target = current[: cmd.spus] + [self.job.next_id() for _ in range(cmd.spus - len(current))]
        self._begin(cmd, plan_instances(current, target), -1, -1, None, None)

    def _begin_move(self, cmd: ScaleCommand) -> None:
        """assign_resource: a new SPU on the named worker takes all of the SPU's ranges and state."""
        old, new = cmd.spu_id, self.job.next_id()
        assignment = self.table.assignment()
        new_table = self.table.assign({(new if s == old else s): ranges for s, ranges in assignment.items()})
        plan = plan_keyed(self.table, new_table, placement={new: cmd.worker})
        owned = assignment[old]
        self._begin(cmd, plan, old, new, owned[0][0], owned[-1][1])

    def _begin(self, cmd: ScaleCommand, plan: WorkloadPlan, giver: int, receiver: int,
               lo: int | None, hi: int | None, spec: UnitSpec | None = None) -> None:
        """Prepare: start the plan's new SPUs (each told what it receives), then run the machine."""
        machine = Reconfiguration(self.job.next_id(), plan, hold=cmd.prepared is not None)
        op = _Operation(cmd, machine, {}, giver=giver, receiver=receiver, lo=lo, hi=hi, spec=spec)
        self.starter.number_new_instances(plan.started)
        self.starter.tell_inputs(cmd.downstream_routes, plan.started)
        for spu in plan.started:
            incoming = plan.incoming(spu)
            receive = PrepareReceive(machine.reconfig_id, incoming) if incoming else None
            try:
                op.launched[spu] = self.starter.launch(spu, cmd.downstream_routes, receive, table=plan.table,
                                                worker=plan.placement.get(spu), spec=op.spec, inputs=cmd.upstream)
            except Exception as exc:
                for mailbox in op.launched.values():
                    self.launcher.stop_spu(mailbox, block=False)
                self.starter.tell_inputs(cmd.downstream_routes, (), plan.started)
                if isinstance(exc, ResourceError) and not isinstance(exc, WorkerLost):
                    raise ScalingError(f"{self._describe(op)} refused: {exc}") from None
                if isinstance(exc, WorkerLost):
                    raise ScalingError(f"{self._describe(op)} aborted: {exc}; nothing moved, and the unit can "
                                       "scale again") from exc
                raise
        self._op = op
        self._apply(op, machine.begin())

    def _describe(self, op: _Operation) -> str:
        if op.giver >= 0:
            return f"{op.cmd.action} of {self.spec.name!r} SPU {op.giver}"
        return f"{op.cmd.action} of {self.spec.name!r}"

    def _mailbox(self, op: _Operation, spu: int) -> Any:
        for boxes in (self.spus, op.launched, op.retiring):
            if spu in boxes:
                return boxes[spu]
        return None

    def _apply(self, op: _Operation, effects: list[Effect]) -> None:
        """Carry out the machine's effects, in order."""
        rid = op.machine.reconfig_id
        for effect in effects:
            kind = type(effect)
            if kind is SendPrepareGive:
                receivers = {r: self._mailbox(op, r) for _, _, r in effect.ranges}
                if not self._prepare(op, effect.spu, PrepareGive(rid, effect.ranges, receivers,
                                                                 frozenset(op.cmd.upstream), effect.retire)):
                    return
            elif kind is SendPrepareReceive:
                if not self._prepare(op, effect.spu, PrepareReceive(rid, effect.ranges)):
                    return
            elif kind is SwitchRoutes:
                self._switch_routes(op, effect.notify)
            elif kind is StopSpus:
                # A non-keyed SPU's close() hands its state on downstream (a partial aggregate): the operation
                # completes once it has, so no checkpoint after it can miss that output.
                block = not self.spec.per_key
                for spu in effect.spus:
                    mailbox = op.retiring.get(spu)
                    if mailbox is not None:
                        try:
                            self.launcher.stop_spu(mailbox, block=block)
                        except Exception as exc:  # noqa: BLE001 - lost with its worker (SpusLost)
                            log.warning("unit %r: retired SPU %d not stopped: %r", self.spec.name, spu, exc)
            elif kind is Completed:
                self._complete(op, effect)
            elif kind is ReadyToSwitch:
                if not op.cmd.prepared.done():
                    op.cmd.prepared.set_result(HeldOperation(self.spec.name, rid, dict(op.launched)))
            elif kind is CancelPrepared:
                self._cancel_prepared(op, effect)
            elif kind is Failed:
                if self._op is op:
                    self._op = None
                if not op.cmd.reply.done():
                    op.cmd.reply.set_exception(ScalingError(f"{self._describe(op)} aborted: {effect.reason}"))

    def _prepare(self, op: _Operation, spu: int, message: Any) -> bool:
        """Tell a participant to prepare. Its worker may have been declared dead (disconnected) before the
        operation began: nothing moved, so the operation is called off at once (False) rather than waiting
        for an answer that cannot come."""
        try:
            self.spus[spu].tell(message)
            return True
        except PEER_GONE as exc:
            self._apply(op, op.machine.abort(f"SPU {spu}'s worker is gone ({exc})"))
            return False

    def _cancel_prepared(self, op: _Operation, effect: CancelPrepared) -> None:
        """Nothing moved yet: participants forget their ranges, the SPUs the operation started stop."""
        rid = op.machine.reconfig_id
        for spu in effect.spus:
            try:
                if spu in self.spus:
                    self.spus[spu].tell(CancelReconfiguration(rid))
            except Exception as exc:  # noqa: BLE001 - its worker died (that may be why we cancel)
                log.warning("unit %r: SPU %d not told of the cancel: %r", self.spec.name, spu, exc)
        for spu in effect.started:
            mailbox = op.launched.pop(spu, None)
            if mailbox is not None:
                try:
                    self.launcher.stop_spu(mailbox, block=False)
                except Exception as exc:  # noqa: BLE001
                    log.warning("unit %r: started SPU %d not stopped: %r", self.spec.name, spu, exc)
        self.starter.tell_inputs(op.cmd.downstream_routes, (), effect.started)

    def _switch_routes(self, op: _Operation, notify: frozenset[int]) -> None:
        """Sync: every upstream SPU switches tables, then marks its channel to each giver."""
        plan = op.plan
        op.switched = time.monotonic()
        notify_boxes = {g: self._mailbox(op, g) for g in notify}
        op.retiring = {s: self.spus[s] for s in plan.retired if s in self.spus}
        if plan.table is not None:
            self.table = plan.table
        self.spus = {**{s: m for s, m in self.spus.items() if s not in op.retiring}, **op.launched}
        self.version += 1
        self.starter.announce_members()
        self._install_upstream(op.cmd, op.machine.reconfig_id, notify_boxes)

    def _replace(self, cmd: ScaleCommand) -> None:
        """An SPU was lost with its process: a fresh SPU takes its interval (its PE state is gone;
        the ack server's timeouts replay the tuples it held)."""
        lost = cmd.spu_id
        if lost in self.shares.retired:  # a live spout rescale retired it before its loss was handled
            cmd.reply.set_result(ScaleResult("replace", self.spec.name, lost, -1, None, None, 0, 0.0, 0.0,
                                             cmd.reason))
            return
        new = self.job.next_id()
        self.instance_of[new] = self.instance_of.get(lost, 0)  # a spout's replacement reads its partition
        table = None if self.table is None else IntervalTable.from_intervals(
            [(start, new if spu == lost else spu) for start, _end, spu in self.table.intervals()],
            version=self.table.version + 1,
        )
        self.starter.tell_inputs(cmd.downstream_routes, [new], [lost])
        try:
            while True:
                try:
                    # a spout's replacement first leases again the shared blocks the lost one held (and those
                    # it replaced in turn, had it died before it asked)
                    lineage = (lost, *self._replaced.get(lost, ())) if self.spec.is_spout else ()
                    mailbox = self.starter.launch(new, cmd.downstream_routes, None, table=table, replaces=lineage,
                                           inputs=cmd.upstream)
                    break
                except WorkerLost as exc:  # that worker died too: another one, until none is left (UnitStartError)
                    log.warning("topology %r: replacing SPU %d of %r: %s; trying another worker", self.job.name,
                                lost, self.spec.name, exc)
        except BaseException:  # nothing changed: the unit still lists the lost SPU (tried again, or the job fails)
            del self.instance_of[new]
            self.starter.tell_inputs(cmd.downstream_routes, (), [new])
            raise
        self.instance_of.pop(lost, None)
        self._replaced.pop(lost, None)
        if lineage:
            self._replaced[new] = lineage
        if table is not None:
            self.table = table
        self.spus = {**{s: m for s, m in self.spus.items() if s != lost}, new: mailbox}
        self.version += 1
        self.starter.announce_members()
        self._install_upstream(cmd, self.job.next_id(), {})
        owned = self.table.intervals_of(new) if self.table is not None else None
        result = ScaleResult("replace", self.spec.name, lost, new, owned[0][0] if owned else None,
                             owned[-1][1] if owned else None, 0, 0.0, 0.0, cmd.reason)
        self.history.append(result)
        log.warning("topology %r: SPU %d of %r was lost with its worker; SPU %d took over its keys",
                    self.job.name, lost, self.spec.name, new)
        cmd.reply.set_result(result)

    def _on_spus_lost(self, msg: SpusLost) -> None:
        """Without exactly_once a worker died. Before the switch the operation is called off (`abort` cancels
        it). Past the switch its live participants stop waiting for the lost SPUs (markers, states, a
        downstream's answers), and the machine for their HandoffFinished, so the operation ends and the lost
        SPUs' replacements, queued behind it, can run."""
        op = self._op
        if op is None:
            return
        lost = frozenset(msg.spus)
        if op.machine.phase in (Phase.PREPARING, Phase.PREPARED):
            self._apply(op, op.machine.abort(f"a worker died holding SPUs {sorted(lost)}"))
            return
        if op.machine.phase is not Phase.SWITCHED:
            return
        notice = PeersLost(op.machine.reconfig_id, lost)
        for spu in sorted({s for s, _ in op.machine.participants} - lost):
            try:
                self._mailbox(op, spu).tell(notice)
            except Exception as exc:  # noqa: BLE001 - its worker died too: its own SpusLost follows
                log.warning("unit %r: SPU %d not told of the lost SPUs: %r", self.spec.name, spu, exc)
        log.warning("topology %r: %s goes on without SPUs %s, lost with their worker", self.job.name,
                    self._describe(op), sorted(lost))
        self._apply(op, op.machine.lost(lost))

    def _on_prepared(self, msg: Prepared) -> None:
        op = self._op
        if op is not None and op.machine.reconfig_id == msg.reconfig_id:
            self._apply(op, op.machine.prepared(msg.spu_id, msg.role))

    def _install_upstream(self, cmd: ScaleCommand, reconfig_id: int, notify: dict[int, Any]) -> None:
        """Send every upstream SPU this unit's current routes (one RouteSpec per grouping)."""
        by_grouping: dict[str, dict[Any, int]] = {}
        for spu, (mailbox, grouping) in cmd.upstream.items():
            by_grouping.setdefault(grouping, {})[mailbox] = spu
        for grouping, mailboxes in by_grouping.items():  # one encoding per grouping, not one per upstream SPU
            message = InstallRoutes(reconfig_id, self.route_spec(grouping), notify)
            for mailbox, exc in tell_all(mailboxes, message):  # died with its worker, being replaced too
                log.warning("unit %r: upstream SPU %d unreachable: %r", self.spec.name, mailboxes[mailbox], exc)

    def _on_finished(self, msg: HandoffFinished) -> None:
        op = self._op
        if op is not None and op.machine.reconfig_id == msg.reconfig_id:
            self._apply(op, op.machine.finished(msg.spu_id, msg.role, msg.moved_keys, msg.paused_seconds))

    def _complete(self, op: _Operation, done: Completed) -> None:
        self._op = None
        if op.spec is not None:
            self.spec = op.spec  # splits, merges and relaunches from now on start the new bolt
        plan = op.plan
        result = ScaleResult(
            action=op.cmd.action, unit=self.spec.name, giver=op.giver, receiver=op.receiver,
            lo=op.lo, hi=op.hi, moved_keys=done.moved_keys, paused_seconds=done.paused_seconds,
            seconds=time.monotonic() - op.started, reason=op.cmd.reason,
            moves=tuple((m.lo, m.hi, m.giver, m.receiver) for m in plan.moves),
            started=plan.started, retired=plan.retired,
        )
        self.history.append(result)
        for spu in plan.retired:
            self.instance_of.pop(spu, None)
        if not op.cmd.reply.done():
            op.cmd.reply.set_result(result)
        metrics.record_scaling_event(self.job.name, self.spec.name, op.cmd.action, op.cmd.reason)
        prepare = ((op.switched or op.started) - op.started) * 1000
        log.info("topology %r: %s moved %d keys in %d range(s) (%d SPUs started, %d retired) in %.1f ms: "
                 "prepare %.1f ms, sync and update %.1f ms (keys paused %.1f ms)", self.job.name, self._describe(op),
                 done.moved_keys, len(plan.moves), len(plan.started), len(plan.retired), result.seconds * 1000,
                 prepare, result.seconds * 1000 - prepare, done.paused_seconds * 1000)
