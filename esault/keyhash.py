"""The stable key hash onto [0, KEY_SPACE_MAX].

Routing must agree across processes and runs, so this never uses Python's
built-in hash, which is salted per process for str and bytes. Keys that Python considers equal
(1, True and 1.0; a str subclass and its str; bytes and bytearray; a tuple and
a list of equal items) hash equally, because they share one PE in an SPU's
key -> PE table and so must be routed to the same SPU.
"""

from __future__ import annotations

from typing import Any

import msgpack
import xxhash

KEY_SPACE_MAX = 2**31 - 1
"""The largest key hash: the paper's INT_MAX. Hashes lie in [0, KEY_SPACE_MAX]."""

_xxh64 = xxhash.xxh64_intdigest
_pack = msgpack.Packer(use_bin_type=True).pack
_INT64 = (-(2**63), 2**64 - 1)


def key_hash(key: Any) -> int:
    """Map a key onto [0, KEY_SPACE_MAX]; equal keys hash equally everywhere. O(len(key))."""
    if type(key) is str:
        return _xxh64(key.encode("utf-8", "surrogatepass")) & KEY_SPACE_MAX
    if isinstance(key, str):
        return key_hash(str(key))
    if isinstance(key, (bytes, bytearray, memoryview)):
        return _xxh64(b"\x00b" + bytes(key)) & KEY_SPACE_MAX
    try:
        return _xxh64(b"\x00m" + _pack(_canonical(key))) & KEY_SPACE_MAX
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"key {key!r} of type {type(key).__name__} cannot be hashed for routing: use str, bytes, "
            f"int, float, bool, None or tuples/lists of those ({exc})"
        ) from None


def _canonical(key: Any) -> Any:
    """One representative per Python equality class of keys."""
    if isinstance(key, bool):
        return int(key)
    if isinstance(key, int):
        if _INT64[0] <= key <= _INT64[1]:
            return int(key)
        return ["\x00bigint", str(int(key))]
    if isinstance(key, float):
        return _canonical(int(key)) if key.is_integer() else key
    if isinstance(key, str):
        return str(key)
    if isinstance(key, (bytes, bytearray, memoryview)):
        return bytes(key)
    if isinstance(key, (tuple, list)):
        return [_canonical(k) for k in key]
    if key is None:
        return None
    raise TypeError(f"unsupported key type {type(key).__name__}")
