"""Actor messages <-> msgpack frames, without pickle.

A frame is one msgpack array ``[tag, field_1, ..., field_n]``: `tag` is a
small int naming the message class (`TAGS`), the fields follow in dataclass
order, each encoded by what its annotation in `esault.messages` says:

- int, float, str, bytes, bool, None and ``X | None`` as msgpack scalars;
- ``list``/``tuple``/``frozenset``/``dict`` fields as arrays and maps, decoded
  back to the declared container type;
- a nested message dataclass (RouteSpec, PrepareReceive) as the array of its
  fields, without a tag (the annotation says which class it is);
- user keys and values (every ``Any``, and the ``list[Any]`` columns of a
  DataBatch, packed and unpacked by msgpack in C with no per-item Python)
  through `esault.transport.codec`'s packer, so tuples, sets and frozensets
  keep their types (msgpack ext 1, 2, 3);
- a mailbox field (an ``Any`` holding an ActorRef today, listed in
  `FIELD_TYPES`, or any field annotated `Mailbox`) as ``[process, actor]``,
  through the codec's `to_address` / `from_address` hooks;
- a `concurrent.futures.Future` field makes the whole class local-only
  (`LOCAL_ONLY`): encode refuses it, decode drops its tag.

Tags are pinned by class name in `WIRE_TAGS`, never derived from where a class
is defined, so messages can move between modules without touching the wire;
tests/unit/test_wire.py pins them, the field lists and golden frames, so the
wire format cannot change silently. A new message takes the next free tag.

`WireCodec.decode` raises `FrameError` for every malformed input and never
another exception type; `frame_error_reason(err)` is one of
`FRAME_ERROR_REASONS`, a fixed word fit for a metric label.

Cost: one msgpack pack/unpack per frame plus one validation pass over the
result, O(size of the message) for control messages; a DataBatch's columns
skip the validation pass, so a tuple costs tens of nanoseconds each way
(measured in docs/TRANSPORT.md).
"""

from __future__ import annotations

import dataclasses
import reprlib
import types
import typing
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import Any

import msgpack

from esault.errors import FrameError, SerializationError
from esault.messages import MODULES as _MESSAGE_MODULES
from esault.transport import codec as _codec
from esault.transport.address import Address, Mailbox

__all__ = [
    "FIELD_TYPES",
    "FRAME_ERROR_REASONS",
    "LOCAL_ONLY",
    "MESSAGE_TYPES",
    "TAGS",
    "WireCodec",
    "decode_frame",
    "describe",
    "encode_frame",
    "frame_error_reason",
    "tag_of",
]

FRAME_ERROR_REASONS: tuple[str, ...] = (
    "not_bytes",  # decode was given something other than bytes
    "truncated",  # the msgpack data ends early
    "trailing_bytes",  # bytes left after one complete msgpack object
    "malformed",  # not msgpack (reserved byte, bad utf-8, unhashable map key...)
    "too_deep",  # nesting beyond msgpack's or Python's limits
    "not_a_frame",  # valid msgpack, but not [int tag, fields...]
    "unknown_tag",  # no message class has this tag
    "local_only",  # a message that never crosses processes (ScaleCommand)
    "field_count",  # the tag's class has a different number of fields
    "field_type",  # a field (or an item inside it) has the wrong type
    "address",  # from_address could not turn a received address into a mailbox
    "too_large",  # the frame is over the codec's max_frame_bytes
)
"""Every reason `WireCodec.decode` reports; small and fixed, for metric labels."""

# Codec's ext types (1 tuple, 2 set, 3 frozenset) and one of ours: a mailbox
# inside a dynamic value (SpuConfig.extra). Only dynamic fields accept it.
_EXT_TUPLE, _EXT_SET, _EXT_FROZENSET = _codec._EXT_TUPLE, _codec._EXT_SET, _codec._EXT_FROZENSET
_EXT_ADDRESS = 16


class _MailboxOrValue:
    """Annotation marker: a codec value that may also contain mailboxes (SpuConfig.extra)."""


