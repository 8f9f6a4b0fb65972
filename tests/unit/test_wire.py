"""The wire format of actor messages: pinned tags and frames, round trips, and hostile input."""

from __future__ import annotations

import dataclasses
import random
import time
import typing
from concurrent.futures import Future
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from esault.dsl.tuple import Tuple
from esault.errors import FrameError, SerializationError
from esault.messages.acking import (
    AckFail,
    AckUpdate,
    DeadLettered,
    FailPending,
    FindOwner,
    OwnerAt,
    OwnerGone,
    RangeGrant,
    RangeRequest,
    RegisterOwner,
    SpoutProgress,
)
from esault.messages.chains import ChainLink, ChainMembers
from esault.messages.checkpoints import (
    Abandon,
    Barrier,
    CheckpointAck,
    CheckpointAcks,
    CheckpointComplete,
    CheckpointStart,
    TriggerCheckpoint,
)
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
from esault.messages.control import (
    GetLayout,
    GetRoutes,
    GetSpus,
    Probe,
    ProbeReturned,
    ScaleCommand,
    ScaleResult,
    SpuConfig,
    SpusChanged,
)
from esault.messages.data import DataBatch, Drain, Pump, Tick, Watermark, WatermarkInputs
from esault.messages.shares import ReleaseShare, ShareReleased, ShareTaken, TakeShare
from esault.messages.handoff import (
    CancelReconfiguration,
    EpochMarker,
    ForwardMarker,
    HandoffFinished,
    InstallRoutes,
    MarkerSeen,
    PeersLost,
    PrepareGive,
    PrepareReceive,
    Prepared,
    RouteSpec,
    StateHandoff,
)
from esault.transport import wire
from esault.transport.address import Address, Mailbox
from esault.transport.state_chunks import pack_states
from esault.transport.wire import (
    WireCodec,
    decode_frame,
    encode_frame,
    frame_error_reason,
    tag_of,
)

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# --- the pinned format -----------------------------------------------------------

