"""Every message between esault actors: frozen, slotted, one line each.

Docstrings read "sender -> receiver: what it means". Data moves as DataBatch
(many tuples per message); everything else is control traffic. Commands are
imperative, events past tense. Between actors, tell; only the driver, the
reconfiguration coordinator and tests ask.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class DataBatch:
    """upstream SPU -> SPU: tuples routed to it, as columns in emission order, and the trees they are part of.

    `roots[i]` is a tuple tree (one spout batch) this batch belongs to and
    `edges[i]` this batch's edge id in it (both empty when acking is off):
    delivery is tracked per batch, not per tuple (docs/PROTOCOLS.md).
    """

    sender: int
    source: str
    keys: list[Any]
    values: list[Any]
    roots: list[int]
    edges: list[int]

    def __post_init__(self) -> None:
        if len(self.keys) != len(self.values) or len(self.roots) != len(self.edges):
            raise ValueError(f"DataBatch columns differ in length: {len(self.keys)} keys, {len(self.values)} values, "
                             f"{len(self.roots)} roots, {len(self.edges)} edges")


@dataclass(frozen=True, slots=True)
class Tick:
    """ticker -> actor: time passed; run timers (expiry, backoff, timeouts)."""

    now: float


@dataclass(frozen=True, slots=True)
class Pump:
    """spout SPU -> itself: call next_tuple() again (lets acks interleave)."""


# --- acking --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AckInit:
    """spout SPU -> ack server: new trees, (root, xor of root edges) each, owned by `owner`."""

    owner: int
    roots: list[tuple[int, int]]


@dataclass(frozen=True, slots=True)
class AckUpdate:
    """SPU -> ack server: XOR deltas per root (input edge ^ child edges) of processed tuples."""

    deltas: dict[int, int]


@dataclass(frozen=True, slots=True)
class AckFail:
    """SPU -> ack server: processing a tuple of `root` failed for `reason`."""

    root: int
    reason: str


@dataclass(frozen=True, slots=True)
class TreesDone:
    """ack server -> spout SPU: outcomes of its trees: (root, ok, reason, latency)."""

    outcomes: list[tuple[int, bool, str | None, float]]


# --- routing and reconfiguration ----------------------------------------


@dataclass(frozen=True, slots=True)
class RouteSpec:
    """How a sender reaches one downstream unit: grouping, interval table, SPU mailboxes."""

    unit: str
    grouping: str
    table: list[Any] | None
    spus: dict[int, Any]
    version: int


@dataclass(frozen=True, slots=True)
class InstallRoutes:
    """unit -> upstream SPU: switch to this route, flush, then send EpochMarker to `notify`."""

    reconfig_id: int
    route: RouteSpec
    notify: dict[int, Any]


@dataclass(frozen=True, slots=True)
class EpochMarker:
    """upstream SPU -> giver SPU: nothing routed by the old table follows this marker."""

    reconfig_id: int
    sender: int


@dataclass(frozen=True, slots=True)
class PrepareGive:
    """unit -> giver SPU: after markers from all `upstream` SPUs, hand the keys of each (lo, hi, receiver)
    range to that receiver (`receivers` holds their mailboxes). `retire`: the giver stops after it."""

    reconfig_id: int
    ranges: tuple[tuple[int, int, int], ...]
    receivers: dict[int, Any]
    upstream: frozenset[int]
    retire: bool


@dataclass(frozen=True, slots=True)
class PrepareReceive:
    """unit -> receiver SPU: hold tuples of each (lo, hi, giver) range until that giver's state arrives."""

    reconfig_id: int
    ranges: tuple[tuple[int, int, int], ...]


@dataclass(frozen=True, slots=True)
class Prepared:
    """SPU -> unit: ready for reconfiguration `reconfig_id` in `role` ("giver" or "receiver")."""

    reconfig_id: int
    spu_id: int
    role: str


@dataclass(frozen=True, slots=True)
class StateHandoff:
    """giver SPU -> receiver SPU: encoded PE states of the moved keys; the giver is done with them.

    Large hand-offs travel in chunks (each well under the frame cap); `last` marks the final one.
    """

    reconfig_id: int
    giver_id: int
    states: list[tuple[Any, bytes]]
    last: bool = True


@dataclass(frozen=True, slots=True)
class HandoffFinished:
    """SPU -> unit: its side of `reconfig_id` is complete (`role` giver or receiver)."""

    reconfig_id: int
    spu_id: int
    role: str
    moved_keys: int
    paused_seconds: float