FIELD_TYPES: Mapping[tuple[str, str], str] = types.MappingProxyType({
    ("RouteSpec", "spus"): "dict[int, Mailbox]",
    ("InstallRoutes", "notify"): "dict[int, Mailbox]",
    ("PrepareGive", "receivers"): "dict[int, Mailbox]",
    ("ForwardMarker", "receivers"): "dict[int, Mailbox]",
    ("ScaleCommand", "upstream"): "dict[int, tuple[Mailbox, str]]",
    ("StatusRequest", "reply_to"): "Mailbox",
    ("SavepointRequest", "reply_to"): "Mailbox",
    ("EnrollRequest", "reply_to"): "Mailbox",
    ("RegisterOwner", "mailbox"): "Mailbox",
    ("OwnerAt", "mailbox"): "Mailbox",
    ("OwnerGone", "mailbox"): "Mailbox",
    ("SpuConfig", "extra"): "dict[str, _MailboxOrValue]",
    ("Probe", "reply_to"): "Mailbox",
    ("SpusChanged", "spus"): "dict[int, Mailbox]",
    ("SpusChanged", "result"): "ScaleResult | None",
    ("ChainMembers", "spus"): "dict[int, Mailbox]",
})
"""The wire type of fields esault.messages annotates ``Any`` that are not plain user values.

Mailboxes (ActorRefs today) and a nested ScaleResult; evaluated in the
namespace of esault.messages plus `Mailbox`. Once esault.messages annotates these
fields precisely the entries are redundant (and harmless). Every other
``Any`` is a user value (codec types only); tests/unit/test_wire.py pins that
list, so a new ``Any`` field forces a decision here.
"""


# --- the tag registry ------------------------------------------------------


WIRE_TAGS: Mapping[str, int] = types.MappingProxyType({
    "DataBatch": 1, "Tick": 2, "Pump": 3, "AckUpdate": 5, "AckFail": 6,
    "RouteSpec": 8, "InstallRoutes": 9, "EpochMarker": 10, "PrepareGive": 11, "PrepareReceive": 12,
    "Prepared": 13, "StateHandoff": 14, "HandoffFinished": 15, "ScaleCommand": 16, "ScaleResult": 17,
    "GetRoutes": 18, "GetSpus": 19, "GetLayout": 20, "RegisterOwner": 21, "Drain": 23,
    "SpuConfig": 24, "Probe": 25, "ProbeReturned": 26, "SpusChanged": 27, "WorkerHello": 28,
    "PeerAddresses": 29, "StartSpu": 30, "StopSpu": 31, "SpuStopped": 32, "WorkerHeartbeat": 33,
    "Shutdown": 34, "StatusRequest": 35, "StatusReply": 36, "DeadLettered": 37, "SpoutProgress": 38,
    "SpuStarted": 39, "SubmitJob": 40, "DriverBeat": 41, "PeerGone": 42, "FailPending": 43,
    "TriggerCheckpoint": 44, "CheckpointStart": 45, "Barrier": 46, "CheckpointAck": 47,
    "CheckpointComplete": 48, "Abandon": 49, "SavepointRequest": 50, "SavepointReply": 51,
    "ForwardMarker": 52, "MarkerSeen": 53, "CancelReconfiguration": 54, "ChainLink": 55, "ChainMembers": 56,
    "RangeRequest": 57, "RangeGrant": 58, "ReportNow": 59, "FindOwner": 60, "OwnerAt": 61,
    "OwnerGone": 62, "PeersLost": 63, "Watermark": 64, "WatermarkInputs": 65, "EnrollRequest": 66,
    "Enrolled": 67, "ReleaseShare": 68, "ShareReleased": 69, "TakeShare": 70, "ShareTaken": 71,
    "CheckpointAcks": 72,
})
"""Message class name -> wire tag. Never renumber or reuse a tag: a new message takes the next free one.

Retired tags (RETIRED_TAGS) are never reused."""

RETIRED_TAGS: tuple[int, ...] = (4, 7, 22)
"""AckInit, TreesDone and GetPending: the ack server tracked every tree until spout SPUs tracked their own."""


def _message_classes() -> dict[str, type]:
    """The dataclasses defined in the modules of esault.messages, by name."""
    return {
        obj.__name__: obj
        for module in _MESSAGE_MODULES for obj in vars(module).values()
        if isinstance(obj, type) and dataclasses.is_dataclass(obj) and obj.__module__ == module.__name__
    }


def _tagged(classes: dict[str, type]) -> list[type]:
    """The message classes in tag order; ImportError naming the class if WIRE_TAGS and the messages differ."""
    untagged = sorted(set(classes) - set(WIRE_TAGS))
    if untagged:
        raise ImportError(f"message classes without a wire tag: {', '.join(untagged)}; add each to "
                          f"esault.transport.wire.WIRE_TAGS with the next free tag ({max(WIRE_TAGS.values()) + 1})")
    gone = sorted(set(WIRE_TAGS) - set(classes))
    if gone:
        raise ImportError(f"WIRE_TAGS names {', '.join(gone)}, which no module of esault.messages defines; "
                          f"restore the class or move it into esault.messages (never reuse its tag)")
    if len(set(WIRE_TAGS.values())) != len(WIRE_TAGS):
        raise ImportError("two messages share a wire tag in esault.transport.wire.WIRE_TAGS; give each its own")
    reused = sorted(set(WIRE_TAGS.values()) & set(RETIRED_TAGS))
    if reused:
        raise ImportError(f"WIRE_TAGS reuses retired tag(s) {reused}: an old frame would decode as the new message; "
                          f"take the next free tag ({max(WIRE_TAGS.values()) + 1})")
    return sorted(classes.values(), key=lambda cls: WIRE_TAGS[cls.__name__])