PINNED_SCHEMA = {
    1: ("DataBatch", ("sender: int", "source: str", "keys: list[value]", "values: list[value]", "roots: list[int]",
                      "edges: list[int]")),
    2: ("Tick", ("now: float",)),
    3: ("Pump", ()),
    5: ("AckUpdate", ("deltas: dict[int, int]",)),
    6: ("AckFail", ("root: int", "reason: str")),
    8: ("RouteSpec", ("unit: str", "grouping: str", "table: list[value] | None", "spus: dict[int, Mailbox]",
                      "version: int")),
    9: ("InstallRoutes", ("reconfig_id: int", "route: RouteSpec", "notify: dict[int, Mailbox]")),
    10: ("EpochMarker", ("reconfig_id: int", "sender: int")),
    11: ("PrepareGive", ("reconfig_id: int", "ranges: tuple[tuple[int, int, int], ...]",
                         "receivers: dict[int, Mailbox]", "upstream: frozenset[int]", "retire: bool")),
    12: ("PrepareReceive", ("reconfig_id: int", "ranges: tuple[tuple[int, int, int], ...]")),
    13: ("Prepared", ("reconfig_id: int", "spu_id: int", "role: str")),
    14: ("StateHandoff", ("reconfig_id: int", "giver_id: int", "states: bytes", "last: bool")),
    15: ("HandoffFinished", ("reconfig_id: int", "spu_id: int", "role: str", "moved_keys: int",
                             "paused_seconds: float")),
    16: ("ScaleCommand", ("action: str", "spu_id: int", "upstream: dict[int, tuple[Mailbox, str]]",
                          "downstream_routes: tuple[RouteSpec, ...]", "reply: Future (local only)", "at: int | None",
                          "into: int | None", "reason: str", "assignment: dict[int, list[tuple[int, int]]] | None",
                          "worker: str | None", "spus: int | None", "prepared: Future (local only) | None")),
    17: ("ScaleResult", ("action: str", "unit: str", "giver: int", "receiver: int", "lo: int | None",
                         "hi: int | None", "moved_keys: int", "paused_seconds: float", "seconds: float",
                         "reason: str", "moves: tuple[tuple[int, int, int, int], ...]", "started: tuple[int, ...]",
                         "retired: tuple[int, ...]")),
    18: ("GetRoutes", ("grouping: str",)),
    19: ("GetSpus", ()),
    20: ("GetLayout", ()),
    21: ("RegisterOwner", ("owner: int", "mailbox: Mailbox")),
    23: ("Drain", ()),
    24: ("SpuConfig", ("topology: str", "unit: str", "spu_id: int", "intervals: tuple[tuple[int, int], ...] | None",
                       "downstream: tuple[RouteSpec, ...]", "receive: PrepareReceive | None",
                       "extra: dict[str, value+mailboxes]", "instance: int", "instances: int",
                       "restore_epoch: int | None", "position: value", "generation: int",
                       "replaces: tuple[int, ...]")),
    25: ("Probe", ("probe_id: int", "sent_at: float", "reply_to: Mailbox", "want_hashes: bool")),
    26: ("ProbeReturned", ("spu_id: int", "probe_id: int", "sent_at: float", "processed: int",
                           "hashes: tuple[int, ...]")),
    27: ("SpusChanged", ("spus: dict[int, Mailbox]", "layout: dict[int, tuple[tuple[int, int], ...] | None]",
                         "result: ScaleResult | None")),
    28: ("WorkerHello", ("process: str", "address: str", "pid: int")),
    29: ("PeerAddresses", ("peers: dict[str, tuple[str, str]]",)),
    30: ("StartSpu", ("topology: str", "unit: str", "spu: SpuConfig")),
    31: ("StopSpu", ("spu_id: int", "request_id: int")),
    32: ("SpuStopped", ("spu_id: int", "request_id: int")),
    33: ("WorkerHeartbeat", ("process: str", "stats: list[tuple[str, str, int, dict[str, int]]]",
                             "samples: list[tuple[str, str, dict[str, str], float]]",
                             "partitions: list[tuple[str, str, int, list[tuple[str, int, int, int | None, "
                             "int | None, bool]]]]")),
    34: ("Shutdown", ()),
    35: ("StatusRequest", ("request_id: int", "reply_to: Mailbox", "address: str")),
    36: ("StatusReply", ("request_id: int", "jobs: dict[str, value]", "workers: dict[str, str]")),
    37: ("DeadLettered", ("unit: str", "spu_id: int", "key: value", "value: value", "error: str", "attempts: int",
                          "msg_id: value")),
    38: ("SpoutProgress", ("spu_id: int", "finished: bool", "drained: bool", "untracked: int", "error: str")),
    39: ("SpuStarted", ("spu_id: int", "pid: int", "error: str")),
    40: ("SubmitJob", ("topology: str", "units: list[dict[str, value]]", "config: dict[str, value]",
                       "store_id: str")),
    41: ("DriverBeat", ("loads: list[tuple[str, str, int, int, int, int]]",)),
    42: ("PeerGone", ("process: str",)),
    43: ("FailPending", ("reason: str",)),
    44: ("TriggerCheckpoint", ("epoch: int", "final: bool", "may_finish: bool")),
    45: ("CheckpointStart", ("epoch: int", "upstream: frozenset[int]", "final: bool")),
    46: ("Barrier", ("epoch: int", "sender: int", "end_of_input: bool")),
    47: ("CheckpointAck", ("epoch: int", "spu_id: int", "unit: str", "instance: int", "position: value",
                           "error: str", "fatal: bool", "input_ended: bool", "rows: int")),
    48: ("CheckpointComplete", ("epoch: int",)),
    49: ("Abandon", ()),
    50: ("SavepointRequest", ("request_id: int", "reply_to: Mailbox", "address: str", "topology: str",
                              "stop: bool")),
    51: ("SavepointReply", ("request_id: int", "epoch: int | None", "error: str")),
    52: ("ForwardMarker", ("reconfig_id: int", "giver: int", "receivers: dict[int, Mailbox]")),
    53: ("MarkerSeen", ("reconfig_id: int", "giver: int", "sender: int")),
    54: ("CancelReconfiguration", ("reconfig_id: int",)),
    55: ("ChainLink", ("sender: int", "items: list[value]")),
    56: ("ChainMembers", ("spus: dict[int, Mailbox]",)),
    57: ("RangeRequest", ("owner: int", "unit: str", "generation: int", "size: int", "done: list[tuple[int, int]]",
                          "block: int", "replaces: tuple[int, ...]")),
    58: ("RangeGrant", ("generation: int", "start: int | None", "end: int | None", "error: str")),
    59: ("ReportNow", ()),
    60: ("FindOwner", ("owner: int", "process: str")),
    61: ("OwnerAt", ("topology: str", "owner: int", "mailbox: Mailbox")),
    62: ("OwnerGone", ("owner: int", "mailbox: Mailbox")),
    63: ("PeersLost", ("reconfig_id: int", "spus: frozenset[int]")),
    64: ("Watermark", ("sender: int", "watermark: float", "idle: bool", "final: bool")),
    65: ("WatermarkInputs", ("added: frozenset[int]", "removed: frozenset[int]")),
    66: ("EnrollRequest", ("request_id: int", "reply_to: Mailbox", "address: str")),
    67: ("Enrolled", ("request_id: int", "name: str", "public: str", "secret: str", "error: str")),
    68: ("ReleaseShare", ("rescale_id: int", "instances: int")),
    69: ("ShareReleased", ("rescale_id: int", "spu: int", "position: value", "error: str")),
    70: ("TakeShare", ("rescale_id: int", "instances: int", "position: value")),
    71: ("ShareTaken", ("rescale_id: int", "spu: int", "error: str")),
    72: ("CheckpointAcks", ("acks: tuple[CheckpointAck, ...]",)),
}


