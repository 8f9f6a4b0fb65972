"""GiverSide, the giver's part of a key hand-off in bolt and chain-join SPUs, driven without actors."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from esault.datapath.giver import GiverSide
from esault.messages.handoff import EpochMarker, PeersLost, PrepareGive, Prepared
from esault.migration.handoff import EarlyMessages, GiverHandoff


class FakeSpu:
    """A `Gives` that records each hand-off it is asked for, and the unit's mailbox."""

    def __init__(self) -> None:
        self.gave: list[tuple[GiverHandoff, dict[int, Any]]] = []
        self.told: list[Any] = []

    def give(self, giving: GiverHandoff, receivers: dict[int, Any]) -> None:
        self.gave.append((giving, receivers))

    def tell(self, message: Any) -> None:  # the unit's mailbox
        self.told.append(message)


def prepare(reconfig_id: int = 7, upstream: frozenset[int] = frozenset({1, 2}), retire: bool = False) -> PrepareGive:
    return PrepareGive(reconfig_id, ((0, 99, 5), (200, 299, 6)), {5: "mailbox-5", 6: "mailbox-6"}, upstream, retire)


def side(spu: FakeSpu) -> GiverSide:
    return GiverSide(spu, EarlyMessages(), spu, spu_id=3)


def test_the_giver_answers_prepared_and_hands_off_once_every_upstream_spu_sent_its_marker():
    spu = FakeSpu()
    giver = side(spu)
    giver.on_prepare_give(prepare())
    assert spu.told == [Prepared(7, 3, "giver")] and spu.gave == []
    giver.on_marker(EpochMarker(7, 1))
    assert spu.gave == []
    giver.on_marker(EpochMarker(7, 2))
    [(giving, receivers)] = spu.gave
    assert giving.reconfig_id == 7 and giving.by_receiver() == {5: [(0, 99)], 6: [(200, 299)]}
    assert receivers == {5: "mailbox-5", 6: "mailbox-6"}
    assert giver.giving is None and giver.receivers == {}


def test_markers_that_overtook_the_prepare_count_and_a_giver_with_every_marker_in_hands_off_at_once():
    spu = FakeSpu()
    giver = side(spu)
    giver.on_marker(EpochMarker(7, 1))
    giver.on_marker(EpochMarker(7, 2))
    giver.on_marker(EpochMarker(8, 1))  # another reconfiguration's: kept for it
    assert spu.gave == []
    giver.on_prepare_give(prepare())
    assert [g.reconfig_id for g, _ in spu.gave] == [7]
    giver.on_prepare_give(prepare(8, frozenset({1})))
    assert [g.reconfig_id for g, _ in spu.gave] == [7, 8]


def test_a_cancelled_hand_off_forgets_its_giver_and_a_late_marker_gives_nothing():
    spu = FakeSpu()
    giver = side(spu)
    giver.on_prepare_give(prepare())
    giver.cancel(6)  # another reconfiguration: nothing changes
    assert giver.giving is not None
    giver.cancel(7)
    assert giver.giving is None and giver.receivers == {}
    giver.on_marker(EpochMarker(7, 1))
    giver.on_marker(EpochMarker(7, 2))
    assert spu.gave == []


@given(st.permutations(["prepare", 1, 2, 3]))
def test_whatever_the_order_of_the_prepare_and_the_markers_the_ranges_are_handed_off_exactly_once(order):
    spu = FakeSpu()
    giver = side(spu)
    for step in order:
        assert spu.gave == []
        if step == "prepare":
            giver.on_prepare_give(prepare(upstream=frozenset({1, 2, 3}), retire=True))
        else:
            giver.on_marker(EpochMarker(7, step))
    [(giving, _)] = spu.gave
    assert giving.retire and spu.told == [Prepared(7, 3, "giver")]


def test_an_upstream_spu_lost_with_its_worker_counts_as_its_marker_only_for_its_own_reconfiguration():
    spu = FakeSpu()
    giver = side(spu)
    giver.on_prepare_give(prepare())
    giver.peers_lost(PeersLost(6, frozenset({1, 2})))  # another reconfiguration's notice: nothing
    giver.on_marker(EpochMarker(7, 1))
    assert spu.gave == []
    giver.peers_lost(PeersLost(7, frozenset({2, 9})))
    assert [g.reconfig_id for g, _ in spu.gave] == [7]
    giver.peers_lost(PeersLost(7, frozenset({2})))  # after the hand-off: nothing more
    assert len(spu.gave) == 1
