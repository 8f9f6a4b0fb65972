"""The ack server (a real actor): it relays acks to the spout SPUs that track their trees, says where they are,
and fails every spout's trees at once; one unreachable spout never keeps the others from theirs."""

from __future__ import annotations

import queue
from types import SimpleNamespace

import pytest

from esault.clock import ManualClock
from esault.datapath import acker as acker_module
from esault.datapath.ack_router import GONE, AckRouter
from esault.datapath.acker import AckServerActor
from esault.messages.acking import (AckFail, AckUpdate, FailPending, FindOwner, OwnerAt, OwnerGone, RangeRequest,
                                   RegisterOwner)
from esault.messages.data import Tick
from esault.reliability.roots import new_root


class DeadWorkerMailbox:
    """What a RemoteMailbox of a dead worker does: the endpoint has no connection to it any more."""

    def __init__(self) -> None:
        self.tells = 0

    def tell(self, message) -> None:
        self.tells += 1
        raise LookupError("Endpoint('driver') has no connection to process 'w1'")


class QueueMailbox:
    def __init__(self) -> None:
        self.got: queue.Queue = queue.Queue()

    def tell(self, message) -> None:
        self.got.put(message)

    def next(self):
        return self.got.get(timeout=30)


class Hosts:
    """The driver's worker_host hook: each worker's host mailbox, recording what it is told."""

    def __init__(self) -> None:
        self.boxes: dict[str, QueueMailbox] = {}

    def __call__(self, process: str) -> QueueMailbox:
        return self.boxes.setdefault(process, QueueMailbox())


class Ticker:
    """Records who is subscribed (the job's Ticker would tell them Tick every tick_interval)."""

    def __init__(self) -> None:
        self.subscribers: list = []

    def subscribe(self, mailbox) -> None:
        self.subscribers.append(mailbox)

    def unsubscribe(self, mailbox) -> None:
        if mailbox in self.subscribers:
            self.subscribers.remove(mailbox)


def make_job(clock=None, timeout: float = 300.0, process=None):
    job = SimpleNamespace(name="wc", clock=clock or ManualClock(), config=SimpleNamespace(message_timeout=timeout),
                          process=process, worker_host=Hosts(), spout_progress={}, acker=None, ticker=Ticker())
    job.acks = AckRouter(job)
    return job


@pytest.fixture
def server():
    started = []

    def start(job):
        ref = AckServerActor.start(job)
        started.append(ref)
        return ref

    yield start
    for ref in started:
        ref.stop()


def test_fail_pending_reaches_live_spouts_when_one_spouts_worker_is_gone(server):
    acker = server(make_job())
    live, dead1, dead3 = QueueMailbox(), DeadWorkerMailbox(), DeadWorkerMailbox()
    for owner, mailbox in ((1, dead1), (2, live), (3, dead3)):
        acker.tell(RegisterOwner(owner, mailbox))
    acker.tell(FailPending("worker w1 died"))
    got = live.next()
    assert isinstance(got, FailPending) and got.reason == "worker w1 died"
    acker.ask(Tick(0.0))  # a barrier: the FailPending was handled
    assert dead1.tells == dead3.tells == 1
    state = acker.proxy().routes.get()
    assert state[1] is GONE and state[3] is GONE and state[2] is live  # the dead are known as gone


def test_a_spout_that_stopped_is_forgotten_and_gets_no_fail_pending_but_only_with_its_own_mailbox(server):
    acker = server(make_job())
    old, new, stays = QueueMailbox(), QueueMailbox(), QueueMailbox()
    acker.tell(RegisterOwner(1, old))
    acker.tell(RegisterOwner(2, stays))
    acker.tell(OwnerGone(2, QueueMailbox()))  # not the mailbox registered for 2: nothing changes
    acker.tell(OwnerGone(1, old))  # the generation before a rollback stopped
    acker.tell(AckUpdate({new_root(1): 4}))  # an ack still on its way to it: dropped here
    acker.tell(FailPending("rolled back"))
    assert stays.next() == FailPending("rolled back")
    acker.ask(Tick(0.0))  # a barrier: everything above was handled
    assert old.got.empty()
    assert acker.proxy().owners.get() == {2: stays}
    assert acker.proxy().dropped.get() == 1
    acker.tell(RegisterOwner(1, new))  # an SPU registering under that id later is reached again
    acker.tell(FailPending("again"))
    assert new.next() == FailPending("again") and stays.next() == FailPending("again")


def test_an_ack_is_relayed_to_the_owner_of_each_root_split_per_owner(server):
    acker = server(make_job())
    one, two = QueueMailbox(), QueueMailbox()
    acker.tell(RegisterOwner(1, one))
    acker.tell(RegisterOwner(2, two))
    a, b, c = new_root(1), new_root(2), new_root(1)
    acker.tell(AckUpdate({a: 5, b: 6, c: 7}))
    acker.tell(AckFail(b, "bolt said no"))
    assert one.next() == AckUpdate({a: 5, c: 7})
    assert two.next() == AckUpdate({b: 6})
    assert two.next() == AckFail(b, "bolt said no")
    assert acker.proxy().relayed.get() == 3