def test_message_tags_and_field_layouts_are_pinned_so_the_wire_cannot_change_silently():
    # A failure here means the frame format changed: every process must be upgraded together.
    # Add a new message to wire.WIRE_TAGS with the next free tag and add it here; never renumber.
    assert {tag: (name, fields) for tag, name, fields in wire.describe()} == PINNED_SCHEMA
    assert {cls.__name__: tag for cls, tag in wire.TAGS.items()} == {n: t for t, (n, _) in PINNED_SCHEMA.items()}
    assert all(wire.MESSAGE_TYPES[tag_of(cls)] is cls for cls in wire.TAGS)


def test_tags_follow_the_class_name_and_a_message_without_a_tag_is_refused_by_name():
    @dataclasses.dataclass(frozen=True, slots=True)
    class Fresh:
        """a message someone added without a tag."""

    classes = dict(reversed([(cls.__name__, cls) for cls in wire.TAGS]))  # definition order does not matter
    assert [wire.TAGS[cls] for cls in wire._tagged(classes)] == sorted(wire.WIRE_TAGS.values())
    with pytest.raises(ImportError, match=r"without a wire tag: Fresh; add each to esault.transport.wire.WIRE_TAGS "
                                          r"with the next free tag \(73\)"):
        wire._tagged({**classes, "Fresh": Fresh})
    del classes["Abandon"]
    with pytest.raises(ImportError, match=r"WIRE_TAGS names Abandon, which no module of esault.messages defines"):
        wire._tagged(classes)


@pytest.mark.parametrize(("message", "frame_hex"), [
    (StopSpu(7, 3), "931f0703"),
    (EpochMarker(7, 3), "930a0703"),
    (Watermark(7, 1500.0), "954007cb4097700000000000c2c2"),
    (DataBatch(3, "split", ["w"], [(1, "a")], [2**64 - 1], [5]),
     "970103a573706c697491a17791d6019201a16191cfffffffffffffffff9105"),
    (PrepareGive(9, ((0, 100, 4),), {4: Address("w2", "spu-4")}, frozenset({1}), False),
     "960b099193006404810492a27732a57370752d349101c2"),
    (SpuConfig("t", "count", 5, ((0, 10),), (), None, {"unit_ref": Address("driver", "unit-count")}),
     "9e18a174a5636f756e74059192000a90c081a8756e69745f726566c416c7131092a6647269766572aa756e69742d636f756e740001c0c00090"),
])
def test_golden_frames_are_byte_for_byte_stable(message, frame_hex):
    assert encode_frame(message).hex() == frame_hex
    assert decode_frame(bytes.fromhex(frame_hex)) == message


def _any_fields() -> set[tuple[str, str]]:
    found = set()
    for cls in wire.TAGS:
        for name, hint in typing.get_type_hints(cls, globalns=globals()).items():
            if (cls.__name__, name) not in wire.FIELD_TYPES and "Any" in repr(hint):
                found.add((cls.__name__, name))
    return found


def test_every_any_field_is_either_a_mailbox_override_or_a_known_user_value():
    # A new `Any` field must be classified: a mailbox (FIELD_TYPES) or plain codec data (this list).
    assert _any_fields() == {("RouteSpec", "table"), ("SubmitJob", "units"),
                             ("SubmitJob", "config"), ("StatusReply", "jobs"), ("DataBatch", "keys"),
                             ("DataBatch", "values"), ("DeadLettered", "key"), ("DeadLettered", "value"),
                             ("DeadLettered", "msg_id"), ("CheckpointAck", "position"),
                             ("SpuConfig", "position"), ("ChainLink", "items"), ("ShareReleased", "position"),
                             ("TakeShare", "position")}


def test_a_decode_reports_only_the_documented_reasons():
    assert set(wire.FRAME_ERROR_REASONS) == {
        "not_bytes", "truncated", "trailing_bytes", "malformed", "too_deep", "not_a_frame", "unknown_tag",
        "local_only", "field_count", "field_type", "address", "too_large",
    }


# --- round trips -------------------------------------------------------------------

ROUTE = RouteSpec("count", "key", [3, [[0, 11], [2**30, 12]]], {11: Address("w1", "spu-11"),
                                                                   12: Address("w2", "spu-12")}, 3)
