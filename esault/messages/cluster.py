"""Worker processes and the driver cluster: joining, starting SPUs, heartbeats; the CLI's status and savepoint.

Frozen, slotted dataclasses; docstrings read "sender -> receiver: what it means".
This package imports nothing else of esault's (tests/unit/test_import_graph.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from esault.messages.control import SpuConfig


@dataclass(frozen=True, slots=True)
class WorkerHello:
    """worker -> driver cluster: a worker process joined; its endpoint listens at `address`."""

    process: str
    address: str
    pid: int


@dataclass(frozen=True, slots=True)
class PeerAddresses:
    """driver cluster -> worker host: how to reach every process of the cluster, and its Curve
    public key (the worker admits exactly these keys besides the driver's)."""

    peers: dict[str, tuple[str, str]]


@dataclass(frozen=True, slots=True)
class StartSpu:
    """driver launcher -> worker host: start SPU `spu.spu_id` of unit `unit` of the submitted job."""

    topology: str
    unit: str
    spu: SpuConfig


@dataclass(frozen=True, slots=True)
class StopSpu:
    """driver launcher -> worker host: close and stop SPU `spu_id`, then answer SpuStopped."""

    spu_id: int
    request_id: int


@dataclass(frozen=True, slots=True)
class SpuStopped:
    """worker host -> driver cluster: SPU `spu_id` closed its PEs and stopped."""

    spu_id: int
    request_id: int


@dataclass(frozen=True, slots=True)
class WorkerHeartbeat:
    """worker -> driver cluster: alive; counts of its SPUs as (topology, unit, spu, counts); its own
    low-rate metrics as (family, sample, labels, value) when they changed (esault.metrics.forwarded); the
    partition rows of its source SPUs that report them, as (topology, unit, spu, rows), each row (topic,
    partition, offset, end offset, lag, idle) (esault.metrics.partition_status)."""

    process: str
    stats: list[tuple[str, str, int, dict[str, int]]]
    samples: list[tuple[str, str, dict[str, str], float]] = field(default_factory=list)
    partitions: list[tuple[str, str, int, list[tuple[str, int, int, int | None, int | None, bool]]]] = field(
        default_factory=list)


@dataclass(frozen=True, slots=True)
class Shutdown:
    """driver cluster -> worker host: stop every SPU and exit."""


@dataclass(frozen=True, slots=True)
class StatusRequest:
    """`esault status` -> driver cluster: reply with every job's status to `reply_to`."""

    request_id: int
    reply_to: Any
    address: str


@dataclass(frozen=True, slots=True)
class EnrollRequest:
    """A replica worker (`esault worker --enroll-key`) -> driver cluster: give me a name and a key pair of my
    own. Sent under the enrollment key every replica shares; the driver connects back to `address` (its server
    key the enrollment key) and answers `reply_to` with an Enrolled."""

    request_id: int
    reply_to: Any
    address: str


@dataclass(frozen=True, slots=True)
class Enrolled:
    """driver cluster -> an enrolling replica: the worker name and key pair the driver made for it (Z85 text;
    the secret travels only inside the CurveZMQ session), or `error` saying why none."""

    request_id: int
    name: str
    public: str
    secret: str
    error: str


@dataclass(frozen=True, slots=True)
class StatusReply:
    """driver cluster -> `esault status`: jobs by name, each as Job.status() returns it."""

    request_id: int
    jobs: dict[str, Any]
    workers: dict[str, str]


@dataclass(frozen=True, slots=True)
class SpuStarted:
    """worker host -> driver cluster: SPU `spu_id` is running (`error` empty), or why it could not start."""

    spu_id: int
    pid: int
    error: str


@dataclass(frozen=True, slots=True)
class SubmitJob:
    """driver launcher -> worker host: the job's units and config, sent before its first StartSpu.

    The worker resolves each unit's class once, here, and only from this
    message of the authenticated driver; StartSpu names units, never classes.
    """

    topology: str
    units: list[dict[str, Any]]
    config: dict[str, Any]
    store_id: str = ""  # exactly_once: the identity of the driver's checkpoint store, which the worker must see


@dataclass(frozen=True, slots=True)
class DriverBeat:
    """driver cluster -> worker host: the driver is alive. A worker that hears none for its
    driver timeout exits, so a killed driver leaves no orphan workers behind. It carries the last
    reported (topology, unit, spu, busy_us, processed, backlog) of every TAG-grouped unit's SPUs, so
    senders in any process can weigh SPUs by speed (esault.datapath.load_feed)."""

    loads: list[tuple[str, str, int, int, int, int]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ReportNow:
    """driver cluster -> worker control: send your SPUs' counts now. The worker answers at once with two
    WorkerHeartbeats made after this arrived, so a driver waiting for reports made after a moment (a job's
    end: await_fresh_reports) has them in a round trip instead of two heartbeat intervals."""


@dataclass(frozen=True, slots=True)
class PeerGone:
    """driver cluster -> worker host: `process` was declared dead. The host disconnects it (queued
    frames dropped, senders blocked on it released) and stops admitting its key."""

    process: str


@dataclass(frozen=True, slots=True)
class SavepointRequest:
    """`esault savepoint` -> driver cluster: take a savepoint of job `topology` (and end its spouts if `stop`)."""

    request_id: int
    reply_to: Any
    address: str
    topology: str
    stop: bool


@dataclass(frozen=True, slots=True)
class SavepointReply:
    """driver cluster -> `esault savepoint`: the savepoint's epoch (restore with restore_from), or why none."""

    request_id: int
    epoch: int | None
    error: str
