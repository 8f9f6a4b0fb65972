"""The unit's side of one reconfiguration, as a pure state machine that returns effects.

prepare -> sync -> update (Trisk; docs/PROTOCOLS.md):

1. prepare: the new SPUs are started (the actor does it before `begin`,
   each told its incoming ranges); every giver learns its outgoing ranges,
   every existing receiver its incoming ones. Each answers Prepared.
2. sync: once all are prepared the unit switches to the new table and every
   upstream SPU installs it, then sends an EpochMarker down its channel to
   each giver. Only the moved keys pause (at their receivers).
3. update: a giver with markers from every upstream SPU hands each range's
   state to its receiver; a receiver replays what it held for a giver once
   that giver's last chunk is in. Each side says HandoffFinished; when all
   have, retired SPUs stop and the operation completes.

Held operations (one unit's part of an atomic group, docs/CONTROL_PLANE.md):
with `hold`, step 2 waits after every participant prepared (ReadyToSwitch)
until `commit()`; `cancel()` before that calls the operation off cleanly,
since nothing has moved yet: participants forget their ranges, the SPUs it
started stop.

The machine never sees an actor: `UnitActor` feeds it messages and carries
out the effects it returns, so the protocol is tested with hypothesis under
reordered, duplicated and lost messages (tests/unit/test_reconfiguration.py).
A participant's death is not handled here: the job aborts the operation
(`abort`), and under exactly_once the rollback discards every SPU.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Iterable

from esault.migration.plan import WorkloadPlan


GIVER, RECEIVER = "giver", "receiver"


class Phase(enum.Enum):
    PREPARING = "preparing"
    PREPARED = "prepared"  # held: every participant prepared, the switch waits for commit()
    SWITCHED = "switched"
    DONE = "done"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class SendPrepareGive:
    spu: int
    ranges: tuple[tuple[int, int, int], ...]  # (lo, hi, receiver)
    retire: bool


@dataclass(frozen=True, slots=True)
class SendPrepareReceive:
    spu: int
    ranges: tuple[tuple[int, int, int], ...]  # (lo, hi, giver)


@dataclass(frozen=True, slots=True)
class SwitchRoutes:
    """Install the plan's table and SPU set upstream; markers go to `notify` (the givers)."""

    notify: frozenset[int]


@dataclass(frozen=True, slots=True)
class StopSpus:
    spus: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Completed:
    moved_keys: int
    paused_seconds: float


@dataclass(frozen=True, slots=True)
class Failed:
    reason: str


@dataclass(frozen=True, slots=True)
class ReadyToSwitch:
    """A held operation is prepared: tell whoever holds it (the group) and wait for commit() or cancel()."""


@dataclass(frozen=True, slots=True)
class CancelPrepared:
    """Before any switch: the existing participants forget their ranges, the started SPUs stop."""

    spus: tuple[int, ...]
    started: tuple[int, ...]


Effect = (SendPrepareGive | SendPrepareReceive | SwitchRoutes | StopSpus | Completed | Failed | ReadyToSwitch
          | CancelPrepared)


class Reconfiguration:
    """One operation on one unit: which SPUs still owe Prepared and HandoffFinished."""

    def __init__(self, reconfig_id: int, plan: WorkloadPlan, hold: bool = False) -> None:
        self.reconfig_id = reconfig_id
        self.plan = plan
        self.hold = hold
        # (spu, role): an SPU may give some ranges and receive others; each role answers for itself.
        self.participants = frozenset({(g, GIVER) for g in plan.givers} | {(r, RECEIVER) for r in plan.receivers})
        self.awaiting_prepared = set(self.participants)
        self.awaiting_finished = set(self.participants)
        self.phase = Phase.PREPARING
        self.moved_keys = 0
        self.paused_seconds = 0.0

    def begin(self) -> list[Effect]:
        """The setup messages; new SPUs were started with their PrepareReceive already."""
        plan = self.plan
        retired = set(plan.retired)
        effects: list[Effect] = [SendPrepareGive(g, plan.outgoing(g), g in retired) for g in sorted(plan.givers)]
        effects += [SendPrepareReceive(r, plan.incoming(r)) for r in sorted(plan.receivers - set(plan.started))]
        return effects + self._maybe_switch()

    def prepared(self, spu: int, role: str) -> list[Effect]:
        if self.phase is not Phase.PREPARING:
            return []
        self.awaiting_prepared.discard((spu, role))
        return self._maybe_switch()

    def finished(self, spu: int, role: str, moved_keys: int, paused_seconds: float) -> list[Effect]:
        """A participant's side is done. Before the switch this cannot be (a giver waits for markers
        that only follow the switch; a receiver for a giver's state): such a message is ignored."""
        if self.phase is not Phase.SWITCHED or (spu, role) not in self.awaiting_finished:
            return []
        self.awaiting_finished.discard((spu, role))
        if role == GIVER:  # each moved key is counted once, by the SPU that gave it
            self.moved_keys += moved_keys
        self.paused_seconds = max(self.paused_seconds, paused_seconds)
        return self._maybe_complete()

    def abort(self, reason: str) -> list[Effect]:
        """A participant died or the job rolls back: the operation fails (once). Before the switch that is a
        cancel (the SPUs it started stop, and would otherwise be left running with no keys)."""
        if self.phase in (Phase.PREPARING, Phase.PREPARED):
            return self.cancel(reason)
        if self.phase in (Phase.DONE, Phase.FAILED):
            return []
        self.phase = Phase.FAILED
        return [Failed(reason)]

    def lost(self, spus: Iterable[int]) -> list[Effect]:
        """Participants died with their worker past the switch, without exactly_once (no rollback follows):
        they never say HandoffFinished; the survivors were told (PeersLost) not to wait for them either.
        Before the switch a death calls the operation off instead (abort)."""
        if self.phase is not Phase.SWITCHED:
            return []
        gone = set(spus)
        self.awaiting_finished = {(spu, role) for spu, role in self.awaiting_finished if spu not in gone}
        return self._maybe_complete()

    def commit(self) -> list[Effect]:
        """A held operation may switch now (its group decided). Before ReadyToSwitch it is a mistake: ignored."""
        if self.phase is not Phase.PREPARED:
            return []
        self.hold = False
        self.phase = Phase.PREPARING
        return self._maybe_switch()

    def cancel(self, reason: str) -> list[Effect]:
        """Call off an operation that has not switched: nothing moved, so nothing is lost. After the
        switch it is too late (the keys are moving): ignored, the operation goes on."""
        if self.phase not in (Phase.PREPARING, Phase.PREPARED):
            return []
        self.phase = Phase.FAILED
        started = set(self.plan.started)
        existing = tuple(sorted({spu for spu, _ in self.participants} - started))
        return [CancelPrepared(existing, tuple(self.plan.started)), Failed(reason)]

    def _maybe_switch(self) -> list[Effect]:
        if self.phase is not Phase.PREPARING or self.awaiting_prepared:
            return []
        if self.hold:
            self.phase = Phase.PREPARED
            return [ReadyToSwitch()]
        self.phase = Phase.SWITCHED
        return [SwitchRoutes(frozenset(self.plan.givers))] + self._maybe_complete()

    def _maybe_complete(self) -> list[Effect]:
        if self.awaiting_finished:
            return []
        self.phase = Phase.DONE
        stop: list[Effect] = [StopSpus(self.plan.retired)] if self.plan.retired else []
        return stop + [Completed(self.moved_keys, self.paused_seconds)]
