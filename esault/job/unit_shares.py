"""UnitShares: a spout unit's side of a live spout rescale (at_least_once, esault.job.spout_rescale).

Its own part of a UnitActor because a live rescale is a protocol of its own
between the control thread, the unit and its spout SPUs (release the shares,
take them at the new count, adopt the SPUs the control thread started), with
state no other operation has: the phase in flight (share_move.ShareMove), the
SPUs it retired, and every SPU a loss named (a rescale adopts none of them).
The unit hands it these messages and a SpusLost; it changes the unit's SPUs,
instances and spec as the rescale goes.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Iterable

from esault.datapath.context import log
from esault.errors import ScalingError
from esault.job.share_move import AdoptSpouts, EndShareMove, GiveUpWaiting, ReleaseShares, ShareMove, TakeShares
from esault.messages.shares import ReleaseShare, ShareReleased, ShareTaken, TakeShare

__all__ = ["SHARE_MESSAGES", "UnitShares"]

Unit = Any
"""An esault.job.unit.UnitActor (not imported: unit.py imports this part)."""

SHARE_MESSAGES = frozenset({ReleaseShares, TakeShares, AdoptSpouts, GiveUpWaiting, EndShareMove, ShareReleased,
                            ShareTaken})
"""What the unit hands to UnitShares.on_receive."""


class UnitShares:
    """One per UnitActor, on its thread only."""

    def __init__(self, unit: Unit) -> None:
        self.unit = unit
        self.move: ShareMove | None = None
        """The phase of a live spout rescale in flight (None: none is)."""
        self.retired: set[int] = set()
        """Spout SPUs a live rescale stopped: a replace of one is moot."""
        self.lost_seen: set[int] = set()
        """Every SPU a SpusLost named (a live rescale adopts none of them)."""

    def on_receive(self, message: Any) -> Any:
        """The answer to one of SHARE_MESSAGES (asked by the control thread, or told by an SPU)."""
        kind = type(message)
        if kind is ShareReleased or kind is ShareTaken:
            return self._answered(message)
        if kind is ReleaseShares:
            return self._release(message)
        if kind is TakeShares:
            try:
                return self._take(message)
            except Exception as exc:  # the control thread raises it
                return exc
        if kind is AdoptSpouts:
            return self._adopt(message)
        if kind is GiveUpWaiting:
            move = self.move
            if move is None or move.rescale_id != message.rescale_id:
                return set()
            silent = set(move.waiting)
            move.lost(silent)
            return silent
        if kind is EndShareMove:
            move, self.move = self.move, None
            return set() if move is None else set(move.waiting)
        raise TypeError(f"UnitShares got {kind.__name__}, which is not one of SHARE_MESSAGES")

    def lost(self, spus: Iterable[int]) -> None:
        """These SPUs died with their worker (SpusLost): the phase in flight waits for them no more."""
        spus = frozenset(spus)
        self.lost_seen |= spus
        if self.move is not None:
            self.move.lost(spus)

    def _release(self, msg: ReleaseShares) -> Any:
        """Every SPU stops reading what it does not own at msg.instances; a Future of their positions."""
        unit = self.unit
        move = self.move = ShareMove(msg.rescale_id)
        lost = set(msg.lost) & set(unit.spus)
        future = move.phase(unit.spus, lost)
        for spu, mailbox in sorted(unit.spus.items()):
            if spu in lost:
                continue
            try:
                mailbox.tell(ReleaseShare(msg.rescale_id, msg.instances))
            except Exception as exc:  # noqa: BLE001 - its worker is gone: its partitions come from the group
                log.warning("unit %r: spout SPU %d not told to release its share: %r", unit.spec.name, spu, exc)
                move.lost([spu])
        return future

    def _answered(self, msg: ShareReleased | ShareTaken) -> None:
        unit = self.unit
        if msg.error:
            log.warning("topology %r: spout %r SPU %d: %s", unit.job.name, unit.spec.name, msg.spu, msg.error)
        if self.move is not None:
            value = msg.position if isinstance(msg, ShareReleased) else msg.error
            self.move.answered(msg.rescale_id, msg.spu, value)

    def _take(self, msg: TakeShares) -> tuple[Any, list[Any], tuple[int, ...]]:
        """The unit runs msg.instances instances: those below it that run take their share, missing ones start
        from msg.position, the others stop (they read nothing any more)."""
        unit = self.unit
        move = self.move
        if move is None or move.rescale_id != msg.rescale_id:
            raise ScalingError(f"rescale of spout {unit.spec.name!r}: no release of shares is in flight")
        n = msg.instances
        unit.spec = replace(unit.spec, parallelism=n)
        unit.downstream = msg.downstream
        staying = {s: m for s, m in unit.spus.items() if unit.instance_of.get(s, 0) < n}
        retiring = {s: m for s, m in unit.spus.items() if s not in staying}
        have = {unit.instance_of.get(s, 0) for s in staying}
        started = {i: unit.job.next_id() for i in range(n) if i not in have}
        future = move.phase([*staying, *started.values()], set(msg.lost) & set(staying))
        share = TakeShare(msg.rescale_id, n, msg.position)
        for spu, mailbox in sorted(staying.items()):
            if spu in msg.lost:
                continue
            try:
                mailbox.tell(share)
            except Exception as exc:  # noqa: BLE001 - its worker is gone: its replacement reads from the group
                log.warning("unit %r: spout SPU %d not told to take its share: %r", unit.spec.name, spu, exc)
                move.lost([spu])
        unit.starter.tell_inputs(unit.downstream, started.values())
        configs = []
        for instance, spu in started.items():
            unit.instance_of[spu] = instance
            configs.append(unit.starter.config(spu, unit.downstream, None, share=[msg.rescale_id, msg.position]))
        for spu, mailbox in retiring.items():
            del unit.spus[spu]
            unit.instance_of.pop(spu, None)
            self.retired.add(spu)
            try:  # not blocking: a worker's answer may wait behind a death the driver is handling
                unit.launcher.stop_spu(mailbox, block=False)
            except Exception as exc:  # noqa: BLE001 - lost with its worker
                log.warning("unit %r: retired spout SPU %d not stopped: %r", unit.spec.name, spu, exc)
        unit.starter.tell_inputs(unit.downstream, (), retiring)
        unit.version += 1
        return future, configs, tuple(retiring)

    def _adopt(self, msg: AdoptSpouts) -> list[int]:
        """New spout SPUs the control thread started: listed from now on (a later loss replaces them), except
        those a SpusLost named already (the control thread starts them again): they are returned."""
        unit = self.unit
        dead = [spu for spu in msg.spus if spu in self.lost_seen]
        self.lost_seen.difference_update(dead)  # started again under the same id: a new death names it again
        for spu, mailbox in msg.spus.items():
            if spu not in self.lost_seen:
                unit.spus[spu] = mailbox
        unit.version += 1
        return dead