RESULT = ScaleResult("split", "count", 11, 13, 0, 2**29, 42, 0.01, 0.2, "overload", ((0, 2**29, 11, 13),), (13,), ())
EXAMPLES: dict[type, Any] = {
    DataBatch: DataBatch(7, "split", ["apple", ("k", 2)], [1, {"n": [1.5, None]}], [2**63], [12345]),
    AckUpdate: AckUpdate({1: 5, 2**63: 0}),
    AckFail: AckFail(99, "ValueError: bad word"),
    RouteSpec: ROUTE,
    InstallRoutes: InstallRoutes(4, ROUTE, {11: Address("w1", "spu-11")}),
    EpochMarker: EpochMarker(4, 8),
    PrepareGive: PrepareGive(4, ((0, 2**30, 13), (2**30 + 7, 2**31 - 1, 14)),
                                 {13: Address("w3", "spu-13"), 14: Address("w1", "spu-14")}, frozenset({8, 9}), True),
    PrepareReceive: PrepareReceive(4, ((0, 2**30, 11), (2**30 + 5, 2**30 + 9, 12))),
    Prepared: Prepared(4, 11, "receiver"),
    ForwardMarker: ForwardMarker(4, 11, {13: Address("w3", "spu-13")}),
    MarkerSeen: MarkerSeen(4, 11, 20),
    CancelReconfiguration: CancelReconfiguration(4),
    ChainLink: ChainLink(3, [["B", "R", 2, [[1, 2.5, {"k": 1}, "a"]]], ["A", "S", 7], ["M", 4]]),
    ChainMembers: ChainMembers({3: Address("w1", "spu-3"), 4: Address("w2", "spu-4")}),
    StateHandoff: StateHandoff(4, 11, pack_states([("apple", b"\x81\xa1n\x05"), (("t", 1), b"")])),
    HandoffFinished: HandoffFinished(4, 11, "giver", 2, 0.0),
    ScaleResult: RESULT,
    GetRoutes: GetRoutes("key"),
    GetSpus: GetSpus(),
    GetLayout: GetLayout(),
    RegisterOwner: RegisterOwner(5, Address("w1", "spout-5")),
    RangeRequest: RangeRequest(5, "lines", 2, 88_000_000, [(0, 1 << 20), (3 << 20, 4 << 20)], 1 << 20, (3, 4)),
    RangeGrant: RangeGrant(2, 1 << 20, 2 << 20),
    Drain: Drain(),
    SpuConfig: SpuConfig("wordcount", "count", 13, ((0, 2**30),), (ROUTE,), PrepareReceive(4, ((0, 9, 11),)),
                             {"unit_ref": Address("driver", "unit-count"), "n": (1, frozenset({2}))}),
    Probe: Probe(1, 12.5, Address("driver", "monitor-count"), False),
    ProbeReturned: ProbeReturned(11, 1, 12.5, 4000, (5, 2**31 - 1)),
    SpusChanged: SpusChanged({11: Address("w1", "spu-11")}, {11: ((0, 9), (20, 29)), 12: None}, RESULT),
    WorkerHello: WorkerHello("w1", "tcp://127.0.0.1:5601", 4242),
    PeerAddresses: PeerAddresses({"driver": ("tcp://127.0.0.1:5600", "k" * 40),
                                      "w1": ("tcp://127.0.0.1:5601", "j" * 40)}),
    StartSpu: StartSpu("wc", "count",
                           SpuConfig("wc", "count", 5, ((0, 10),), (), None, {"unit_ref": Address("driver", "unit-count")})),
    StopSpu: StopSpu(5, 9),
    SpuStopped: SpuStopped(5, 9),
    WorkerHeartbeat: WorkerHeartbeat("w1", [("wc", "count", 5, {"processed": 10, "pes": 3})],
                                         [("esault_frames_dropped", "esault_frames_dropped_total", {"reason": "decode"},
                                           2.0)],
                                         [("wc", "src", 2, [("orders", 0, 10, 12, 2, False),
                                                            ("orders", 1, 5, None, None, True)])]),
    Shutdown: Shutdown(),
    StatusRequest: StatusRequest(3, Address("status-1", "status"), "tcp://127.0.0.1:5609"),
    StatusReply: StatusReply(3, {"wc": {"units": {"count": {"spus": {5: {"interval": (0, 9)}}}}}},
                                 {"w1": "tcp://127.0.0.1:5601"}),
    DeadLettered: DeadLettered("risky", 4, ("k", 1), {"v": [1, 2]}, "ValueError: bad at x.py:3", 4, None),
    SpoutProgress: SpoutProgress(3, True, False, 0, "spout 'src' open() raised"),
    SpuStarted: SpuStarted(7, 4242, "TopologyError: worker cannot import x:Y"),
    DriverBeat: DriverBeat([("wc", "count", 5, 1200, 40, 3)]),
    PeerGone: PeerGone("w2"),
    ReportNow: ReportNow(),
    FindOwner: FindOwner(5, "w2"),
    OwnerAt: OwnerAt("wordcount", 5, Address("w1", "spu-5")),
    OwnerGone: OwnerGone(5, Address("w1", "spu-5")),
    PeersLost: PeersLost(9, frozenset({4, 7})),
    Watermark: Watermark(7, 1_700_000_002_500.0, True, False),
    WatermarkInputs: WatermarkInputs(frozenset({11, 12}), frozenset({4})),
    EnrollRequest: EnrollRequest(1, Address("enroll-1-1-ab12cd34", "status"), "tcp://127.0.0.1:5610"),
    Enrolled: Enrolled(1, "replica-1", "P" * 40, "S" * 40, ""),
    ReleaseShare: ReleaseShare(3, 4),
    ShareReleased: ShareReleased(3, 11, {"next": [["words", 2, 4096]], "end": []}, ""),
    TakeShare: TakeShare(3, 4, {"next": [["words", 2, 4096], ["words", 3, 17]], "end": []}),
    ShareTaken: ShareTaken(3, 12, ""),
    FailPending: FailPending("a worker died"),
    TriggerCheckpoint: TriggerCheckpoint(7, True),
    CheckpointStart: CheckpointStart(7, frozenset({3, 4}), True),
    Barrier: Barrier(7, 3),
    CheckpointAck: CheckpointAck(7, 3, "sentences", 0, {"offset": 4096}, "", False),
    CheckpointAcks: CheckpointAcks((CheckpointAck(7, 3, "sentences", 0, {"offset": 4096}),
                                    CheckpointAck(7, 5, "count", 1, None, "", False, False, 12))),
    CheckpointComplete: CheckpointComplete(7),
    Abandon: Abandon(),
    SavepointRequest: SavepointRequest(4, Address("client-1", "status"), "tcp://127.0.0.1:5609", "wc", True),
    SavepointReply: SavepointReply(4, 12, ""),
    SubmitJob: SubmitJob("wc", [{"name": "count", "params": {"k": (1, "a")}}], {"acking": True, "data_dir": "d"}),
}


