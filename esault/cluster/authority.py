"""Who may send what to whom: the rules the postman applies to every received message.

The sender is the Identity its connection's Curve key proves (never a name in
the frame). The driver may send anything. A worker may send data, acks,
hand-offs and its own reports, never commands: it cannot place or stop SPUs,
shut a worker down, install routes or ask for status. A client (an operator's
key) may only ask the driver for status or for a savepoint. An enrollment key (shared by replica workers)
may only ask for a worker key of its own. A worker whose key is admitted but not yet bound to a name may
only say hello, under a name no other key holds.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

from esault.messages.acking import FailPending, FindOwner, OwnerAt, OwnerGone
from esault.messages.checkpoints import (Abandon, CheckpointAck, CheckpointAcks, CheckpointComplete, CheckpointStart,
                                         TriggerCheckpoint)
from esault.messages.cluster import (
    DriverBeat,
    Enrolled,
    EnrollRequest,
    PeerAddresses,
    PeerGone,
    ReportNow,
    SavepointReply,
    SavepointRequest,
    Shutdown,
    SpuStarted,
    SpuStopped,
    StartSpu,
    StatusReply,
    StatusRequest,
    StopSpu,
    SubmitJob,
    WorkerHeartbeat,
    WorkerHello,
)
from esault.messages.control import Probe, SpusChanged
from esault.messages.data import Drain, WatermarkInputs
from esault.messages.handoff import CancelReconfiguration, InstallRoutes, PeersLost, PrepareGive, PrepareReceive
from esault.messages.shares import ReleaseShare, TakeShare
from esault.transport.trust import Identity, Role

__all__ = ["DRIVER_ONLY", "ack_refusal", "refusal"]

DRIVER_ONLY: frozenset[type] = frozenset({
    SubmitJob, StartSpu, StopSpu, Shutdown, PeerAddresses, DriverBeat, PeerGone,  # a worker's host: placement, lifetime
    ReportNow,  # a worker's counts, asked for
    InstallRoutes, PrepareGive, PrepareReceive, CancelReconfiguration, PeersLost, SpusChanged, Drain,  # reconfiguration
    ReleaseShare, TakeShare,  # a live spout rescale: a worker could make a source skip its input
    OwnerAt, FailPending,  # where a spout SPU is (acks go there), and the job's order to fail what is in flight
    Probe,  # the latency monitor
    WatermarkInputs,  # which upstream SPUs an SPU's watermark waits for: a worker could stall every window
    TriggerCheckpoint, CheckpointStart, CheckpointComplete, Abandon,  # the checkpoint coordinator
    StatusReply, SavepointReply, Enrolled,
})
"""Commands: only the driver's key may send them, to any actor."""

_WORKER_REPORTS: frozenset[type] = frozenset({WorkerHello, WorkerHeartbeat, SpuStarted, SpuStopped})
"""What a worker may tell the driver's cluster actor."""


def refusal(sender: Identity, actor: str, message: Any) -> str | None:
    """None if `sender` may deliver `message` to the local actor named `actor`; else why not."""
    role = sender.role
    if role is Role.DRIVER:
        return None
    kind = type(message)
    if role is Role.CLIENT:
        if actor == "cluster" and kind in (StatusRequest, SavepointRequest):
            return None
        return "a client may only send StatusRequest or SavepointRequest to the driver"
    if role is Role.ENROLL:
        if actor == "cluster" and kind is EnrollRequest:
            return None
        return "an enrollment key may only send EnrollRequest to the driver"
    if sender.name is None:  # an admitted worker key that has not joined yet
        if actor == "cluster" and kind is WorkerHello:
            return None
        return "a worker's first message must be its WorkerHello"
    if kind in DRIVER_ONLY:
        return f"only the driver may send {kind.__name__}"
    if actor == "host":
        return "only the driver may command a worker's host"
    if actor == "cluster":
        if kind not in _WORKER_REPORTS:
            return f"a worker may not send {kind.__name__} to the cluster actor"
        if kind in (WorkerHello, WorkerHeartbeat) and message.process != sender.name:
            return f"{kind.__name__} names process {message.process!r}, but the key is {sender.name!r}'s"
    if kind is FindOwner and message.process != sender.name:  # the answer goes to the process it names
        return f"FindOwner names process {message.process!r}, but the key is {sender.name!r}'s"
    if kind is OwnerGone:  # a worker may say only that a spout SPU of its own stopped
        process = getattr(getattr(message.mailbox, "address", message.mailbox), "process", None)
        if process != sender.name:
            return f"OwnerGone names a mailbox in process {process!r}, but the key is {sender.name!r}'s"
    return None


def ack_refusal(sender: str, message: Any, host_of: Callable[[int, str], str | None]) -> str | None:
    """None if worker `sender` may deliver `message` (checkpoint acks or anything else); else why not. A
    worker acks only the SPUs it runs: an ack for an SPU the driver placed on another worker would let one worker complete a checkpoint
    without the other's state. `host_of(spu, sender)`: the worker the SPU runs on, or None (it stopped or
    moved since its ack left: a late ack of nobody's, let through; the collector ignores what it does not
    expect)."""
    kind = type(message)
    acks: Iterable[CheckpointAck] = (message.acks if kind is CheckpointAcks else (message,) if kind is CheckpointAck
                                     else ())
    for ack in acks:
        host = host_of(ack.spu_id, sender)
        if host is not None and host != sender:
            return f"it acks SPU {ack.spu_id}, which runs on worker {host!r}, not on {sender!r}"
    return None
