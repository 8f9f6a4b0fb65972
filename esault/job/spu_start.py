"""Starting a unit's SPUs: where each goes, what it is told, and whom its start concerns.

Its own part of a UnitActor because every path that adds SPUs (the first launch, a rollback's relaunch, a
split, a merge's new layout, a replacement, a live spout rescale) starts them the same way: a SpuConfig from
the unit's state now (its table, instance numbers, generation, watermark role), the launcher that puts it in
this process or on a worker, the downstream SPUs told of a new watermark input before it starts, and a join
chain's members told the new set. A new resource provider changes the launcher, never this.
"""

from __future__ import annotations

import itertools
from typing import Any, Iterable, Iterator, Protocol, Sequence

from esault.datapath.context import JobContext, log
from esault.dsl.topology import UnitSpec
from esault.dsl.watermark_flow import emits_watermarks, reads_watermarks
from esault.keyhash import KEY_SPACE_MAX
from esault.messages.chains import ChainMembers
from esault.messages.control import SpuConfig
from esault.messages.data import WatermarkInputs
from esault.messages.handoff import PrepareReceive, RouteSpec
from esault.routing.interval_table import IntervalTable

__all__ = ["SpuLauncher", "SpuStarter", "even_table", "free_numbers"]

Unit = Any
"""An esault.job.unit.UnitActor (not imported: unit.py imports this part)."""


class SpuLauncher(Protocol):
    """Starts and stops SPU actors wherever the resource manager put them."""

    def start_spu(self, spec: UnitSpec, cfg: SpuConfig, job: JobContext, worker: str | None = None) -> Any: ...

    def start_spus(self, starts: Sequence[tuple[UnitSpec, SpuConfig, JobContext, str | None]]) -> list[Any]:
        """Each start_spu at once; each item of the result the mailbox, or the exception its start raised."""

    def stop_spu(self, mailbox: Any, block: bool) -> None: ...

    def stop_spus(self, mailboxes: Iterable[Any]) -> None:
        """stop_spu(block=True) of each, at once."""


