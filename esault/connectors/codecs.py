"""Codecs: how a connector turns a record's key or value bytes into a tuple's, and back, chosen by name.

Named codecs: "bytes" (as is), "utf-8" (str), "json", "msgpack". A user's codec
is named by import path, "package.module:name" (or "package.module.name"): an
object, or a class made with no arguments, with decode(bytes) -> value and
encode(value) -> bytes. A record without a key (or a tombstone's value) is
None and never reaches a codec.
"""

from __future__ import annotations

import importlib
import json
from typing import Any, Protocol

import msgpack

from esault.errors import ConnectorError

__all__ = ["Codec", "NAMED", "resolve_codec"]


class Codec(Protocol):
    """decode() and encode() one value; a codec may add decode_many(list of bytes) -> list of values, the
    same as decode() of each (KafkaSource decodes a fetched run with it; an exception there makes it decode
    that run one by one, so a poison record is still found and dead-lettered alone)."""

    def decode(self, data: bytes) -> Any: ...

    def encode(self, value: Any) -> bytes: ...


class BytesCodec:
    name = "bytes"

    def decode(self, data: bytes) -> bytes:
        return data

    def decode_many(self, items: list[bytes]) -> list[bytes]:
        return items

    def encode(self, value: Any) -> bytes:
        if isinstance(value, (bytes, bytearray)):
            return bytes(value)
        raise TypeError(f"codec 'bytes' encodes bytes, got {type(value).__name__} {value!r:.60}; "
                        "choose 'utf-8', 'json' or 'msgpack' for other values")


class Utf8Codec:
    name = "utf-8"

    def decode(self, data: bytes) -> str:
        return data.decode("utf-8")

    def decode_many(self, items: list[bytes]) -> list[str]:
        return list(map(bytes.decode, items))  # utf-8, strict: decode() of each, without a call frame per item

    def encode(self, value: Any) -> bytes:
        if isinstance(value, str):
            return value.encode("utf-8")
        if isinstance(value, (bytes, bytearray)):
            return bytes(value)
        raise TypeError(f"codec 'utf-8' encodes str, got {type(value).__name__} {value!r:.60}; "
                        "choose 'json' or 'msgpack' for other values")


class JsonCodec:
    name = "json"

    def decode(self, data: bytes) -> Any:
        return json.loads(data)

    def decode_many(self, items: list[bytes]) -> list[Any]:
        return list(map(json.loads, items))

    def encode(self, value: Any) -> bytes:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


class MsgpackCodec:
    name = "msgpack"

    def decode(self, data: bytes) -> Any:
        return msgpack.unpackb(data, raw=False, strict_map_key=False)

    def encode(self, value: Any) -> bytes:
        return msgpack.packb(value, use_bin_type=True)


NAMED: dict[str, type] = {"bytes": BytesCodec, "utf-8": Utf8Codec, "utf8": Utf8Codec, "json": JsonCodec,
                          "msgpack": MsgpackCodec}


def resolve_codec(spec: Any, what: str) -> Codec:
    """The codec named by `spec` (a name above or an import path); ConnectorError naming `what` otherwise.

    `what` says where the name came from, e.g. "KafkaSource 'orders': param 'value'".
    """
    if not isinstance(spec, str) or not spec:
        raise ConnectorError(f"{what}: a codec is named by a string, got {spec!r}; use one of "
                             f"{', '.join(map(repr, sorted(NAMED)))} or 'package.module:MyCodec'")
    named = NAMED.get(spec.lower())
    if named is not None:
        return named()
    if "." not in spec and ":" not in spec:
        raise ConnectorError(f"{what}: unknown codec {spec!r}; use one of {', '.join(map(repr, sorted(NAMED)))}, "
                             "or a codec of yours by import path, 'package.module:MyCodec'")
    module_name, _, attr = spec.partition(":") if ":" in spec else spec.rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConnectorError(f"{what}: codec {spec!r}: cannot import module {module_name!r} ({exc}); "
                             "check the path, and that the module is importable where the job runs") from None
    obj = getattr(module, attr, None)
    if obj is None:
        raise ConnectorError(f"{what}: codec {spec!r}: module {module_name!r} has no {attr!r}")
    if isinstance(obj, type):
        try:
            obj = obj()
        except Exception as exc:
            raise ConnectorError(f"{what}: codec {spec!r}: {attr}() raised {type(exc).__name__}: {exc}; a codec "
                                 "class must be made with no arguments") from None
    if not (callable(getattr(obj, "decode", None)) and callable(getattr(obj, "encode", None))):
        raise ConnectorError(f"{what}: codec {spec!r} has no decode(bytes) and encode(value) methods; "
                             "give it both")
    return obj