def same(a: Any, b: Any) -> bool:
    """Equal and of the same types all the way down (list != tuple, set != frozenset)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, (set, frozenset)):
        return a == b and all(any(same(x, y) for y in b) for x in a)
    if isinstance(a, dict):
        return len(a) == len(b) and all(any(same(k, k2) and same(v, b[k2]) for k2 in b) for k, v in a.items())
    if dataclasses.is_dataclass(a):
        return all(same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a))
    return a == b


def test_every_message_that_crosses_processes_has_a_round_trip_example():
    assert set(EXAMPLES) == set(wire.TAGS) - wire.LOCAL_ONLY


@pytest.mark.parametrize("message", list(EXAMPLES.values()), ids=lambda msg: type(msg).__name__)
def test_every_message_survives_a_round_trip_with_its_field_types(message):
    decoded = decode_frame(encode_frame(message))
    assert decoded == message
    assert same(decoded, message)


def test_decode_builds_the_declared_containers_from_lists_the_runtime_passes():
    decoded = decode_frame(encode_frame(RangeRequest(1, "u", 0, 9, [[1, 2]], 5)))  # list[tuple[int, int]]
    assert decoded.done == [(1, 2)] and type(decoded.done[0]) is tuple
    spu = decode_frame(encode_frame(SpuConfig("t", "u", 1, [[0, 5]], [], None)))
    assert spu.intervals == ((0, 5),) and type(spu.intervals[0]) is tuple and spu.downstream == () and spu.extra == {}
    assert decode_frame(encode_frame(Probe(1, 5, Address("d", "m")))).sent_at == 5.0
    assert type(decode_frame(encode_frame(Probe(1, 5, Address("d", "m")))).sent_at) is float


hashables = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats(allow_nan=False)
    | st.text(max_size=6) | st.binary(max_size=6),
    lambda inner: st.tuples(inner, inner) | st.frozensets(inner, max_size=3),
    max_leaves=6,
)
user_values = st.recursive(
    hashables,
    lambda inner: st.lists(inner, max_size=3) | st.tuples(inner) | st.sets(hashables, max_size=3)
    | st.frozensets(hashables, max_size=3) | st.dictionaries(hashables, inner, max_size=3),
    max_leaves=10,
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(hashables, user_values), max_size=4), st.text(max_size=5),
       st.lists(st.tuples(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1)), max_size=3))
def test_user_keys_and_values_keep_their_types_through_a_data_batch(rows, source, trees):
    batch = DataBatch(1, source, [k for k, _ in rows], [v for _, v in rows], [r for r, _ in trees],
                        [e for _, e in trees])
    decoded = decode_frame(encode_frame(batch))
    assert same(decoded.keys, batch.keys) and same(decoded.values, batch.values)
    assert (decoded.source, decoded.roots, decoded.edges) == (batch.source, batch.roots, batch.edges)


def test_a_data_batch_frame_starts_with_the_prefix_the_endpoint_hands_over_undecoded():
    from esault.transport.frames import DATA_FRAME_PREFIX

    frame = encode_frame(DataBatch(1, "s", ["k"] * 300, [1] * 300, [], []))
    assert frame[:2] == DATA_FRAME_PREFIX
    assert all(not encode_frame(msg).startswith(DATA_FRAME_PREFIX) for cls, msg in EXAMPLES.items()
               if cls is not DataBatch)


# --- mailboxes ------------------------------------------------------------------------


class FakeRef:
    """Stands in for a Pykka ActorRef: tellable, not encodable by itself."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.told: list[Any] = []

    def tell(self, message: Any) -> None:
        self.told.append(message)


