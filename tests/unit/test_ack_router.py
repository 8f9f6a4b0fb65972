"""AckRouter and root ids: an ack finds the spout SPU that owns its tree, asking the ack server only once."""

from __future__ import annotations

from types import SimpleNamespace

import pykka
from hypothesis import given, strategies as st

from esault.clock import ManualClock
from esault.datapath.ack_router import ASK_AGAIN, GONE, AckRouter
from esault.messages.acking import AckFail, AckUpdate, FindOwner
from esault.reliability.roots import OWNER_BITS, OWNER_MASK, by_owner, new_root, owner_key, owner_of


class Box:
    def __init__(self, error: Exception | None = None) -> None:
        self.got: list = []
        self.error = error

    def tell(self, message) -> None:
        if self.error is not None:
            raise self.error
        self.got.append(message)


def router(process: str | None = "w1", clock: ManualClock | None = None) -> tuple[AckRouter, Box]:
    relay = Box()
    return AckRouter(SimpleNamespace(acker=relay, process=process, clock=clock or ManualClock())), relay


@given(st.integers(min_value=0, max_value=OWNER_MASK))
def test_a_root_carries_its_owner_is_never_zero_and_fits_64_bits(owner):
    root = new_root(owner)
    assert owner_of(root) == owner
    assert 2**63 <= root < 2**64


@given(st.integers(min_value=0, max_value=2**40))
def test_an_owner_key_is_the_spu_id_masked(spu_id):
    assert owner_key(spu_id) == spu_id % (1 << OWNER_BITS)
    assert owner_of(new_root(owner_key(spu_id))) == owner_key(spu_id)


def test_roots_of_one_owner_differ():
    roots = {new_root(3) for _ in range(10_000)}
    assert len(roots) == 10_000


@given(st.dictionaries(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1), max_size=40))
def test_by_owner_partitions_the_roots_by_the_owner_they_carry(deltas):
    parts = by_owner(deltas)
    assert all(owner_of(root) == owner for owner, part in parts.items() for root in part)
    assert {root: xor for part in parts.values() for root, xor in part.items()} == deltas
    assert sum(map(len, parts.values())) == len(deltas)


def test_a_registered_owner_is_told_directly_and_nothing_goes_to_the_ack_server():
    acks, relay = router()
    spout = Box()
    acks.register(5, spout)
    root = new_root(5)
    acks.update({root: 9})
    acks.fail(root, "no")
    assert spout.got == [AckUpdate({root: 9}), AckFail(root, "no")]
    assert relay.got == [] and acks.relayed == 0


@given(st.lists(st.tuples(st.integers(0, 4), st.integers(1, 2**64 - 1)), min_size=1, max_size=30))
def test_deltas_are_split_per_owner_and_none_is_lost_or_changed(pairs):
    acks, relay = router(process=None)
    boxes = {owner: Box() for owner in range(5)}
    for owner, box in boxes.items():
        acks.register(owner, box)
    deltas = {new_root(owner): xor for owner, xor in pairs}
    acks.update(deltas)
    seen: dict[int, int] = {}
    for owner, box in boxes.items():
        assert len(box.got) <= 1  # one AckUpdate per owner
        for message in box.got:
            assert all(owner_of(root) == owner for root in message.deltas)
            seen.update(message.deltas)
    assert seen == deltas and relay.got == []


def test_an_unknown_owner_goes_through_the_ack_server_which_is_asked_where_it_is_once():
    acks, relay = router(process="w2")
    a, b = new_root(8), new_root(8)
    acks.update({a: 1})
    acks.update({b: 2})
    assert relay.got == [AckUpdate({a: 1}), FindOwner(8, "w2"), AckUpdate({b: 2})]
    assert acks.relayed == 2
    spout = Box()
    acks.learn(8, spout)  # the OwnerAt arrived
    acks.update({a: 3})
    assert spout.got == [AckUpdate({a: 3})] and len(relay.got) == 3


def test_an_owner_whose_answer_was_lost_is_asked_for_again_after_ask_again_seconds_not_before():
    clock = ManualClock()
    acks, relay = router(process="w2", clock=clock)
    root = new_root(5)
    acks.update({root: 1})
    clock.advance(ASK_AGAIN / 2)
    acks.update({root: 2})
    assert relay.got.count(FindOwner(5, "w2")) == 1
    clock.advance(ASK_AGAIN / 2)  # no OwnerAt came: the next relayed ack asks again
    acks.fail(root, "x")
    assert relay.got.count(FindOwner(5, "w2")) == 2
    assert relay.got[-2:] == [AckFail(root, "x"), FindOwner(5, "w2")]
    acks.learn(5, Box())
    clock.advance(10 * ASK_AGAIN)  # known now: told directly, never asked for again
    acks.update({root: 3})
    assert relay.got.count(FindOwner(5, "w2")) == 2 and acks.relayed == 3


def test_in_the_driver_an_unknown_owner_is_relayed_without_asking():
    acks, relay = router(process=None)
    root = new_root(2)
    acks.update({root: 1})
    assert relay.got == [AckUpdate({root: 1})]


def test_an_owner_that_stopped_or_whose_worker_died_is_gone_and_its_acks_are_dropped_here():
    for error in (pykka.ActorDeadError("stopped"), LookupError("no connection to w3")):
        acks, relay = router()
        dead = Box(error)
        acks.register(4, dead)
        acks.update({new_root(4): 1})
        assert acks.owners[4] is GONE
        acks.update({new_root(4): 2})
        acks.learn(4, Box())  # a late OwnerAt does not bring it back
        acks.update({new_root(4): 3})
        assert relay.got == [] and acks.owners[4] is GONE


def test_a_local_registration_is_not_replaced_by_a_learned_address_and_forget_leaves_it_gone():
    acks, _ = router()
    local, remote = Box(), Box()
    acks.register(6, local)
    acks.learn(6, remote)
    assert acks.owners[6] is local
    acks.forget(6, remote)  # not the registered one: nothing changes
    assert acks.owners[6] is local
    acks.forget(6, local)
    assert acks.owners[6] is GONE