_BY_NAME = _message_classes()
_CLASSES = _tagged(_BY_NAME)
TAGS: Mapping[type, int] = types.MappingProxyType({cls: WIRE_TAGS[cls.__name__] for cls in _CLASSES})
"""Message class -> wire tag (from WIRE_TAGS)."""
MESSAGE_TYPES: Mapping[int, type] = types.MappingProxyType({tag: cls for cls, tag in TAGS.items()})
"""Wire tag -> message class."""


def tag_of(cls: type) -> int:
    """The wire tag of a message class; KeyError naming the known classes if it has none."""
    try:
        return TAGS[cls]
    except KeyError:
        raise KeyError(
            f"{getattr(cls, '__name__', cls)!r} has no wire tag: only the dataclasses of "
            f"esault.messages cross processes ({', '.join(c.__name__ for c in _CLASSES)})"
        ) from None


def _hints(cls: type) -> dict[str, Any]:
    """Field annotations of `cls`, with FIELD_TYPES applied; ImportError if FIELD_TYPES is stale."""
    namespace = dict(_BY_NAME, Any=Any, Future=Future, Mailbox=Mailbox, _MailboxOrValue=_MailboxOrValue)
    hints = typing.get_type_hints(cls, globalns=namespace)
    names = [f.name for f in dataclasses.fields(cls)]
    for (cls_name, name), text in FIELD_TYPES.items():
        if cls_name != cls.__name__:
            continue
        if name not in names:
            raise ImportError(
                f"esault.transport.wire.FIELD_TYPES lists {cls_name}.{name}, but {cls_name} has no field "
                f"{name!r} (fields: {', '.join(names)}); update FIELD_TYPES to match esault/messages/"
            )
        hints[name] = eval(text, namespace)  # a constant of this module, never received data
    return {name: hints[name] for name in names}


LOCAL_ONLY: frozenset[type] = frozenset(
    cls for cls in _CLASSES if any(h is Future for h in _hints(cls).values())
) | {_BY_NAME["Tick"], _BY_NAME["Pump"]}
"""Messages that stay in their process (encode refuses them, decode drops them): those with a
Future field, and the timer messages Tick and Pump - a process's timers run on its own clock,
never on a `now` someone else sent."""


# --- errors ----------------------------------------------------------------


class _Invalid(Exception):
    """Internal: a value does not fit its field; `path` fills while unwinding (innermost first)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail
        self.path: list[str] = []

    def where(self) -> str:
        return "".join(reversed(self.path))


def _frame_error(reason: str, detail: str) -> FrameError:
    err = FrameError(detail)
    err.reason = reason  # type: ignore[attr-defined]
    return err


def frame_error_reason(exc: BaseException) -> str:
    """The fixed reason word of a FrameError raised by decode ('malformed' for any other FrameError)."""
    return getattr(exc, "reason", "malformed")


_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother, _REPR.maxlist, _REPR.maxdict = 3, 40, 40, 4, 4


def _kind(value: Any) -> str:
    """A short, safe description of a (possibly hostile) decoded value for error messages."""
    try:
        text = _REPR.repr(value)  # bounded work, however large the value
    except Exception:  # noqa: BLE001 - a recursion limit on a deep value, say
        text = "<unprintable>"
    return f"{type(value).__name__} {text}"


def _failing_index(decode: Callable[[Any], Any], items: Any) -> Any:
    """Error path only: re-run `decode` on the items to find which one failed."""
    for index, item in enumerate(items):
        try:
            decode(item)
        except _Invalid:
            return index
    return "?"


# --- msgpack and ext types ---------------------------------------------------


def _pack(value: Any) -> bytes:
    """Pack a frame body; user values go through the codec's type-preserving default."""
    return msgpack.packb(value, use_bin_type=True, strict_types=True, default=_codec._default)


def _unpack_with(data: bytes, hook: Callable[[int, bytes], Any]) -> Any:
    return msgpack.unpackb(data, raw=False, use_list=True, strict_map_key=False, ext_hook=hook,
                           **_codec.unpack_limits(len(data)))


def _build_collection(code: int, items: Any) -> Any:
    if type(items) is not list:
        raise _Invalid("field_type", f"ext type {code} must hold an array, got {_kind(items)}")
    if code == _EXT_TUPLE:
        return tuple(items)
    try:
        return set(items) if code == _EXT_SET else frozenset(items)
    except TypeError:
        raise _Invalid("field_type", f"a set holds an unhashable item: {_kind(items)}") from None