def even_table(spu_ids: list[int]) -> IntervalTable:
    """Initial intervals of a key-grouped unit: equal slices of the key space."""
    n = len(spu_ids)
    return IntervalTable.from_intervals([(i * (KEY_SPACE_MAX + 1) // n, s) for i, s in enumerate(spu_ids)])


def free_numbers(taken: set[Any]) -> Iterator[int]:
    """The instance numbers not in `taken`, lowest first."""
    return (i for i in itertools.count() if i not in taken)


class SpuStarter:
    """One per UnitActor, on its thread only. Reads the unit's state at each call (its spec, table and
    instance numbers change with every reconfiguration)."""

    def __init__(self, unit: Unit) -> None:
        self.unit = unit
        spec, topology = unit.spec, unit.job.topology
        self.sends_watermarks = emits_watermarks(topology, topology.output_unit(spec.name))
        """Its SPUs send watermarks: the downstream SPUs hear of each one before it starts (tell_inputs)."""
        self.reads_watermarks = not spec.is_spout and reads_watermarks(topology, spec.name)

    def launch(self, spu_id: int, downstream: tuple[RouteSpec, ...], receive: PrepareReceive | None,
               epoch: int | None = None, position: Any = None, table: IntervalTable | None = None,
               worker: str | None = None, spec: UnitSpec | None = None, replaces: tuple[int, ...] = (),
               inputs: Iterable[int] = (), share: list[Any] | None = None) -> Any:
        """Start one SPU (on `worker`, or where the launcher puts it). `inputs`: the upstream SPUs whose
        watermarks it waits for (one a reconfiguration starts; the first SPUs hear of them from the upstream
        units as those start)."""
        unit = self.unit
        spec, cfg = self.config(spu_id, downstream, receive, epoch, position, table, spec, replaces, inputs, share)
        if worker is None:
            return unit.launcher.start_spu(spec, cfg, unit.job)
        return unit.launcher.start_spu(spec, cfg, unit.job, worker=worker)

    def launch_many(self, starts: Sequence[tuple[int, int | None, Any]],
                    downstream: tuple[RouteSpec, ...]) -> list[Any]:
        """Start several SPUs, each (SPU id, the epoch it restores or None, its position), where the launcher
        puts them, all at once (a unit's first SPUs, a rollback's relaunch): each item of the result its
        mailbox, or the exception its start raised."""
        unit = self.unit
        configs = []
        for spu_id, epoch, position in starts:
            spec, cfg = self.config(spu_id, downstream, None, epoch, position)
            configs.append((spec, cfg, unit.job, None))
        return unit.launcher.start_spus(configs)

    def config(self, spu_id: int, downstream: tuple[RouteSpec, ...], receive: PrepareReceive | None,
               epoch: int | None = None, position: Any = None, table: IntervalTable | None = None,
               spec: UnitSpec | None = None, replaces: tuple[int, ...] = (), inputs: Iterable[int] = (),
               share: list[Any] | None = None) -> tuple[UnitSpec, SpuConfig]:
        """What launch() starts: the spec and the SpuConfig of one SPU (a live spout rescale starts its new
        SPUs from the control thread, with these)."""
        unit = self.unit
        table = unit.table if table is None else table
        intervals = tuple(table.intervals_of(spu_id)) if table is not None and spu_id in table else None
        extra: dict[str, Any] = {"unit_ref": unit.actor_ref}
        if share is not None:  # a live spout rescale started it: [rescale id, the position it takes from]
            extra["take_share"] = share
        if self.reads_watermarks or (unit.spec.is_spout and self.sends_watermarks):
            extra["watermarks"] = True  # the SPU combines (a bolt) or sends (a spout) watermarks: datapath/watermarks.py
            if inputs and not unit.spec.is_spout:
                extra["watermark_inputs"] = sorted(inputs)
        cfg = SpuConfig(unit.job.name, unit.spec.name, spu_id, intervals, downstream, receive,
                        extra=extra, instance=unit.instance_of.get(spu_id, 0),
                        instances=unit.spec.parallelism, restore_epoch=epoch, position=position,
                        generation=unit.generation, replaces=replaces)
        return (unit.spec if spec is None else spec), cfg

    def tell_inputs(self, routes: Iterable[RouteSpec], added: Iterable[int], removed: Iterable[int] = ()) -> None:
        """Tell every downstream SPU which SPUs of this unit start (before they start: each holds the watermarks
        there until it sends its own) or are gone for good. Only for a unit whose SPUs send watermarks."""
        unit = self.unit
        added, removed = frozenset(added), frozenset(removed)
        if not self.sends_watermarks or not (added or removed):
            return
        message = WatermarkInputs(added, removed)
        for route in routes:
            for spu, mailbox in route.spus.items():
                try:
                    mailbox.tell(message)
                except Exception as exc:  # noqa: BLE001 - its worker died: a rollback or replacement follows
                    log.warning("unit %r: downstream SPU %d not told of its inputs: %r", unit.spec.name, spu, exc)

    def announce_members(self) -> None:
        """A join chain's SPUs learn who their neighbours are (and where), after every change of the set."""
        unit = self.unit
        if not unit.chain:
            return
        members = ChainMembers(dict(unit.spus))
        for spu, mailbox in unit.spus.items():
            try:
                mailbox.tell(members)
            except Exception as exc:  # noqa: BLE001 - its worker died: a rollback or replacement follows
                log.warning("unit %r: chain SPU %d not told its members: %r", unit.spec.name, spu, exc)

    def number_new_instances(self, spus: Iterable[int]) -> None:
        """Give each new SPU the lowest instance number no live SPU has: two SPUs sharing one would write one
        checkpoint slot, and a rollback would give both the same state."""
        unit = self.unit
        free = free_numbers({unit.instance_of.get(s) for s in unit.spus})
        for spu in spus:
            if spu not in unit.instance_of:
                unit.instance_of[spu] = next(free)

    def worker_of(self, spu: int) -> str | None:
        """The worker process the launcher put `spu` on (None: this process, or a launcher that does not say)."""
        where = getattr(self.unit.launcher, "worker_of", None)
        return where(spu) if where is not None else None