@dataclass(frozen=True, slots=True)
class ScaleCommand:
    """coordinator -> unit: one reconfiguration; the future gets a ScaleResult.

    `action` "split"/"merge" of SPU `spu_id`, "replace" of a lost SPU, "assign_workload" with
    `assignment` ({spu: [(lo, hi), ...]}; an id the unit does not have names a new SPU), or
    "assign_resource": SPU `spu_id` moves, with its state, to worker process `worker`, or "rescale" of a
    unit that is not key grouped to `spus` SPUs (a key-grouped one rescales with assign_workload)."""

    action: str
    spu_id: int
    upstream: dict[int, tuple[Any, str]]  # spu id -> (mailbox, grouping of its edge to this unit)
    downstream_routes: tuple[RouteSpec, ...]
    reply: Future
    at: int | None = None
    into: int | None = None
    reason: str = "manual"
    assignment: dict[int, list[tuple[int, int]]] | None = None
    worker: str | None = None
    spus: int | None = None  # "rescale" of a unit that is not key grouped: how many SPUs
    prepared: Future | None = None  # set: part of an atomic group; hold after prepare, tell it a HeldOperation


@dataclass(frozen=True, slots=True)
class ScaleResult:
    """unit -> coordinator (via future): what a reconfiguration did.

    A split or merge moves one SPU's hashes within [lo, hi] from `giver` to `receiver`; an
    assign_workload has giver = receiver = -1 and lo = hi = None. `moves` lists every moved range
    as (lo, hi, giver, receiver); `started` and `retired` the SPUs it started and stopped."""

    action: str
    unit: str
    giver: int
    receiver: int
    lo: int | None
    hi: int | None
    moved_keys: int
    paused_seconds: float
    seconds: float
    reason: str = "manual"
    moves: tuple[tuple[int, int, int, int], ...] = ()
    started: tuple[int, ...] = ()
    retired: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class GetRoutes:
    """coordinator -> unit (ask): the RouteSpec a sender using `grouping` needs to reach this unit."""

    grouping: str


@dataclass(frozen=True, slots=True)
class GetSpus:
    """coordinator -> unit (ask): {spu_id: mailbox} of its live SPUs."""


@dataclass(frozen=True, slots=True)
class GetLayout:
    """driver -> unit (ask): intervals and SPU ids, for status()."""


@dataclass(frozen=True, slots=True)
class RegisterOwner:
    """spout SPU -> ack server: send the outcomes of trees owned by `owner` to `mailbox`."""

    owner: int
    mailbox: Any


@dataclass(frozen=True, slots=True)
class GetPending:
    """driver -> ack server (ask): how many started trees are incomplete."""


@dataclass(frozen=True, slots=True)
class Drain:
    """driver -> SPU (ask): a barrier; replies once earlier messages are processed and flushed."""


@dataclass(frozen=True, slots=True)
class SpuConfig:
    """unit -> new SPU actor: everything it needs to start."""

    topology: str
    unit: str
    spu_id: int
    intervals: tuple[tuple[int, int], ...] | None  # a key-grouped bolt SPU's hash ranges
    downstream: tuple[RouteSpec, ...]
    receive: PrepareReceive | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    instance: int = 0  # which of the unit's `instances` parallel instances this is (a spout's partition)
    instances: int = 1
    restore_epoch: int | None = None  # restore state (and a spout's position) from this completed checkpoint
    position: Any = None  # a spout's position at restore_epoch


# --- elasticity -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Probe:
    """prober -> SPU: queue behind the data, then report latency and load (PAPER_NOTES §5)."""

    probe_id: int
    sent_at: float
    reply_to: Any
    want_hashes: bool = True


@dataclass(frozen=True, slots=True)
class ProbeReturned:
    """SPU -> prober: `processed` tuples since its previous probe; recent key hashes for split points."""

    spu_id: int
    probe_id: int
    sent_at: float
    processed: int
    hashes: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class SpusChanged:
    """Job -> latency prober: the unit's SPUs and intervals after a reconfiguration."""

    spus: dict[int, Any]
    layout: dict[int, tuple[tuple[int, int], ...] | None]
    result: Any = None