def _value_ext_hook(code: int, data: bytes) -> Any:
    """User values: only the codec's tuple/set/frozenset ext types are valid."""
    if code in (_EXT_TUPLE, _EXT_SET, _EXT_FROZENSET):
        return _build_collection(code, _unpack_with(data, _value_ext_hook))
    raise _Invalid("field_type", f"unknown msgpack ext type {code} in a value (the codec uses 1, 2, 3)")


# --- field codecs ----------------------------------------------------------


class _Field:
    """How one annotation crosses the wire: enc(value) -> plain, dec(plain) -> value, desc for docs."""

    __slots__ = ("dec", "desc", "enc")

    def __init__(self, enc: Callable[[Any], Any], dec: Callable[[Any], Any], desc: str) -> None:
        self.enc, self.dec, self.desc = enc, dec, desc


def _identity(value: Any) -> Any:
    return value


def _scalar(py_type: type) -> _Field:
    name = py_type.__name__

    def enc(value: Any) -> Any:
        if type(value) is py_type:
            return value
        if py_type is int and isinstance(value, int) and not isinstance(value, bool):
            return int(value)  # an IntEnum, say
        if py_type is float and type(value) is int:
            return float(value)
        if py_type is str and isinstance(value, str):
            return str(value)
        if py_type is bytes and isinstance(value, (bytes, bytearray, memoryview)):
            return bytes(value)
        raise _Invalid("field_type", f"expected {name}, got {_kind(value)}")

    if py_type is float:
        def dec(raw: Any) -> Any:
            kind = type(raw)
            if kind is float:
                return raw
            if kind is int:
                return float(raw)
            raise _Invalid("field_type", f"expected float, got {_kind(raw)}")
    else:
        def dec(raw: Any) -> Any:
            if type(raw) is py_type:
                return raw
            raise _Invalid("field_type", f"expected {name}, got {_kind(raw)}")

    return _Field(enc, dec, name)


def _none_field() -> _Field:
    def check(value: Any) -> None:
        if value is not None:
            raise _Invalid("field_type", f"expected None, got {_kind(value)}")

    return _Field(check, check, "None")


def _optional(inner: _Field) -> _Field:
    ienc, idec = inner.enc, inner.dec

    def enc(value: Any) -> Any:
        return None if value is None else ienc(value)

    def dec(raw: Any) -> Any:
        return None if raw is None else idec(raw)

    return _Field(enc, dec, f"{inner.desc} | None")


def _sequence(item: _Field, build: type) -> _Field:
    """list[X] or tuple[X, ...]: an array; encode takes a list or tuple, decode builds `build`."""
    ienc, idec = item.enc, item.dec
    name = build.__name__

    def enc(value: Any) -> Any:
        if not isinstance(value, (list, tuple)):
            raise _Invalid("field_type", f"expected a {name} (list or tuple), got {_kind(value)}")
        try:
            return [ienc(x) for x in value]
        except _Invalid as err:
            err.path.append(f"[{_failing_index(ienc, value)}]")
            raise

    def dec(raw: Any) -> Any:
        if type(raw) is not list:
            raise _Invalid("field_type", f"expected an array ({name}), got {_kind(raw)}")
        try:
            items = [idec(x) for x in raw]
        except _Invalid as err:
            err.path.append(f"[{_failing_index(idec, raw)}]")
            raise
        return items if build is list else build(items)

    return _Field(enc, dec, f"{name}[{item.desc}{', ...' if build is tuple else ''}]")


def _set(item: _Field, build: type) -> _Field:
    """frozenset[X] or set[X]: an array; decode builds `build`."""
    ienc, idec = item.enc, item.dec
    name = build.__name__

    def enc(value: Any) -> Any:
        if not isinstance(value, (set, frozenset)):
            raise _Invalid("field_type", f"expected a {name}, got {_kind(value)}")
        try:
            return [ienc(x) for x in value]
        except _Invalid as err:
            err.path.append("[item]")
            raise

    def dec(raw: Any) -> Any:
        if type(raw) is not list:
            raise _Invalid("field_type", f"expected an array ({name}), got {_kind(raw)}")
        try:
            return build([idec(x) for x in raw])
        except _Invalid as err:
            err.path.append(f"[{_failing_index(idec, raw)}]")
            raise
        except TypeError:
            raise _Invalid("field_type", f"a {name} holds an unhashable item: {_kind(raw)}") from None

    return _Field(enc, dec, f"{name}[{item.desc}]")


