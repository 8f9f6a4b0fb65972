"""msgpack encoding of user values and PE state: never pickle, never from a socket.

Types survive a round trip: lists stay lists, tuples stay tuples (ext 1), sets
and frozensets stay sets (ext 2, 3), dicts stay dicts. A value outside these
types is refused with an error naming its type.
"""

from __future__ import annotations

from typing import Any, Callable

import msgpack

from esault.errors import FrameError, SerializationError

_SIMPLE = frozenset({str, int, float, bytes, bool, type(None)})
_EXT_TUPLE, _EXT_SET, _EXT_FROZENSET = 1, 2, 3


def _default(obj: Any) -> Any:
    if isinstance(obj, tuple):
        return msgpack.ExtType(_EXT_TUPLE, _pack(list(obj)))
    if isinstance(obj, frozenset):
        return msgpack.ExtType(_EXT_FROZENSET, _pack(list(obj)))
    if isinstance(obj, set):
        return msgpack.ExtType(_EXT_SET, _pack(list(obj)))
    raise TypeError(f"type {type(obj).__name__}")


def _pack(value: Any) -> bytes:
    return msgpack.packb(value, use_bin_type=True, strict_types=True, default=_default)


def _ext_hook(code: int, data: bytes) -> Any:
    items = _unpack(data)
    if code == _EXT_TUPLE:
        return tuple(items)
    if code == _EXT_SET:
        return set(items)
    if code == _EXT_FROZENSET:
        return frozenset(items)
    return msgpack.ExtType(code, data)


def _unpack(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False, use_list=True, ext_hook=_ext_hook, strict_map_key=False,
                           **unpack_limits(len(data)))


def check_serialisable(value: Any) -> None:
    """Raise TypeError naming the offending type if `value` cannot cross a process boundary."""
    if type(value) in _SIMPLE:
        return
    try:
        _pack(value)
    except (TypeError, ValueError, OverflowError) as exc:
        raise TypeError(_describe_bad(value) or str(exc)) from None


def _describe_bad(value: Any, depth: int = 0) -> str | None:
    if depth > 50:
        return "nesting deeper than 50 levels"
    if type(value) in _SIMPLE:
        if type(value) is int and not -(2**63) <= value < 2**64:
            return "an int outside the 64-bit range"
        return None
    if isinstance(value, (list, tuple, set, frozenset)):
        for item in value:
            bad = _describe_bad(item, depth + 1)
            if bad:
                return bad
        return None
    if isinstance(value, dict):
        for k, v in value.items():
            bad = _describe_bad(k, depth + 1) or _describe_bad(v, depth + 1)
            if bad:
                return bad
        return None
    return f"type {type(value).__name__}"


def unencodable_part(value: Any) -> tuple[str, str] | None:
    """Where in `value` the first part msgpack cannot encode is, and what it is; None if all of it can.

    `where` is an index path from `value` (``"['path']"``, ``"['counts'][2]"``; ``""`` for `value`
    itself), `what` a type name or a limit (``"PosixPath"``, ``"an int outside the 64-bit range"``).
    O(size of value); for error messages only, never on the hot path.
    """
    return _find_bad(value, "", 0)


def _find_bad(value: Any, where: str, depth: int) -> tuple[str, str] | None:
    if depth > 50:
        return where, "nesting deeper than 50 levels"
    if type(value) in _SIMPLE:
        if type(value) is int and not -(2**63) <= value < 2**64:
            return where, "an int outside the 64-bit range"
        return None
    if type(value) is list or isinstance(value, tuple):  # strict types: a list or dict subclass is refused
        for i, item in enumerate(value):
            bad = _find_bad(item, f"{where}[{i}]", depth + 1)
            if bad:
                return bad
        return None
    if isinstance(value, (set, frozenset)):
        for item in value:
            bad = _find_bad(item, f"{where} (an item of the set)", depth + 1)
            if bad:
                return bad
        return None
    if type(value) is dict:
        for k, v in value.items():
            bad = _find_bad(k, f"{where} (a dict key)", depth + 1) or _find_bad(v, f"{where}[{k!r}]", depth + 1)
            if bad:
                return bad
        return None
    return where, type(value).__name__


def encode(value: Any) -> bytes:
    """Encode a user value or PE state; SerializationError names what could not be encoded."""
    try:
        return _pack(value)
    except (TypeError, ValueError, OverflowError) as exc:
        raise SerializationError(f"cannot encode {_describe_bad(value) or exc}") from None


def encoder() -> Callable[[Any], bytes]:
    """encode() for many values in a row, on one thread: one msgpack Packer reused (its buffer stays
    grown), about twice as fast for a checkpoint's many small rows. Not thread-safe: one per caller."""
    pack = raw_encoder()

    def encode_one(value: Any) -> bytes:
        try:
            return pack(value)
        except (TypeError, ValueError, OverflowError) as exc:
            raise SerializationError(f"cannot encode {_describe_bad(value) or exc}") from None

    return encode_one


def raw_encoder() -> Callable[[Any], bytes]:
    """encoder() without its error wrapper: a reused Packer's own pack, one C call per value. It raises
    msgpack's TypeError, ValueError or OverflowError: for a hot loop that sends what it refuses down a
    careful path using encoder(). Not thread-safe: one per caller."""
    return msgpack.Packer(use_bin_type=True, strict_types=True, default=_default, autoreset=True).pack


def array_header(length: int) -> bytes:
    """The msgpack header of an array of `length` items: followed by the items' encodings, it is their
    list's encoding (a checkpoint row built from entries packed one by one)."""
    return msgpack.Packer(autoreset=True).pack_array_header(length)


def decode(data: bytes) -> Any:
    """Decode what encode() produced; FrameError if the bytes are not a valid frame."""
    try:
        return _unpack(data)
    except (msgpack.UnpackException, ValueError, TypeError) as exc:
        raise FrameError(f"malformed msgpack frame ({len(data)} bytes): {exc}") from None


MAX_ARRAY_ITEMS = 1 << 22
"""Most items one msgpack array (or map) in a received frame may declare: far above a data batch."""


def unpack_limits(size: int) -> dict[str, int]:
    """Explicit msgpack limits for decoding `size` bytes: nothing may declare more than the bytes
    that carry it, and no array or map more than MAX_ARRAY_ITEMS items."""
    return {"max_str_len": size, "max_bin_len": size, "max_ext_len": size,
            "max_array_len": min(size, MAX_ARRAY_ITEMS), "max_map_len": min(size // 2, MAX_ARRAY_ITEMS)}
