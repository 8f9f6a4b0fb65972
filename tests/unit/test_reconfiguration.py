"""The reconfiguration protocol's machines under every message order hypothesis can find.

A small simulated unit: upstream senders emitting per-key sequence numbers,
SPUs that run the real GiverHandoff / ReceiverHandoff machines, and the unit's
real `Reconfiguration` machine with the real `WorkloadPlan`. Channels are FIFO
per (sender, receiver) pair, as the transport guarantees; hypothesis picks
the tables, the fault and a seed for the delivery order (which channel
delivers next, which control messages come twice: a seeded random schedule,
as a draw per step cost ~40x more per example), loses one message, or kills
an SPU at any step. Properties: with every message delivered each key's
tuples are processed exactly once, in order, with their state, on the key's
new owner, and the operation completes once; with a message lost or an SPU
dead it never completes, and aborting it fails it exactly once.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from esault.keyhash import KEY_SPACE_MAX
from esault.migration.handoff import GiverHandoff, HeldBatch, ReceiverHandoff
from esault.migration.plan import plan_keyed
from esault.migration.reconfiguration import (
    CancelPrepared, Completed, Failed, Phase, Reconfiguration, SendPrepareGive, SendPrepareReceive, StopSpus, SwitchRoutes,
)
from esault.routing.interval_table import IntervalTable

KEYS = 24
UNIT = "unit"
SENDERS = (100, 101)
DOWN = 500  # the downstream SPU every SPU of the unit emits to


def hash_of(key: int) -> int:
    return key * ((KEY_SPACE_MAX + 1) // KEYS) + 7


@dataclass
class Spu:
    spu: int
    pes: dict[int, int] = field(default_factory=dict)  # key -> last sequence number processed (its state)
    giving: GiverHandoff | None = None
    receivers: set[int] = field(default_factory=set)
    receiving: ReceiverHandoff | None = None
    early_markers: set[int] = field(default_factory=set)
    early_states: list[tuple] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    stopped: bool = False


class Simulation:
    def __init__(self, old: IntervalTable, new: IntervalTable, chunks: int) -> None:
        self.plan = plan_keyed(old, new)
        self.machine = Reconfiguration(1, self.plan)
        self.tables = {u: old for u in SENDERS}
        self.todo = {u: deque((k, seq) for seq in range(1, 4) for k in range(KEYS) if k % 2 == i)
                     for i, u in enumerate(SENDERS)}
        self.sent: dict[int, int] = {k: 0 for k in range(KEYS)}
        self.spus = {s: Spu(s) for s in old.spus()}
        self.channels: dict[tuple[Any, Any], deque] = {}
        self.chunks = chunks
        self.completed = 0
        self.failed = 0
        self.dead: set[int] = set()
        self.down_last: dict[int, int] = {}  # what the downstream SPU saw last per key
        self.down_violations: list[str] = []

    # --- plumbing ----------------------------------------------------------------
    def send(self, src: Any, dst: Any, message: tuple) -> None:
        if src in self.dead or dst in self.dead:
            return
        self.channels.setdefault((src, dst), deque()).append(message)

    def enabled(self) -> list[tuple]:
        acts: list[tuple] = [("deliver", pair) for pair, q in sorted(self.channels.items(), key=repr) if q]
        acts += [("emit", u) for u in SENDERS if self.todo[u]]
        return acts

    def start(self) -> None:
        for spu in self.plan.started:  # launched with their PrepareReceive, as SpuConfig.receive does
            self.spus[spu] = Spu(spu)
            self.on_spu(spu, ("PrepareReceive", self.plan.incoming(spu)))
        self.effects(self.machine.begin())

    def effects(self, effects: list) -> None:
        for effect in effects:
            if isinstance(effect, SendPrepareGive):
                self.send(UNIT, effect.spu, ("PrepareGive", effect.ranges, effect.retire))
            elif isinstance(effect, SendPrepareReceive):
                self.send(UNIT, effect.spu, ("PrepareReceive", effect.ranges))
            elif isinstance(effect, SwitchRoutes):
                assert effect.notify == self.plan.givers
                for u in SENDERS:
                    self.send(UNIT, u, ("InstallRoutes", effect.notify))
            elif isinstance(effect, StopSpus):
                for spu in effect.spus:
                    self.spus[spu].stopped = True
            elif isinstance(effect, Completed):
                pending = [s.spu for s in self.spus.values()
                           if (s.giving is not None or s.receiving is not None) and s.spu not in self.dead]
                assert not pending, f"completed while SPUs {pending} still hand off"
                self.completed += 1
            elif isinstance(effect, Failed):
                self.failed += 1

    def step(self, action: tuple, duplicate: bool = False) -> None:
        kind, target = action
        if kind == "emit":
            key, seq = self.todo[target].popleft()
            self.sent[key] += 1
            self.send(target, self.tables[target].lookup(hash_of(key)), ("Data", target, [(key, seq)]))
            return
        src, dst = target
        message = self.channels[target].popleft()
        if dst == UNIT:
            for _ in range(2 if duplicate else 1):
                self.on_unit(message)
        elif dst in SENDERS:
            self.on_sender(dst, message)
        elif dst == DOWN:
            self.on_downstream(message)
        else:
            self.on_spu(dst, message)

    # --- the three kinds of party ---------------------------------------------------
    def on_unit(self, message: tuple) -> None:
        kind, spu, role, *rest = message
        if kind == "Prepared":
            self.effects(self.machine.prepared(spu, role))
        else:
            self.effects(self.machine.finished(spu, role, *rest))

    def on_downstream(self, message: tuple) -> None:
        if message[0] == "Out":
            _, key, seq = message
            if self.down_last.get(key, 0) + 1 != seq:
                self.down_violations.append(f"downstream key {key}: {seq} after {self.down_last.get(key, 0)}")
            self.down_last[key] = seq
        else:  # a giver's ForwardMarker: tell its receivers
            _, giver, receivers = message
            for receiver in receivers:
                self.send(DOWN, receiver, ("Seen", giver))

    def on_sender(self, u: int, message: tuple) -> None:
        _, notify = message
        self.tables[u] = self.plan.table
        for giver in sorted(notify):
            self.send(u, giver, ("Marker", u))

    def on_spu(self, s: int, message: tuple) -> None:
        spu = self.spus[s]
        if spu.stopped and message[0] == "PeersLost":  # the operation ended as the unit gave the lost up: a
            return  # notice to an SPU that stopped since is dropped (the postman counts it), as it must be
        assert not spu.stopped, f"SPU {s} got {message[0]} after it stopped"
        kind = message[0]
        if kind == "Data":
            _, source, pairs = message
            keys, values = [k for k, _ in pairs], [v for _, v in pairs]
            if spu.receiving is not None:
                keys, values, held_k, held_v = spu.receiving.divide(keys, values, hash_of)
                if held_k:
                    spu.receiving.buffer(HeldBatch(str(source), held_k, held_v, [1], [1]), 0.0)
            self.process(spu, keys, values)
        elif kind == "PrepareGive":
            _, ranges, retire = message
            spu.giving = GiverHandoff(1, ranges, SENDERS, retire)
            for sender in spu.early_markers:
                spu.giving.marker(sender)
            self.send(s, UNIT, ("Prepared", s, "giver"))
            self.maybe_hand_off(spu)
        elif kind == "Marker":
            if spu.giving is None:
                spu.early_markers.add(message[1])
                return
            spu.giving.marker(message[1])
            self.maybe_hand_off(spu)
        elif kind == "PrepareReceive":
            spu.receiving = ReceiverHandoff(1, message[1], downstream=[DOWN])
            self.send(s, UNIT, ("Prepared", s, "receiver"))
            early, spu.early_states = spu.early_states, []
            for state in early:
                self.on_spu(s, state)
        elif kind == "PeersLost":
            lost = message[1]
            if spu.giving is not None:
                spu.giving.peers_lost(lost)
                self.maybe_hand_off(spu)
            if spu.receiving is not None:
                spu.receiving.peers_lost(lost)
                self.release_ready(spu)
        elif kind == "Seen":
            if spu.receiving is None:
                spu.early_states.append(message)
                return
            spu.receiving.marker_seen(message[1], DOWN)
            self.release_ready(spu)
        elif kind == "State":
            _, giver, states, last = message
            if spu.receiving is None:
                spu.early_states.append(message)
                return
            for key, value in states:
                assert key not in spu.pes, f"key {key} handed to SPU {s}, which already has it"
                spu.pes[key] = value
            spu.receiving.moved += len(states)
            if last:
                spu.receiving.state_done(giver)
                self.release_ready(spu)

    def release_ready(self, spu: Spu) -> None:
        for giver in spu.receiving.ready_givers():
            for held in spu.receiving.release(giver, 0.0, hash_of, lambda: 1):
                self.process(spu, held.keys, held.values)
        if spu.receiving.done:
            moved = spu.receiving.moved
            spu.receiving = None
            self.send(spu.spu, UNIT, ("Finished", spu.spu, "receiver", moved, 0.0))

    def process(self, spu: Spu, keys: list, values: list) -> None:
        for key, seq in zip(keys, values):
            if spu.pes.get(key, 0) + 1 != seq:
                spu.violations.append(f"SPU {spu.spu} key {key}: {seq} after {spu.pes.get(key, 0)}")
            spu.pes[key] = seq
            self.send(spu.spu, DOWN, ("Out", key, seq))

    def maybe_hand_off(self, spu: Spu) -> None:
        giving = spu.giving
        if giving is None or not giving.ready:
            return
        spu.giving = None
        self.send(spu.spu, DOWN, ("Forward", spu.spu, sorted(giving.by_receiver())))
        moved = 0
        for receiver, ranges in giving.by_receiver().items():
            states = [(k, v) for k, v in sorted(spu.pes.items())
                      if any(lo <= hash_of(k) <= hi for lo, hi in ranges)]
            for k, _ in states:
                del spu.pes[k]
            moved += len(states)
            parts = [states[i::self.chunks] for i in range(self.chunks)]
            for i, part in enumerate(parts):
                self.send(spu.spu, receiver, ("State", spu.spu, part, i == len(parts) - 1))
        self.send(spu.spu, UNIT, ("Finished", spu.spu, "giver", moved, 0.0))


# --- strategies ------------------------------------------------------------------

@st.composite
def tables(draw: Any) -> tuple[IntervalTable, IntervalTable]:
    n = draw(st.integers(1, 3))
    old = IntervalTable.from_intervals([(i * (KEY_SPACE_MAX + 1) // n, i + 1) for i in range(n)])
    cuts = sorted(set(draw(st.lists(st.integers(1, KEYS - 1), max_size=4))))
    bounds = [0, *[hash_of(c) for c in cuts], KEY_SPACE_MAX + 1]
    owners = draw(st.lists(st.sampled_from(list(range(1, n + 1)) + [10, 11]),
                           min_size=len(bounds) - 1, max_size=len(bounds) - 1))
    assignment: dict[int, list] = {}
    for (lo, nxt), spu in zip(zip(bounds, bounds[1:]), owners):
        assignment.setdefault(spu, []).append((lo, nxt - 1))
    return old, old.assign(assignment)


SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(tables(), st.integers(1, 2), st.data())
def test_every_delivery_order_moves_each_key_once_in_order_with_its_state(pair, chunks, data):
    """Also downstream: one SPU's channel to the downstream SPU is slow (delivered only when nothing else
    can move), the adversary for key order there: a receiver must not emit a moved key's output before
    the giver's earlier output for it is through."""
    old, new = pair
    sim = Simulation(old, new, chunks)
    slow = ("deliver", (data.draw(st.sampled_from(old.spus()), label="slow to downstream"), DOWN))
    schedule = random.Random(data.draw(st.integers(0, 2**32 - 1), label="delivery order seed"))
    sim.start()
    for _ in range(5000):
        acts = sim.enabled()
        if not acts:
            break
        acts = [a for a in acts if a != slow] or acts
        sim.step(schedule.choice(acts), duplicate=schedule.random() < 0.5)
    assert not sim.enabled()
    assert sim.completed == 1 and sim.failed == 0 and sim.machine.phase is Phase.DONE
    for spu in sim.spus.values():
        assert not spu.violations, spu.violations
        assert spu.receiving is None and spu.giving is None
        if spu.stopped:
            assert spu.spu in sim.plan.retired and not spu.pes, f"retired SPU {spu.spu} kept {spu.pes}"
    for key, count in sim.sent.items():
        owner = new.lookup(hash_of(key))
        assert sim.spus[owner].pes.get(key) == count, f"key {key} on SPU {owner}: {sim.spus[owner].pes.get(key)}"
        assert sim.down_last.get(key) == count, f"downstream saw key {key} last at {sim.down_last.get(key)}"
    assert not sim.down_violations, sim.down_violations[:5]
    assert set(sim.plan.retired) == {s.spu for s in sim.spus.values() if s.stopped}


