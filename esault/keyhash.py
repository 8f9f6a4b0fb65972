"""The stable key hash onto [0, KEY_SPACE_MAX].

Routing must agree across processes and runs, so this never uses the built-in
hash() (salted per process for str/bytes). str keys hash their UTF-8 bytes;
other keys hash their msgpack encoding (ints, bytes, tuples of those...).
"""

from __future__ import annotations

from typing import Any

import msgpack
import xxhash

KEY_SPACE_MAX = 2**31 - 1
"""The largest key hash: the paper's INT_MAX. Hashes lie in [0, KEY_SPACE_MAX]."""

_xxh64 = xxhash.xxh64_intdigest
_pack = msgpack.Packer(use_bin_type=True).pack


def key_hash(key: Any) -> int:
    """Map a key onto [0, KEY_SPACE_MAX]; equal keys hash equally everywhere. O(len(key))."""
    if type(key) is str:
        return _xxh64(key.encode("utf-8", "surrogatepass")) & KEY_SPACE_MAX
    if type(key) is bytes:
        return _xxh64(b"\x00b" + key) & KEY_SPACE_MAX
    try:
        return _xxh64(b"\x00m" + _pack(key)) & KEY_SPACE_MAX
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"key {key!r} of type {type(key).__name__} cannot be hashed for routing: "
            "use str, bytes, int, float, bool, None or tuples/lists of those"
        ) from exc