def test_acks_for_a_spout_not_registered_yet_wait_for_it_and_a_worker_that_asked_hears_where_it_is(server):
    job = make_job()
    acker = server(job)
    root = new_root(9)
    acker.tell(AckUpdate({root: 3}))  # its batch overtook its RegisterOwner
    acker.tell(FindOwner(9, "w2"))
    acker.ask(Tick(0.0))
    assert job.worker_host.boxes == {}  # nobody knows yet
    spout = QueueMailbox()
    acker.tell(RegisterOwner(9, spout))
    assert spout.next() == AckUpdate({root: 3})
    assert acker.proxy().relayed.get() == 1  # once, though it waited for its owner
    told = job.worker_host.boxes["w2"].next()
    assert told == OwnerAt("wc", 9, spout)
    acker.tell(FindOwner(9, "w3"))  # known now: answered at once
    acker.ask(Tick(0.0))
    assert job.worker_host.boxes["w3"].next() == OwnerAt("wc", 9, spout)


def test_held_acks_are_dropped_after_message_timeout_and_never_delivered(server):
    clock = ManualClock()
    acker = server(make_job(clock, timeout=30.0))
    acker.tell(AckUpdate({new_root(4): 1}))
    acker.ask(Tick(0.0))  # held, with its deadline 30 s from now
    clock.advance(30.0)
    acker.ask(Tick(30.0))
    spout = QueueMailbox()
    acker.tell(RegisterOwner(4, spout))
    acker.ask(Tick(30.0))
    assert spout.got.empty()
    assert acker.proxy().dropped.get() == 1


def test_the_ack_server_ticks_only_while_it_holds_acks(server):
    clock = ManualClock()
    job = make_job(clock, timeout=30.0)
    acker = server(job)
    one, two = QueueMailbox(), QueueMailbox()
    acker.tell(RegisterOwner(1, one))
    acker.tell(AckUpdate({new_root(1): 1}))  # delivered: nothing held
    acker.ask(Tick(0.0))
    assert job.ticker.subscribers == []
    acker.tell(AckUpdate({new_root(2): 1}))
    acker.tell(AckUpdate({new_root(3): 1}))
    acker.ask(Tick(0.0))
    assert job.ticker.subscribers == [acker]  # once, however many it holds
    acker.tell(RegisterOwner(2, two))
    acker.ask(Tick(0.0))
    assert job.ticker.subscribers == [acker]  # owner 3's ack still waits
    clock.advance(30.0)
    acker.ask(Tick(30.0))
    assert job.ticker.subscribers == []


def test_held_acks_are_bounded(server, monkeypatch):
    monkeypatch.setattr(acker_module, "MAX_HELD", 3)
    acker = server(make_job())
    for i in range(5):
        acker.tell(AckUpdate({new_root(7): i + 1}))
    spout = QueueMailbox()
    acker.tell(RegisterOwner(7, spout))
    assert [spout.next().deltas.popitem()[1] for _ in range(3)] == [1, 2, 3]
    acker.ask(Tick(0.0))
    assert spout.got.empty() and acker.proxy().dropped.get() == 2


def test_acks_for_a_spout_whose_worker_died_are_dropped_not_held(server):
    acker = server(make_job())
    dead = DeadWorkerMailbox()
    acker.tell(RegisterOwner(5, dead))
    for i in range(3):
        acker.tell(AckUpdate({new_root(5): i + 1}))
    acker.ask(Tick(0.0))
    assert dead.tells == 1  # the first found it gone; the others were dropped without trying
    assert acker.proxy().dropped.get() == 3


def test_a_spout_a_lease_answer_cannot_reach_is_forgotten_as_a_stopped_one_is(server):
    job = make_job()
    job.topology = SimpleNamespace(units=[SimpleNamespace(name="src", is_spout=True)])
    acker = server(job)
    dead, live = DeadWorkerMailbox(), QueueMailbox()
    acker.tell(RegisterOwner(5, dead))
    acker.tell(RegisterOwner(6, live))
    acker.tell(RangeRequest(5, "src", 0, 1 << 20, [], 1 << 16))  # the grant finds it gone
    acker.tell(AckUpdate({new_root(5): 1}))
    acker.tell(FailPending("rolled back"))
    assert live.next() == FailPending("rolled back")
    acker.ask(Tick(0.0))  # a barrier: everything above was handled
    assert dead.tells == 1, "neither the ack nor the FailPending was sent to it after the grant failed"
    assert acker.proxy().owners.get() == {6: live}
    assert acker.proxy().routes.get()[5] is GONE
    assert acker.proxy().dropped.get() == 1


def test_in_the_driver_a_registered_worker_spout_is_acked_directly_by_the_drivers_own_spus(server):
    job = make_job(process=None)
    acker = server(job)
    remote = QueueMailbox()
    acker.tell(RegisterOwner(6, remote))
    acker.ask(Tick(0.0))
    job.acks.update({new_root(6): 1})
    assert isinstance(remote.next(), AckUpdate)
    assert job.acks.relayed == 0