@SETTINGS
@given(tables(), st.data())
def test_a_lost_message_or_a_dead_spu_never_completes_and_the_abort_fails_it_once(pair, data):
    old, new = pair
    sim = Simulation(old, new, 1)
    if sim.plan.empty:
        return
    sim.start()
    fault_at = data.draw(st.integers(0, 60), label="fault at step")
    kill = data.draw(st.booleans(), label="kill (else lose a message)")
    schedule = random.Random(data.draw(st.integers(0, 2**32 - 1), label="delivery order seed"))
    faulted = False
    for step in range(5000):
        acts = sim.enabled()
        if not faulted and step >= fault_at:
            if kill:
                victim = data.draw(st.sampled_from(sorted(s for s, _ in sim.machine.participants)), label="victim")
                sim.dead.add(victim)
                for pair_ in list(sim.channels):
                    if victim in pair_:
                        sim.channels[pair_].clear()
                faulted = True
            else:
                control = [a for a in acts if a[0] == "deliver" and UNIT in a[1]]
                if control:
                    sim.channels[data.draw(st.sampled_from(control), label="lost")[1]].popleft()
                    faulted = True
            acts = sim.enabled()
        if not acts:
            break
        sim.step(schedule.choice(acts))
    if not faulted or sim.completed:
        # The fault came after the last message that mattered: then everything must be right.
        assert sim.completed == 1
        return
    assert sim.completed == 0 and sim.machine.phase in (Phase.PREPARING, Phase.SWITCHED)
    switched = sim.machine.phase is Phase.SWITCHED
    effects = sim.machine.abort("a worker died")
    assert effects[-1] == Failed("a worker died") and len(effects) == (1 if switched else 2)
    if not switched:  # before the switch nothing moved: the abort is a cancel (started SPUs stop)
        assert effects[0] == CancelPrepared(
            tuple(sorted({spu for spu, _ in sim.machine.participants} - set(sim.plan.started))), sim.plan.started)
    assert sim.machine.abort("again") == [] and sim.machine.phase is Phase.FAILED
    # Late answers after the abort change nothing.
    for s, role in sim.machine.participants:
        assert sim.machine.prepared(s, role) == [] and sim.machine.finished(s, role, 1, 0.0) == []


