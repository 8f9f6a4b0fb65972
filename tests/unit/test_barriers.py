"""BarrierAligner, the checkpoint participation part of bolt and chain-join SPUs, driven without actors."""

from __future__ import annotations

import logging
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from esault.datapath.barriers import BarrierAligner
from esault.messages.checkpoints import Barrier, CheckpointStart
from esault.messages.data import DataBatch


class FakeSpu:
    """An EpochSeal that records what the aligner asked; `ready` plays a chain whose links are not yet quiet."""

    def __init__(self, ready: bool = True) -> None:
        self.ready = ready
        self.asked: list[int] = []
        self.sealed: list[tuple[int, bool]] = []
        self.ended: list[bool] = []
        self.ran: list[Any] = []

    def ready_to_seal(self, epoch: int) -> bool:
        self.asked.append(epoch)
        return self.ready

    def seal_epoch(self, epoch: int, final: bool, input_ended: bool = False) -> None:
        self.sealed.append((epoch, final))
        self.ended.append(input_ended)


def aligner(spu: FakeSpu) -> BarrierAligner:
    return BarrierAligner(spu, spu.ran.append, "topology 't': bolt 'b' SPU 9")


def batch(sender: int, n: int) -> DataBatch:
    return DataBatch(sender, "up", [n], [n], [], [])


def test_an_epoch_is_sealed_once_every_expected_barrier_is_in_and_then_the_held_messages_run_in_arrival_order():
    spu = FakeSpu()
    part = aligner(spu)
    part.on_checkpoint_start(CheckpointStart(1, frozenset({1, 2})))
    part.on_barrier(Barrier(1, 1))
    assert part.align.holds(1) and not part.align.holds(2)
    later = [batch(1, 10), Barrier(2, 1), batch(1, 11)]
    for message in later:  # what the hot path holds: sender 1 is past its barrier
        part.align.hold(message)
    assert spu.sealed == []
    part.on_barrier(Barrier(1, 2))
    assert spu.sealed == [(1, False)]
    assert spu.ran == later
    assert part.align is None


def test_an_spu_not_ready_to_seal_keeps_holding_until_a_later_check_finds_it_ready():
    spu = FakeSpu(ready=False)
    part = aligner(spu)
    part.on_checkpoint_start(CheckpointStart(4, frozenset({7})))
    part.on_barrier(Barrier(4, 7))
    part.align.hold(batch(7, 1))
    assert spu.asked == [4] and spu.sealed == []
    part.check()  # a link message came, the links are still busy
    assert spu.sealed == [] and spu.ran == []
    spu.ready = True
    part.check()
    assert spu.sealed == [(4, False)] and [m.keys for m in spu.ran] == [[1]]
    part.check()  # nothing aligning: nothing more
    assert spu.sealed == [(4, False)]


def test_a_checkpoint_start_of_a_later_epoch_waits_until_the_current_epoch_is_sealed():
    spu = FakeSpu()
    part = aligner(spu)
    part.on_barrier(Barrier(1, 1))  # the barrier overtook the coordinator's word
    part.on_checkpoint_start(CheckpointStart(2, frozenset({1})))
    assert spu.sealed == []
    part.on_checkpoint_start(CheckpointStart(1, frozenset({1})))
    assert spu.sealed == [(1, False)]
    part.on_barrier(Barrier(2, 1))
    assert spu.sealed == [(1, False), (2, False)]


def test_the_final_checkpoints_epoch_is_sealed_as_final():
    spu = FakeSpu()
    part = aligner(spu)
    part.on_checkpoint_start(CheckpointStart(3, frozenset({1}), final=True))
    part.on_barrier(Barrier(3, 1))
    assert spu.sealed == [(3, True)]


def test_a_stale_barrier_from_a_channel_not_held_is_dropped_with_a_warning(caplog):
    spu = FakeSpu()
    part = aligner(spu)
    part.on_checkpoint_start(CheckpointStart(5, frozenset({1, 2})))
    with caplog.at_level(logging.WARNING, logger="esault.spu"):
        part.on_barrier(Barrier(4, 2))
    assert "SPU 9 dropped a stale barrier 4 from SPU 2 (aligning 5)" in caplog.text
    assert part.align.missing == frozenset({1, 2})


@given(st.permutations(["start", 1, 2, 3]), st.booleans())
def test_whatever_the_order_of_the_start_and_the_barriers_the_epoch_is_sealed_exactly_once_after_the_last(order, late):
    spu = FakeSpu(ready=not late)
    part = aligner(spu)
    for step in order:
        assert spu.sealed == []
        if step == "start":
            part.on_checkpoint_start(CheckpointStart(1, frozenset({1, 2, 3})))
        else:
            part.on_barrier(Barrier(1, step))
    if late:
        assert spu.sealed == []
        spu.ready = True
        part.check()
    assert spu.sealed == [(1, False)]


def test_the_final_epoch_ends_the_input_only_if_every_expected_barrier_said_its_input_ended():
    from esault.messages.checkpoints import Barrier, CheckpointStart

    for said, ended in [((True, True), True), ((True, False), False), ((False, False), False)]:
        spu = FakeSpu()
        a = aligner(spu)
        a.on_checkpoint_start(CheckpointStart(4, frozenset({1, 2}), final=True))
        a.on_barrier(Barrier(4, 1, said[0]))
        assert spu.sealed == []
        a.on_barrier(Barrier(4, 2, said[1]))
        assert spu.sealed == [(4, True)] and spu.ended == [ended], (said, spu.ended)


def test_a_barrier_that_says_the_input_ended_does_not_end_it_at_an_epoch_that_is_not_final():
    from esault.messages.checkpoints import Barrier, CheckpointStart

    spu = FakeSpu()
    a = aligner(spu)
    a.on_checkpoint_start(CheckpointStart(2, frozenset({1})))
    a.on_barrier(Barrier(2, 1, True))
    assert spu.sealed == [(2, False)] and spu.ended == [False]
