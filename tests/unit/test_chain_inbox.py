"""A chain SPU's mailbox: its neighbours' link messages go ahead of queued entries and barriers, in arrival
order, beside reconfiguration commands; entries, barriers and probes keep theirs."""

from __future__ import annotations

from hypothesis import given, strategies as st
from pykka._envelope import Envelope

from esault.datapath.chain_spu import ChainInbox
from esault.messages.chains import ChainLink
from esault.messages.checkpoints import Barrier
from esault.messages.control import Probe
from esault.messages.data import DataBatch
from esault.messages.handoff import PrepareReceive

IN_BAND = [DataBatch(1, "s", ["k"], [1], [], []), Barrier(3, 1), Probe(1, 0.0, None, False)]
FIRST = [ChainLink(0, [["A", "R", 1]]), ChainLink(2, [["Z", 3, 4]]), PrepareReceive(1, ())]


@given(st.lists(st.tuples(st.booleans(), st.integers(0, 2)), max_size=40))
def test_link_messages_come_out_before_queued_entries_and_each_lane_keeps_its_order(puts):
    inbox = ChainInbox()
    sent = []
    for first, i in puts:
        envelope = Envelope((FIRST if first else IN_BAND)[i])
        sent.append((first, envelope))
        inbox.put(envelope)
    got = [inbox.get_nowait() for _ in puts]
    assert got == [e for f, e in sent if f] + [e for f, e in sent if not f]
