"""A hand-off's chunk of moved keys' states on the wire (StateHandoff.states).

The pairs travel as one msgpack array [key, state, key, state, ...], each
state already msgpack bytes: the frame then holds one bytes field, packed and
unpacked in one C call each. As a list of tuples each pair went through the
codec's tuple extension, ~1 us a key on each side, on the moved keys' pause
(docs/PERFORMANCE.md, "Reconfiguration at 70% load").
"""

from __future__ import annotations

from typing import Any

from esault.transport.codec import decode, encode


def pack_states(pairs: list[tuple[Any, bytes]]) -> bytes:
    """(key, encoded state) pairs as StateHandoff carries them."""
    flat: list[Any] = []
    for key, blob in pairs:
        flat += (key, blob)
    return encode(flat)


def unpack_states(packed: bytes) -> dict[Any, bytes]:
    """The pairs pack_states() packed, key -> encoded state; ValueError saying what is wrong when `packed` is
    not that (a frame is never trusted)."""
    try:
        flat = decode(packed)
    except Exception as exc:  # noqa: BLE001 - whatever the bytes are, the answer is the same
        raise ValueError(f"its states are not msgpack ({exc})") from None
    if type(flat) is not list or len(flat) % 2:
        raise ValueError("its states are not a [key, state, key, state, ...] array")
    keys, blobs = flat[0::2], flat[1::2]
    if any(type(blob) is not bytes for blob in blobs):
        raise ValueError("a state in it is not encoded bytes")
    try:
        return dict(zip(keys, blobs))
    except TypeError:  # a list, say, or a tuple holding one
        bad = next(key for key in keys if not _usable_as_key(key))
        raise ValueError(f"a key in it cannot be a key: {bad!r}") from None


def _usable_as_key(key: Any) -> bool:
    try:
        {key: None}
    except TypeError:
        return False
    return True