def _fixed_tuple(items: list[_Field]) -> _Field:
    """tuple[X, Y, ...]: an array of exactly that many items."""
    encs = [f.enc for f in items]
    decs = [f.dec for f in items]
    n = len(items)

    def enc(value: Any) -> Any:
        if not isinstance(value, (list, tuple)) or len(value) != n:
            raise _Invalid("field_type", f"expected a tuple of {n} items, got {_kind(value)}")
        out = []
        for i, (e, x) in enumerate(zip(encs, value)):
            try:
                out.append(e(x))
            except _Invalid as err:
                err.path.append(f"[{i}]")
                raise
        return out

    def dec(raw: Any) -> Any:
        if type(raw) is not list or len(raw) != n:
            raise _Invalid("field_type", f"expected an array of {n} items, got {_kind(raw)}")
        out = []
        for i, (d, x) in enumerate(zip(decs, raw)):
            try:
                out.append(d(x))
            except _Invalid as err:
                err.path.append(f"[{i}]")
                raise
        return tuple(out)

    return _Field(enc, dec, f"tuple[{', '.join(f.desc for f in items)}]")


def _dict(key: _Field, val: _Field) -> _Field:
    kenc, kdec, venc, vdec = key.enc, key.dec, val.enc, val.dec

    def enc(value: Any) -> Any:
        if not isinstance(value, dict):
            raise _Invalid("field_type", f"expected a dict, got {_kind(value)}")
        out = {}
        for k, v in value.items():
            try:
                out[kenc(k)] = venc(v)
            except _Invalid as err:
                err.path.append(f"[{k!r:.40}]")
                raise
        return out

    def dec(raw: Any) -> Any:
        if type(raw) is not dict:
            raise _Invalid("field_type", f"expected a map, got {_kind(raw)}")
        out = {}
        for k, v in raw.items():
            try:
                out[kdec(k)] = vdec(v)
            except _Invalid as err:
                err.path.append(f"[{k!r:.40}]")
                raise
        return out

    return _Field(enc, dec, f"dict[{key.desc}, {val.desc}]")


def _value_column() -> _Field:
    """list[Any], a column of user values (DataBatch keys and values): msgpack packs and unpacks it in C.

    No per-item work in Python: the codec's packer already refuses what is not
    a user value, and everything msgpack decodes is one.
    """

    def enc(value: Any) -> Any:
        if type(value) is not list:
            raise _Invalid("field_type", f"expected a list of values, got {_kind(value)}")
        return value

    def dec(raw: Any) -> Any:
        if type(raw) is not list:
            raise _Invalid("field_type", f"expected an array of values, got {_kind(raw)}")
        return raw

    return _Field(enc, dec, "list[value]")


def _default_to_address(mailbox: Any) -> Address:
    address = getattr(mailbox, "address", None)
    if type(address) is Address:
        return address
    raise TypeError(
        f"{type(mailbox).__name__} is not a mailbox the wire can name; build the codec with "
        "WireCodec(to_address=...) mapping it to an Address (e.g. ActorRef -> Address('w3', 'spu-17'))"
    )


