"""The SPU mailbox: reconfiguration commands ahead of queued data, each lane in arrival order; a chain SPU's
mailbox lets its neighbours' link messages go ahead too."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given, strategies as st
from pykka._envelope import Envelope

from esault.messages.checkpoints import Barrier
from esault.messages.control import Probe
from esault.messages.data import DataBatch
from esault.messages.handoff import (
    EpochMarker,
    ForwardMarker,
    MarkerSeen,
    PrepareGive,
    PrepareReceive,
    StateHandoff,
)
from esault.datapath.chain_spu import ChainInbox
from esault.datapath.inbox import JUMPS_QUEUE, ControlFirstInbox
from esault.messages.chains import ChainLink

DATA = [DataBatch(1, "s", ["k"], [1], [], []), EpochMarker(1, 2), ForwardMarker(1, 2, {}),
        Barrier(3, 1), Probe(1, 0.0, None, False)]
CONTROL = [PrepareGive(1, (), {}, frozenset(), False), PrepareReceive(1, ()), MarkerSeen(1, 2, 3),
           StateHandoff(1, 2, [], True)]


CHAIN_FIRST = [ChainLink(0, [["A", "R", 1]]), ChainLink(2, [["Z", 3, 4]]), PrepareReceive(1, ())]
"""A chain SPU's mailbox also lets its neighbours' link messages pass queued entries, barriers and probes."""


@pytest.mark.parametrize("inbox_class, first, in_band", [(ControlFirstInbox, CONTROL, DATA),
                                                        (ChainInbox, CHAIN_FIRST, DATA)],
                         ids=["spu", "chain-spu"])
@given(puts=st.lists(st.tuples(st.booleans(), st.integers(0, 4)), max_size=40))
def test_commands_come_out_first_and_each_lane_keeps_its_order(inbox_class, first, in_band, puts):
    inbox = inbox_class()
    sent = []
    for urgent, i in puts:
        lane = first if urgent else in_band
        envelope = Envelope(lane[i % len(lane)])
        sent.append((urgent, envelope))
        inbox.put(envelope)
    assert inbox.qsize() == len(puts)
    got = [inbox.get_nowait() for _ in puts]
    assert got == [e for u, e in sent if u] + [e for u, e in sent if not u]


def test_in_band_messages_never_jump():
    assert not JUMPS_QUEUE & {type(x) for x in DATA} and {type(x) for x in CONTROL} <= JUMPS_QUEUE
    assert Probe not in JUMPS_QUEUE  # a probe measures the queue, so it waits in it


def test_a_blocked_reader_wakes_for_either_lane():
    inbox = ControlFirstInbox()
    got = []
    reader = threading.Thread(target=lambda: got.extend(inbox.get(timeout=10) for _ in range(2)))
    reader.start()
    inbox.put(Envelope(DATA[0]))
    inbox.put(Envelope(CONTROL[0]))
    reader.join(10)
    assert [e.message for e in got] in ([DATA[0], CONTROL[0]], [CONTROL[0], DATA[0]])


class Told:
    def __init__(self) -> None:
        self.told: list = []

    def tell(self, message) -> None:
        self.told.append(message)


def test_an_answering_mailbox_answers_a_forward_marker_once_as_it_arrives():
    inbox = ControlFirstInbox()
    inbox.answer_markers_as(9)
    receivers = {4: Told(), 5: Told()}
    inbox.put(Envelope(DataBatch(1, "s", ["k"], [1], [], [])))
    marker = ForwardMarker(7, 2, receivers)
    inbox.put(Envelope(marker))
    assert [r.told for r in receivers.values()] == [[MarkerSeen(7, 2, 9)]] * 2
    assert [type(inbox.get_nowait().message) for _ in range(2)] == [DataBatch, ForwardMarker], "still in band"
    assert inbox.already_answered(marker) and not inbox.already_answered(marker)


def test_a_mailbox_without_an_spu_id_leaves_every_marker_to_its_spu():
    inbox = ControlFirstInbox()
    receiver = Told()
    inbox.put(Envelope(ForwardMarker(7, 2, {4: receiver})))
    assert receiver.told == [] and not inbox.already_answered(ForwardMarker(7, 2, {4: receiver}))


@given(steps=st.lists(st.sampled_from(["data", "barrier", "marker", "get", "over"]), max_size=40))
def test_no_marker_is_answered_on_arrival_behind_a_queued_barrier_or_during_an_alignment(steps):
    """The one thing that reorders a channel's data is a checkpoint's alignment, which starts at a barrier the
    SPU takes and ends when it says so (`alignment_over`): a marker that may be behind held data is left to the
    SPU. Any other marker is answered at once, exactly once."""
    inbox = ControlFirstInbox()
    inbox.answer_markers_as(1)
    queued_barriers, aligning = 0, False
    for n, step in enumerate(steps):
        if step == "get":
            if inbox.qsize():
                if type(inbox.get_nowait().message) is Barrier:
                    queued_barriers, aligning = queued_barriers - 1, True
        elif step == "over":
            inbox.alignment_over()
            aligning = False
        elif step == "barrier":
            inbox.put(Envelope(Barrier(3, 1)))
            queued_barriers += 1
        elif step == "data":
            inbox.put(Envelope(DataBatch(1, "s", ["k"], [1], [], [])))
        else:
            receiver = Told()
            marker = ForwardMarker(n, 2, {4: receiver})
            inbox.put(Envelope(marker))
            free = queued_barriers == 0 and not aligning
            assert receiver.told == ([MarkerSeen(n, 2, 1)] if free else [])
            assert inbox.already_answered(marker) is free