# --- worker processes -------------------------------------------------------


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
    low-rate metrics as (family, sample, labels, value) when they changed (esault.metrics.forwarded)."""

    process: str
    stats: list[tuple[str, str, int, dict[str, int]]]
    samples: list[tuple[str, str, dict[str, str], float]] = field(default_factory=list)


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
class StatusReply:
    """driver cluster -> `esault status`: jobs by name, each as Job.status() returns it."""

    request_id: int
    jobs: dict[str, Any]
    workers: dict[str, str]


@dataclass(frozen=True, slots=True)
class DeadLettered:
    """SPU -> ack server (driver): a tuple was given up after `attempts` tries (a spout's msg_id, or a bolt's input)."""

    unit: str
    spu_id: int
    key: Any
    value: Any
    error: str
    attempts: int
    msg_id: Any = None


@dataclass(frozen=True, slots=True)
class SpoutProgress:
    """spout SPU -> ack server (driver): it is `finished` (no more next_tuple), `drained` (nothing in flight).

    Sent when either changes; `untracked` counts tuples it emitted outside any tree so far; `error` says why
    it finished early (open() raised, next_tuple() raised max_spout_errors times in a row), "" if it did not.
    """

    spu_id: int
    finished: bool
    drained: bool
    untracked: int
    error: str = ""


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


@dataclass(frozen=True, slots=True)
class DriverBeat:
    """driver cluster -> worker host: the driver is alive. A worker that hears none for its
    driver timeout exits, so a killed driver leaves no orphan workers behind. It carries the last
    reported (topology, unit, spu, busy_us, processed, backlog) of every TAG-grouped unit's SPUs, so
    senders in any process can weigh SPUs by speed (esault.runtime.load_feed)."""

    loads: list[tuple[str, str, int, int, int, int]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class PeerGone:
    """driver cluster -> worker host: `process` was declared dead. The host disconnects it (queued
    frames dropped, senders blocked on it released) and stops admitting its key."""

    process: str


@dataclass(frozen=True, slots=True)
class FailPending:
    """job -> ack server: fail every tree in flight now (a worker died and its SPUs were replaced), so
    spouts replay at once instead of after message_timeout."""

    reason: str


# --- checkpoints (docs/CHECKPOINTS.md) ------------------------------------------


@dataclass(frozen=True, slots=True)
class TriggerCheckpoint:
    """checkpoint coordinator -> spout SPU: record your position and send Barrier(epoch) on every output
    channel at your next round boundary; `final` stops the spout after it (stop-with-checkpoint)."""

    epoch: int
    final: bool = False


@dataclass(frozen=True, slots=True)
class CheckpointStart:
    """checkpoint coordinator -> bolt SPU: checkpoint `epoch` is aligned over barriers from exactly these
    upstream SPUs (the layout is frozen while a checkpoint runs: reconfigurations wait for it). `final`: the
    spouts end at its barriers (a stop): nothing should be emitted after them (a join chain stays quiet)."""

    epoch: int
    upstream: frozenset[int]
    final: bool = False


@dataclass(frozen=True, slots=True)
class Barrier:
    """upstream SPU -> SPU, in band after its data: everything `sender` sent before belongs to epochs <= `epoch`."""

    epoch: int
    sender: int


@dataclass(frozen=True, slots=True)
class CheckpointAck:
    """SPU -> checkpoint coordinator: its snapshot of `epoch` is durable (`position`: a spout's, else None);
    or, with `error`, it is not. `fatal`: no retry can succeed (a state that cannot be encoded): the job fails,
    whatever the epoch (-1: a state lost outside a checkpoint, when its key moved)."""

    epoch: int
    spu_id: int
    unit: str
    instance: int
    position: Any = None
    error: str = ""
    fatal: bool = False


@dataclass(frozen=True, slots=True)
class CheckpointComplete:
    """checkpoint coordinator -> every SPU: `epoch` is recorded durably; sinks publish what they staged for it."""

    epoch: int


@dataclass(frozen=True, slots=True)
class Abandon:
    """unit -> SPU: a rollback discards you: drop what you hold, publish nothing, skip close(); a stop follows."""


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


# --- key order downstream of a reconfiguration (docs/PROTOCOLS.md) -------------------


@dataclass(frozen=True, slots=True)
class ForwardMarker:
    """giver SPU -> every downstream SPU, in band after its last output of the keys it hands off.

    The downstream SPU answers each receiver with MarkerSeen: everything the giver emitted for the
    moved keys is then ahead of anything the receivers will emit for them."""

    reconfig_id: int
    giver: int
    receivers: dict[int, Any]


@dataclass(frozen=True, slots=True)
class MarkerSeen:
    """downstream SPU -> receiver SPU: the giver's ForwardMarker reached `sender`."""

    reconfig_id: int
    giver: int
    sender: int


# --- atomic groups of operations (docs/CONTROL_PLANE.md) ------------------------------


@dataclass(frozen=True, slots=True)
class CancelReconfiguration:
    """unit -> SPU: a reconfiguration held after prepare was called off (another operation of its
    atomic group failed) before any switch: forget its ranges; nothing moved."""

    reconfig_id: int


# --- S2J join chains whose workers are SPUs (esault.joins.spu) ------------------------------


@dataclass(frozen=True, slots=True)
class ChainLink:
    """chain SPU -> neighbouring chain SPU: link messages of the join chain's protocol, in order
    (esault.joins.protocol.to_wire lists); on the data lane, FIFO per pair of SPUs."""

    sender: int
    items: list[Any]


@dataclass(frozen=True, slots=True)
class ChainMembers:
    """unit -> its chain SPUs: every SPU of the chain (their order is their ids' order) and its mailbox."""

    spus: dict[int, Any]