def test_mailbox_fields_go_through_the_callers_address_hooks():
    local = {"spu-11": FakeRef("spu-11"), "unit-count": FakeRef("unit-count")}
    sender = WireCodec(to_address=lambda ref: Address("w1", ref.name))
    receiver = WireCodec(from_address=lambda a: local[a.actor] if a.process == "w1" else a)
    msg = InstallRoutes(4, dataclasses.replace(ROUTE, spus={11: local["spu-11"], 12: Address("w2", "spu-12")}),
                          {11: local["spu-11"]})
    decoded = receiver.decode(sender.encode(msg))
    assert decoded.route.spus == {11: local["spu-11"], 12: Address("w2", "spu-12")}
    assert decoded.notify[11] is local["spu-11"] and isinstance(decoded.notify[11], Mailbox)
    cfg = SpuConfig("t", "count", 1, None, (), None, {"unit_ref": local["unit-count"], "pair": (local["spu-11"], 1)})
    extra = receiver.decode(sender.encode(cfg)).extra
    assert extra["unit_ref"] is local["unit-count"] and extra["pair"] == (local["spu-11"], 1)


def test_a_mailbox_the_hook_cannot_name_is_refused_naming_the_field():
    with pytest.raises(SerializationError, match=r"RegisterOwner\.mailbox: to_address\(.*FakeRef.*\) failed.*"
                                                 r"WireCodec\(to_address=\.\.\.\)"):
        encode_frame(RegisterOwner(1, FakeRef("spout-1")))
    with pytest.raises(SerializationError, match=r"returned str 'w1/spu', not an Address"):
        WireCodec(to_address=lambda ref: "w1/spu").encode(RegisterOwner(1, FakeRef("spout-1")))


def test_a_failing_from_address_drops_the_frame_with_reason_address():
    frame = encode_frame(RegisterOwner(1, Address("w9", "spout-1")))

    def unknown(address: Address) -> Any:
        raise KeyError(f"no actor {address}")

    with pytest.raises(FrameError, match=r"RegisterOwner\.mailbox: from_address\(w9/spout-1\) failed") as err:
        WireCodec(from_address=unknown).decode(frame)
    assert frame_error_reason(err.value) == "address"


# --- refusals on encode --------------------------------------------------------------


@pytest.mark.parametrize("timer", [Tick(1e12), Pump()], ids=["Tick", "Pump"])
def test_timer_messages_never_cross_processes_so_no_frame_can_set_a_clock(timer):
    with pytest.raises(SerializationError, match=r"timer messages stay in their process"):
        encode_frame(timer)
    tag = tag_of(type(timer))
    forged = msgpack.packb([tag, 1e12] if type(timer) is Tick else [tag])
    with pytest.raises(FrameError, match=rf"tag {tag} \({type(timer).__name__}\) never crosses processes") as err:
        decode_frame(forged)
    assert frame_error_reason(err.value) == "local_only"


def test_a_frame_over_the_codec_cap_is_refused_before_decoding():
    codec = wire.WireCodec(max_frame_bytes=100)
    big = encode_frame(DataBatch(1, "s", ["k" * 200], [1], [], []))
    with pytest.raises(FrameError, match=r"over max_frame_bytes=100") as err:
        codec.decode(big)
    assert frame_error_reason(err.value) == "too_large"
    assert codec.decode(encode_frame(StopSpu(1, 2))) == StopSpu(1, 2)


@pytest.mark.parametrize("header", [b"\xdd\x40\x00\x00\x00", b"\xdf\x40\x00\x00\x00", b"\xdb\x40\x00\x00\x00"],
                         ids=["array32", "map32", "str32"])
def test_a_frame_declaring_more_items_than_it_carries_is_refused_without_allocating_them(header):
    # 2**30 items (or bytes) announced by a 5-byte header: msgpack's explicit limits refuse it at once.
    started = time.monotonic()
    with pytest.raises(FrameError) as err:  # not MemoryError: nothing of the announced size is allocated
        decode_frame(b"\x92\x01" + header + b"\x00" * 16)
    assert time.monotonic() - started < 1.0, "the announced size was allocated or walked before refusing"
    assert frame_error_reason(err.value) in ("truncated", "too_large")