class WireCodec:
    """Encodes and decodes the messages of esault.messages; one per process (or endpoint).

    `to_address(mailbox) -> Address` names a mailbox found in a message field
    (an ActorRef, say); `from_address(address) -> Mailbox` turns a received
    address back into something to tell (a local ActorRef, a RemoteMailbox).
    An `Address` in a mailbox field is sent as is, without calling
    `to_address`. Defaults: objects with an ``address`` attribute
    (RemoteMailbox) are named by it; received addresses stay `Address`.

    Thread-safe: the hooks are the only state; they run in the calling thread.
    `encode` raises SerializationError naming the field; `decode` raises
    FrameError and nothing else.
    """

    def __init__(
        self,
        to_address: Callable[[Any], Address] | None = None,
        from_address: Callable[[Address], Any] | None = None,
        max_frame_bytes: int | None = None,
    ) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._to_address = to_address or _default_to_address
        self._from_address = from_address or _identity
        self._encoders: dict[type, Callable[[Any], list[Any]]] = {}
        self._decoders: dict[int, Callable[[list[Any]], Any]] = {}
        self._descs: dict[type, tuple[str, ...]] = {}
        self._dynamic_hook = self._make_dynamic_hook()
        for cls in _CLASSES:
            fields = self._compile_fields(cls)
            self._descs[cls] = tuple(f"{name}: {fld.desc}" for name, fld in fields)
            if cls not in LOCAL_ONLY:
                self._encoders[cls] = self._message_encoder(TAGS[cls], fields)
                self._decoders[TAGS[cls]] = self._message_decoder(cls, fields)

    # --- public ------------------------------------------------------------

    def encode(self, message: Any) -> bytes:
        """One frame for `message`; SerializationError names the class, field and offending value."""
        cls = type(message)
        encoder = self._encoders.get(cls)
        if encoder is None:
            raise SerializationError(self._why_not_encodable(cls))
        try:
            body = encoder(message)
        except _Invalid as err:
            raise SerializationError(f"cannot send {cls.__name__}{err.where()}: {err.detail}") from None
        try:
            return _pack(body)
        except (TypeError, ValueError, OverflowError) as exc:
            raise SerializationError(self._diagnose(message, body, exc)) from None

    def decode(self, frame: bytes) -> Any:
        """The message in `frame`; FrameError (reason: FRAME_ERROR_REASONS) for anything malformed."""
        if not isinstance(frame, (bytes, bytearray, memoryview)):
            raise _frame_error("not_bytes", f"a frame must be bytes, got {type(frame).__name__}")
        size = len(frame)
        if self.max_frame_bytes is not None and size > self.max_frame_bytes:
            raise _frame_error("too_large", f"a frame of {size} bytes is over max_frame_bytes={self.max_frame_bytes}")
        try:
            raw = _unpack_with(frame, _value_ext_hook)
        except _Invalid as err:
            raise _frame_error(err.reason, f"malformed frame ({size} bytes): {err.detail}") from None
        except msgpack.ExtraData:
            raise _frame_error("trailing_bytes", f"malformed frame ({size} bytes): bytes after the message") from None
        except (msgpack.StackError, RecursionError):
            raise _frame_error("too_deep", f"malformed frame ({size} bytes): nested too deeply") from None
        except ValueError as exc:
            text = str(exc)
            # More items than the cap allows is too_large; a length beyond the bytes left is a truncated frame.
            reason = ("too_large" if f"({_codec.MAX_ARRAY_ITEMS})" in text
                      else "truncated" if ("incomplete" in text or "exceeds max_" in text) else "malformed")
            raise _frame_error(reason, f"malformed frame ({size} bytes): {reason}: {text[:120]}") from None
        except Exception as exc:  # noqa: BLE001 - msgpack raises TypeError for an unhashable map key...
            raise _frame_error("malformed", f"malformed frame ({size} bytes): {type(exc).__name__}: {exc}"[:200]) from None
        if type(raw) is not list or not raw or type(raw[0]) is not int:
            raise _frame_error("not_a_frame", f"not a message frame: expected [tag, fields...], got {_kind(raw)}")
        tag = raw[0]
        decoder = self._decoders.get(tag)
        if decoder is None:
            cls = MESSAGE_TYPES.get(tag)
            if cls is not None:
                raise _frame_error("local_only", f"tag {tag} ({cls.__name__}) never crosses processes")
            raise _frame_error("unknown_tag", f"unknown message tag {tag} (known: 1..{max(MESSAGE_TYPES)}, "
                                              f"retired: {', '.join(map(str, RETIRED_TAGS))})")
        name = MESSAGE_TYPES[tag].__name__
        try:
            return decoder(raw)
        except _Invalid as err:
            raise _frame_error(err.reason, f"{name}{err.where()}: {err.detail}") from None
        except RecursionError:
            raise _frame_error("too_deep", f"{name}: nested too deeply") from None
        except Exception as exc:  # noqa: BLE001 - the backstop: decode raises FrameError, nothing else
            raise _frame_error("field_type", f"{name}: rejected: {type(exc).__name__}: {exc}"[:200]) from None

    def describe(self) -> list[tuple[int, str, tuple[str, ...]]]:
        """(tag, class name, ("field: wire type", ...)) for every message, in tag order."""
        return [(TAGS[cls], cls.__name__, self._descs[cls]) for cls in _CLASSES]

    # --- compilation (once per codec) ----------------------------------------

    def _compile_fields(self, cls: type) -> list[tuple[str, _Field]]:
        return [(name, self._compile(hint, f"{cls.__name__}.{name}")) for name, hint in _hints(cls).items()]

    def _compile(self, hint: Any, where: str) -> _Field:
        if hint is Any:
            return _Field(_identity, _identity, "value")
        if hint is Mailbox:
            return self._mailbox_field()
        if hint is _MailboxOrValue:
            return self._dynamic_field()
        if hint is Future:
            return _Field(_identity, _identity, "Future (local only)")
        if hint is type(None):
            return _none_field()
        if hint in (int, float, str, bytes, bool):
            return _scalar(hint)
        if isinstance(hint, type) and hint in TAGS:
            return self._nested(hint)
        origin, args = typing.get_origin(hint), typing.get_args(hint)
        if origin in (types.UnionType, typing.Union):
            rest = [a for a in args if a is not type(None)]
            if len(rest) == 1 and len(args) == 2:
                return _optional(self._compile(rest[0], where))
        elif origin is list and args == (Any,):
            return _value_column()
        elif origin is list and len(args) == 1:
            return _sequence(self._compile(args[0], where), list)
        elif origin is tuple and len(args) == 2 and args[1] is Ellipsis:
            return _sequence(self._compile(args[0], where), tuple)
        elif origin is tuple and args:
            return _fixed_tuple([self._compile(a, where) for a in args])
        elif origin in (frozenset, set) and len(args) == 1:
            return _set(self._compile(args[0], where), origin)
        elif origin is dict and len(args) == 2:
            return _dict(self._compile(args[0], where), self._compile(args[1], where))
        raise ImportError(
            f"esault.transport.wire cannot encode {where}: annotation {hint!r} is not a wire type "
            "(int, float, str, bytes, bool, None, X | None, list/tuple/frozenset/dict of those, a message "
            "dataclass, Mailbox or Any); change the annotation or teach wire._compile the type"
        )

    def _nested(self, cls: type) -> _Field:
        if cls in LOCAL_ONLY:
            raise ImportError(f"{cls.__name__} holds a Future and cannot be nested in another message")
        fields = self._compile_fields(cls)
        names = [name for name, _ in fields]
        encs = [fld.enc for _, fld in fields]
        decs = [fld.dec for _, fld in fields]
        n = len(fields)

        def enc(value: Any) -> Any:
            if type(value) is not cls:
                raise _Invalid("field_type", f"expected a {cls.__name__}, got {_kind(value)}")
            out = []
            for name, e in zip(names, encs):
                try:
                    out.append(e(getattr(value, name)))
                except _Invalid as err:
                    err.path.append(f".{name}")
                    raise
            return out

        def dec(raw: Any) -> Any:
            if type(raw) is not list or len(raw) != n:
                raise _Invalid("field_type", f"expected a {cls.__name__} as an array of {n} fields, got {_kind(raw)}")
            args = []
            for name, d, x in zip(names, decs, raw):
                try:
                    args.append(d(x))
                except _Invalid as err:
                    err.path.append(f".{name}")
                    raise
            return cls(*args)

        return _Field(enc, dec, cls.__name__)

    def _message_encoder(self, tag: int, fields: list[tuple[str, _Field]]) -> Callable[[Any], list[Any]]:
        pairs = [(name, fld.enc) for name, fld in fields]

        def encode(message: Any) -> list[Any]:
            out: list[Any] = [tag]
            for name, e in pairs:
                try:
                    out.append(e(getattr(message, name)))
                except _Invalid as err:
                    err.path.append(f".{name}")
                    raise
            return out

        return encode

    def _message_decoder(self, cls: type, fields: list[tuple[str, _Field]]) -> Callable[[list[Any]], Any]:
        names = [name for name, _ in fields]
        decs = [fld.dec for _, fld in fields]
        n = len(fields)

        def decode(raw: list[Any]) -> Any:
            if len(raw) != n + 1:
                raise _Invalid("field_count", f"expected {n} fields ({', '.join(names) or 'none'}), got {len(raw) - 1}")
            args = []
            for i, (name, d) in enumerate(zip(names, decs), start=1):
                try:
                    args.append(d(raw[i]))
                except _Invalid as err:
                    err.path.append(f".{name}")
                    raise
            return cls(*args)

        return decode

    # --- mailboxes ---------------------------------------------------------

    def _address_of(self, mailbox: Any) -> Address:
        if type(mailbox) is Address:
            return mailbox
        try:
            address = self._to_address(mailbox)
        except Exception as exc:  # noqa: BLE001
            raise _Invalid("field_type", f"to_address({mailbox!r:.80}) failed: {type(exc).__name__}: {exc}") from None
        if type(address) is not Address:
            raise _Invalid("field_type", f"to_address({mailbox!r:.80}) returned {_kind(address)}, not an Address")
        return address

    def _mailbox_of(self, process: Any, actor: Any) -> Any:
        try:
            address = Address(process, actor)
        except ValueError as exc:
            raise _Invalid("field_type", str(exc)) from None
        try:
            return self._from_address(address)
        except Exception as exc:  # noqa: BLE001
            raise _Invalid("address", f"from_address({address}) failed: {type(exc).__name__}: {exc}") from None

    def _mailbox_field(self) -> _Field:
        def enc(value: Any) -> Any:
            address = self._address_of(value)
            return [address.process, address.actor]

        def dec(raw: Any) -> Any:
            if type(raw) is not list or len(raw) != 2:
                raise _Invalid("field_type", f"expected a mailbox address [process, actor], got {_kind(raw)}")
            return self._mailbox_of(raw[0], raw[1])

        return _Field(enc, dec, "Mailbox")

    def _dynamic_field(self) -> _Field:
        """A codec value that may hold mailboxes: packed on its own (bin), mailboxes as ext 16."""

        def default(obj: Any) -> Any:
            if isinstance(obj, tuple):
                return msgpack.ExtType(_EXT_TUPLE, pack(list(obj)))
            if isinstance(obj, frozenset):
                return msgpack.ExtType(_EXT_FROZENSET, pack(list(obj)))
            if isinstance(obj, set):
                return msgpack.ExtType(_EXT_SET, pack(list(obj)))
            address = self._address_of(obj)
            return msgpack.ExtType(_EXT_ADDRESS, msgpack.packb([address.process, address.actor]))

        def pack(value: Any) -> bytes:
            return msgpack.packb(value, use_bin_type=True, strict_types=True, default=default)

        def enc(value: Any) -> Any:
            try:
                return pack(value)
            except (TypeError, ValueError, OverflowError) as exc:
                raise _Invalid("field_type", f"cannot encode {_codec._describe_bad(value) or exc}") from None

        def dec(raw: Any) -> Any:
            if type(raw) is not bytes:
                raise _Invalid("field_type", f"expected a packed value (bin), got {_kind(raw)}")
            try:
                return _unpack_with(raw, self._dynamic_hook)
            except _Invalid:
                raise
            except (msgpack.StackError, RecursionError):
                raise _Invalid("too_deep", "a packed value nested too deeply") from None
            except Exception as exc:  # noqa: BLE001
                raise _Invalid("field_type", f"a bad packed value: {type(exc).__name__}: {exc}"[:160]) from None

        return _Field(enc, dec, "value+mailboxes")

    def _make_dynamic_hook(self) -> Callable[[int, bytes], Any]:
        def hook(code: int, data: bytes) -> Any:
            if code in (_EXT_TUPLE, _EXT_SET, _EXT_FROZENSET):
                return _build_collection(code, _unpack_with(data, hook))
            if code == _EXT_ADDRESS:
                raw = _unpack_with(data, _value_ext_hook)
                if type(raw) is not list or len(raw) != 2:
                    raise _Invalid("field_type", f"an address must be [process, actor], got {_kind(raw)}")
                return self._mailbox_of(raw[0], raw[1])
            raise _Invalid("field_type", f"unknown msgpack ext type {code} in a value")

        return hook

    # --- error messages ------------------------------------------------------

    def _why_not_encodable(self, cls: type) -> str:
        if cls in LOCAL_ONLY:
            future = next((name for name, hint in _hints(cls).items() if hint is Future), None)
            if future is None:
                return (f"cannot send {cls.__name__} to another process: timer messages stay in their process "
                        "(each process's timers run on its own clock)")
            return (
                f"cannot send {cls.__name__} to another process: field {future!r} is a "
                "concurrent.futures.Future, and futures never cross processes. "
                f"{cls.__name__} is a local message (coordinator -> unit, in the driver): tell it to a local "
                "ActorRef, or answer with a message (ScaleResult) instead of a future"
            )
        return (
            f"cannot send a {cls.__name__}: only the message dataclasses of esault.messages "
            f"cross processes ({', '.join(c.__name__ for c in _CLASSES if c not in LOCAL_ONLY)})"
        )

    def _diagnose(self, message: Any, body: list[Any], exc: Exception) -> str:
        """Error path: find the field (and item) holding the value msgpack refused."""
        cls = type(message)
        for name, value in zip(_hints(cls), body[1:]):
            bad = _codec._describe_bad(value)
            if bad is None:
                continue
            where = f".{name}"
            if isinstance(value, list):
                where += next((f"[{i}]" for i, item in enumerate(value) if _codec._describe_bad(item)), "")
            return (
                f"cannot send {cls.__name__}{where}: cannot encode {bad}; user keys, values and state must be "
                "str, int (64-bit), float, bytes, bool, None, or list/tuple/set/frozenset/dict of those"
            )
        return f"cannot send {cls.__name__}: {type(exc).__name__}: {exc}"


_DEFAULT = WireCodec()


def encode_frame(message: Any) -> bytes:
    """Encode with the default hooks (mailbox fields must hold an Address or a RemoteMailbox)."""
    return _DEFAULT.encode(message)


def decode_frame(frame: bytes) -> Any:
    """Decode with the default hooks (mailbox fields decode to Address); raises only FrameError."""
    return _DEFAULT.decode(frame)


def describe() -> list[tuple[int, str, tuple[str, ...]]]:
    """The wire schema: (tag, class, ("field: wire type", ...)) in tag order (docs/TRANSPORT.md)."""
    return _DEFAULT.describe()