@SETTINGS
@given(tables(), st.data())
def test_without_a_rollback_an_operation_past_its_switch_ends_once_the_lost_are_given_up(pair, data):
    """No exactly_once: a participant, the downstream SPU or an upstream sender dies after the switch. The unit
    tells the live participants (PeersLost, in any order with the rest) and its machine gives the lost up:
    the operation completes exactly once, no live SPU is left handing off, a stopped SPU gets nothing more."""
    old, new = pair
    sim = Simulation(old, new, 1)
    if sim.plan.empty:
        return
    sim.start()
    schedule = random.Random(data.draw(st.integers(0, 2**32 - 1), label="delivery order seed"))
    kill_after = data.draw(st.integers(0, 40), label="steps after the switch")
    victims = sorted({s for s, _ in sim.machine.participants}) + [DOWN, *SENDERS]
    victim = data.draw(st.sampled_from(victims), label="victim")
    since_switch = None
    for _ in range(5000):
        if sim.machine.phase is Phase.SWITCHED and since_switch is None:
            since_switch = 0
        if since_switch is not None and since_switch == kill_after and victim not in sim.dead:
            sim.dead.add(victim)
            for pair_ in list(sim.channels):
                if victim in pair_:
                    sim.channels[pair_].clear()
            if victim in SENDERS:
                sim.todo[victim].clear()
            for spu in sorted({s for s, _ in sim.machine.participants} - {victim}):
                sim.send(UNIT, spu, ("PeersLost", {victim}))
            sim.effects(sim.machine.lost({victim}))
        acts = sim.enabled()
        if not acts:
            break
        sim.step(schedule.choice(acts))
        if since_switch is not None:
            since_switch += 1
    assert sim.completed == 1 and sim.failed == 0 and sim.machine.phase is Phase.DONE
    for spu in sim.spus.values():
        if spu.spu not in sim.dead:
            assert spu.receiving is None and spu.giving is None, f"SPU {spu.spu} still hands off"
    assert sim.machine.lost({victim}) == [], "giving up after the end changes nothing"