def test_an_array_over_max_array_items_is_refused_even_when_the_frame_carries_every_item():
    from esault.transport.codec import MAX_ARRAY_ITEMS, unpack_limits

    assert MAX_ARRAY_ITEMS == 2**22
    assert unpack_limits(100)["max_array_len"] == 100 and unpack_limits(2**30)["max_array_len"] == MAX_ARRAY_ITEMS
    at_cap = msgpack.packb([1, 1, "s", [0] * MAX_ARRAY_ITEMS, [0] * MAX_ARRAY_ITEMS, [], []])
    assert len(decode_frame(at_cap).keys) == MAX_ARRAY_ITEMS
    over = msgpack.packb([1, 1, "s", [0] * (MAX_ARRAY_ITEMS + 1), [0] * (MAX_ARRAY_ITEMS + 1), [], []])
    with pytest.raises(FrameError, match=rf"exceeds max_array_len\({MAX_ARRAY_ITEMS}\)") as err:
        decode_frame(over)  # ~8 MiB of bytes would allow more: the item cap is what refuses it
    assert frame_error_reason(err.value) == "too_large"


def test_a_future_never_crosses_processes():
    cmd = ScaleCommand("split", 11, {}, (), Future())
    with pytest.raises(SerializationError, match=r"cannot send ScaleCommand to another process: field 'reply' is a "
                                                 r"concurrent.futures.Future, and futures never cross processes"):
        encode_frame(cmd)
    assert wire.LOCAL_ONLY == {ScaleCommand, Tick, Pump}
    with pytest.raises(FrameError, match=r"tag 16 \(ScaleCommand\) never crosses processes") as err:
        decode_frame(msgpack.packb([16, "split", 11, {}, [], None, None, None, "manual", None, None, None]))
    assert frame_error_reason(err.value) == "local_only"


@pytest.mark.parametrize(("message", "error"), [
    (EpochMarker("7", 3), r"cannot send EpochMarker\.reconfig_id: expected int, got str '7'"),
    (PrepareGive(1, ((0, 5, 2),), {}, {1, "x"}, True), r"PrepareGive\.upstream\[item\]: expected int, got str 'x'"),
    (DataBatch(1, "s", ("a", "b"), [1, 2], [], []), r"DataBatch\.keys: expected a list of values, got tuple"),
    (DataBatch(1, "s", ["a", "b"], [1, object()], [], []),
     r"DataBatch\.values\[1\]: cannot encode type object; user keys, values and state must be"),
    (AckUpdate({1: 2**64}), r"AckUpdate\.deltas: cannot encode an int outside the 64-bit range"),
    (InstallRoutes(1, "not a route", {}), r"InstallRoutes\.route: expected a RouteSpec, got str"),
    (RangeRequest(1, "u", 0, 9, [(1, "x")], 5), r"RangeRequest\.done\[0\]\[1\]: expected int, got str 'x'"),
])
def test_a_field_of_the_wrong_type_is_refused_naming_its_path(message, error):
    with pytest.raises(SerializationError, match=error):
        encode_frame(message)


def test_something_that_is_not_a_message_is_refused():
    with pytest.raises(SerializationError, match=r"cannot send a dict: only the message dataclasses"):
        encode_frame({"tag": 1})


# --- hostile input: only FrameError, always with a precise reason --------------------

GOOD_FRAMES = [encode_frame(msg) for msg in EXAMPLES.values()]


