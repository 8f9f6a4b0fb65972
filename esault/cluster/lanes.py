"""Which messages travel on the control lane: a connection of their own, never behind queued data.

A reconfiguration's commands and answers carry no position in any data
channel (docs/PROTOCOLS.md, "Commands jump queued data": an SPU's mailbox
already takes them ahead of queued batches). Between processes they shared
each peer's connection with data, so at load a PrepareGive or a StartSpu
waited behind thousands of batches in the sender's queue, zmq's and the
kernel's (docs/CONTROL_PLANE.md, "Where the time goes"). Everything that
marks a position in a channel (batches, epoch and forward markers, barriers,
probes) stays on the data lane, in order with the data.
"""

from __future__ import annotations

from esault.datapath.inbox import JUMPS_QUEUE
from esault.messages.acking import AckFail, AckUpdate
from esault.messages.cluster import PeerAddresses, PeerGone, SpuStarted, StartSpu, SubmitJob
from esault.messages.handoff import HandoffFinished, Prepared

CONTROL_LANE: frozenset[type] = JUMPS_QUEUE | frozenset({
    Prepared, HandoffFinished,  # the participants' answers to the unit (in the driver)
    # placement: a new SPU must not wait for data queued to its worker; what it needs first (the job's
    # units, its peers' addresses) travels on the same lane, so it still comes first
    SubmitJob, PeerAddresses, StartSpu, SpuStarted,
    # a peer's death goes on the lane of its addresses: a worker that comes back under its name is announced
    # by a PeerAddresses after the PeerGone of its old incarnation, and must not be overtaken by it
    PeerGone,
    # acks, SPU -> the spout SPU that owns the tree: XOR deltas commute and mark no position in any channel,
    # and a spout's flow control (max_spout_pending) waits on them: never behind the batches queued to its worker
    AckUpdate, AckFail,
})
"""Why each is safe off the data lane: JUMPS_QUEUE as in inbox.py. Prepared and HandoffFinished go to the
unit actor, which receives no data. StartSpu and SpuStarted concern an SPU that has no data yet; SubmitJob
and PeerAddresses go with them because a StartSpu must not overtake them; PeerGone because a PeerAddresses
that re-admits a restarted worker must not overtake the PeerGone of its old incarnation (on the data lane it
did, and the survivor then dropped the new connection). AckUpdate and AckFail because a tree's value is
the XOR of its acks in any order, and its spout SPU starts it before any ack can arrive. StopSpu
stays on the data lane: at a job's end it must arrive after the last frames for the SPU it stops."""
