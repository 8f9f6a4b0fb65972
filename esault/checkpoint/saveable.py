"""Saveable state: encode what a checkpoint or a key's move must keep, or say exactly what cannot be kept.

One place for every kind of state a checkpoint holds: a key's PE state, the
state of a bolt instance that is not key grouped (or of a chained stage), a
join chain SPU's state, and a spout's position. A value msgpack cannot encode
becomes an `UnsaveableState` naming its owner, the attribute (or the index
path inside it), its type, and the fix. What follows is the SPU's policy
(`SenderActor.state_lost`): under exactly_once the job fails. Pure: no actors.
"""

from __future__ import annotations

from typing import Any

from esault.errors import SerializationError, UnsaveableState
from esault.transport.codec import encode, unencodable_part

__all__ = ["CHAIN_FIX", "PE_FIX", "POSITION_FIX", "encode_key", "encode_state", "key_owner", "unsaveable", "unsaveable_hook"]

PE_FIX = ("keep the attributes to str, bytes, int, float, bool, None and lists, tuples, sets or dicts of those "
          "(a path as str(path), an object as a dict of its fields), or override snapshot_state() and "
          "restore_state() to save only what the state needs (leave out files, locks and connections: open() "
          "makes them again)")
"""The fix for a bolt's state (a PE's or an instance's): its attributes are its state."""

POSITION_FIX = ("return an offset, an index, a str, or a list or dict of those from snapshot_position(), and "
                "rebuild anything else in restore_position()")
"""The fix for a spout's position."""

CHAIN_FIX = ("a join chain keeps the tuples it has yet to join: send it keys and values of str, bytes, int, "
             "float, bool, None and lists, tuples, sets or dicts of those")
"""The fix for a join chain's state."""


def key_owner(unit: str, key: Any) -> str:
    """The owner phrase of one key's PE state."""
    return f"bolt {unit!r} cannot save the state of key {key!r}"


def encode_key(key: Any, unit: str) -> bytes:
    """msgpack of a PE's key (its state is stored under it); UnsaveableState if the key itself cannot be."""
    try:
        return encode(key)
    except SerializationError:
        where, what = unencodable_part(key) or ("", type(key).__name__)
        at = f" at {where.strip()}" if where else ""
        raise UnsaveableState(
            f"{key_owner(unit, key)}: the key itself holds {_a(what)}{at}, which msgpack cannot encode; emit "
            "keys of str, bytes, int (64-bit), float, bool, None or tuples of those") from None


def encode_state(state: Any, owner: str, fix: str = PE_FIX) -> bytes:
    """msgpack of `state`; UnsaveableState (`owner`: what could not be saved, e.g. key_owner()) if it cannot be."""
    try:
        return encode(state)
    except SerializationError:
        raise unsaveable(owner, state, fix) from None


def unsaveable(owner: str, state: Any, fix: str = PE_FIX) -> UnsaveableState:
    """The error for a `state` that cannot be encoded: which attribute (or index path), which type, the fix."""
    if type(state) is dict and fix is not POSITION_FIX:  # a bolt's state: its entries are its attributes
        for name, value in state.items():
            bad = unencodable_part(value)
            if bad is not None:
                label = f"attribute {name!r}" if isinstance(name, str) else f"entry {name!r}"
                where, what = bad
                held = f"is {_a(what)}" if not where else f"holds {_a(what)} at [{name!r}]{where}"
                return UnsaveableState(f"{owner}: {label} {held}, which msgpack cannot encode; {fix}")
    bad = unencodable_part(state)
    if bad is None:  # encode() refused it for a reason the walk does not see: say what msgpack said
        return UnsaveableState(f"{owner}: a {type(state).__name__} msgpack cannot encode; {fix}")
    where, what = bad
    subject = "snapshot_position() returned" if fix is POSITION_FIX else "the state is"
    holding = f"a {type(state).__name__} holding {_a(what)} at {where.strip()}"
    held = f"{subject} {_a(what)}" if not where else f"{subject} {holding}"
    return UnsaveableState(f"{owner}: {held}, which msgpack cannot encode; {fix}")


def _a(what: str) -> str:
    """"a PosixPath", "an object"; a limit ("an int outside ...", "nesting deeper ...") as it is."""
    if what.startswith(("an ", "a ", "nesting")):
        return what
    return f"an {what}" if what[:1].lower() in "aeiou" else f"a {what}"


def unsaveable_hook(owner: str, hook: str, exc: BaseException, fix: str = PE_FIX) -> UnsaveableState:
    """The error for a snapshot hook (snapshot_state(), snapshot_position()) that raised."""
    return UnsaveableState(f"{owner}: {hook} raised {type(exc).__name__}: {exc}; fix {hook}, or {fix}")