@pytest.mark.parametrize(("frame", "reason", "error"), [
    (b"", "truncated", r"malformed frame \(0 bytes\): truncated"),
    (GOOD_FRAMES[0][:-3], "truncated", r"truncated"),
    (encode_frame(StopSpu(1, 2)) + b"\x00", "trailing_bytes", r"bytes after the message"),
    (b"\xc1", "malformed", r"malformed frame \(1 bytes\)"),
    (b"\x91" * 5000 + b"\x01", "too_deep", r"nested too deeply"),
    (msgpack.packb({"tag": 1}), "not_a_frame", r"expected \[tag, fields\.\.\.\], got dict"),
    (msgpack.packb([]), "not_a_frame", r"got list \[\]"),
    (msgpack.packb(["DataBatch", 1, []]), "not_a_frame", r"not a message frame"),
    (msgpack.packb([99, 1]), "unknown_tag", r"unknown message tag 99 \(known: 1\.\.72, retired: 4, 7, 22\)"),
    (msgpack.packb([10, 1]), "field_count", r"EpochMarker: expected 2 fields \(reconfig_id, sender\), got 1"),
    (msgpack.packb([25, 1, "soon", ["d", "m"], True]), "field_type", r"Probe\.sent_at: expected float, got str 'soon'"),
    (msgpack.packb([10, True, 1]), "field_type", r"EpochMarker\.reconfig_id: expected int, got bool True"),
    (msgpack.packb([1, 1, "s", ["k"], [1], [0, "root"], [0, 0]]), "field_type",
     r"DataBatch\.roots\[1\]: expected int, got str 'root'"),
    (msgpack.packb([1, 1, "s", ["k", "j"], [1], [], []]), "field_type",
     r"DataBatch: rejected: ValueError: DataBatch columns differ in length: 2 keys, 1 values"),
    (msgpack.packb([1, 1, "s", "k", [1], [], []]), "field_type", r"DataBatch\.keys: expected an array of values"),
    (msgpack.packb([9, 1, ["u", "key", None, {5: ["w1"]}, 1], {}]), "field_type",
     r"InstallRoutes\.route\.spus\[5\]: expected a mailbox address \[process, actor\], got list \['w1'\]"),
    (msgpack.packb([21, 1, ["", "spout"]]), "field_type",
     r"RegisterOwner\.mailbox: Address\.process must be a non-empty str"),
    (msgpack.packb([1, 1, "s", [msgpack.ExtType(9, b"\x90")], [1], [], []]), "field_type",
     r"unknown msgpack ext type 9 in a value"),
    (msgpack.packb([1, 1, "s", [msgpack.ExtType(16, msgpack.packb(["w", "a"]))], [1], [], []]), "field_type",
     r"unknown msgpack ext type 16 in a value"),
    (msgpack.packb([1, 1, "s", [msgpack.ExtType(2, msgpack.packb([[1]]))], [1], [], []]), "field_type",
     r"a set holds an unhashable item"),
    (msgpack.packb([11, 1, [[0, 5, 2]], {}, [[1]], True]), "field_type", r"PrepareGive\.upstream\[0\]: expected int"),
    (msgpack.packb([24, "t", "u", 1, None, [], None, {"unit_ref": "not packed"}, 0, 1, None, None, 0, []]), "field_type",
     r"SpuConfig\.extra\['unit_ref'\]: expected a packed value \(bin\)"),
])
def test_each_malformed_frame_raises_frame_error_with_a_precise_reason(frame, reason, error):
    with pytest.raises(FrameError, match=error) as err:
        decode_frame(frame)
    assert frame_error_reason(err.value) == reason


def test_decode_refuses_what_is_not_bytes():
    with pytest.raises(FrameError, match="a frame must be bytes, got str") as err:
        decode_frame("[1, 2]")  # type: ignore[arg-type]
    assert frame_error_reason(err.value) == "not_bytes"


def _decode_or_frame_error(frame: bytes) -> Any:
    """The fuzz oracle: decode returns a message that re-encodes stably, or raises FrameError."""
    try:
        message = decode_frame(frame)
    except FrameError as err:
        assert frame_error_reason(err) in wire.FRAME_ERROR_REASONS
        return None
    assert type(message) in wire.TAGS
    again = encode_frame(message)  # whatever decode accepts is well-typed enough to send on
    assert encode_frame(decode_frame(again)) == again
    return message


@FUZZ
@given(st.binary(max_size=200))
@example(b"\x93\x01\x01\x91\x95\xc7\x01\x01\xc0")  # an ext tuple with garbage inside
@example(b"\xdd\xff\xff\xff\xff")  # an array header claiming 4 billion items
def test_random_bytes_never_raise_anything_but_frame_error(data):
    _decode_or_frame_error(data)


@FUZZ
@given(st.sampled_from(GOOD_FRAMES), st.data())
def test_mutated_valid_frames_never_raise_anything_but_frame_error(frame, data):
    buf = bytearray(frame)
    for _ in range(data.draw(st.integers(1, 4))):
        op = data.draw(st.sampled_from(["flip", "cut", "insert", "delete"]))
        pos = data.draw(st.integers(0, max(len(buf) - 1, 0)))
        if op == "flip" and buf:
            buf[pos] ^= 1 << data.draw(st.integers(0, 7))
        elif op == "cut":
            del buf[pos:]
        elif op == "insert":
            buf[pos:pos] = data.draw(st.binary(min_size=1, max_size=4))
        elif op == "delete" and buf:
            del buf[pos]
    _decode_or_frame_error(bytes(buf))


msgpack_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats() | st.text(max_size=4)
    | st.binary(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.integers(0, 20) | st.text(max_size=3), inner,
                                                                max_size=3),
    max_leaves=8,
)


@FUZZ
@given(st.sampled_from(GOOD_FRAMES), st.data())
def test_frames_with_a_field_swapped_for_any_msgpack_value_never_raise_anything_but_frame_error(frame, data):
    raw = msgpack.unpackb(frame, strict_map_key=False, ext_hook=lambda code, blob: msgpack.ExtType(code, blob))
    if len(raw) > 1:
        raw[data.draw(st.integers(1, len(raw) - 1))] = data.draw(msgpack_values)
    else:
        raw.append(data.draw(msgpack_values))
    _decode_or_frame_error(msgpack.packb(raw, use_bin_type=True))