def test_a_death_before_the_switch_is_not_given_up_but_called_off():
    machine = Reconfiguration(5, held_plan())
    machine.begin()
    assert machine.lost({1}) == [] and machine.phase is Phase.PREPARING


# --- held operations: one unit's part of an atomic group -------------------------------------

from esault.migration.reconfiguration import ReadyToSwitch  # noqa: E402


def held_plan():
    """SPU 1 keeps the lower half and gives the upper to a new SPU 3; SPU 2 gives a slice to SPU 1."""
    third = (KEY_SPACE_MAX + 1) // 3
    old = IntervalTable.from_assignment({1: [(0, 2 * third - 1)], 2: [(2 * third, KEY_SPACE_MAX)]})
    new = IntervalTable.from_assignment({1: [(0, third - 1), (2 * third, 2 * third + 99)],
                                         3: [(third, 2 * third - 1)], 2: [(2 * third + 100, KEY_SPACE_MAX)]})
    return plan_keyed(old, new)


@settings(max_examples=200, deadline=None)
@given(order=st.permutations(range(3)), decision=st.sampled_from(["commit", "cancel"]),
       at=st.integers(0, 3), early_commit=st.booleans())
def test_a_held_operation_switches_only_on_commit_and_a_cancel_before_it_moves_nothing(order, decision, at,
                                                                                        early_commit):
    plan = held_plan()
    machine = Reconfiguration(9, plan, hold=True)
    effects = machine.begin()
    participants = sorted(machine.participants)
    answers = [participants[i % len(participants)] for i in order] + participants  # every one answers, some twice
    if early_commit:
        effects += machine.commit()  # before everyone prepared: ignored, the hold stays
    for step, (spu, role) in enumerate(answers):
        if step == at and decision == "cancel":
            effects += machine.cancel("another member failed")
        effects += machine.prepared(spu, role)
    kinds = [type(e) for e in effects]
    assert SwitchRoutes not in kinds, "a held operation never switches by itself"
    if decision == "commit":
        assert kinds.count(ReadyToSwitch) == 1 and machine.phase is Phase.PREPARED
        switched = machine.commit()
        assert [type(e) for e in switched] == [SwitchRoutes]
        assert machine.cancel("too late") == [] and machine.phase is Phase.SWITCHED, "after the switch keys move"
    else:
        cancel = next(e for e in effects if isinstance(e, CancelPrepared))
        assert set(cancel.started) == {3} and set(cancel.spus) == {1, 2}, "the existing participants forget"
        assert isinstance(effects[effects.index(cancel) + 1], Failed)
        assert machine.phase is Phase.FAILED and machine.commit() == []


def test_an_operation_without_hold_switches_as_soon_as_everyone_prepared():
    machine = Reconfiguration(3, held_plan())
    effects = machine.begin()
    for spu, role in sorted(machine.participants):
        effects += machine.prepared(spu, role)
    assert ReadyToSwitch not in [type(e) for e in effects] and isinstance(effects[-1], SwitchRoutes)
