"""What the PE table's stamps say is dirty, as a set: the tests' view of a checkpoint's dirty keys.

A checkpoint takes PeManager.end_period()'s list of PEs as it is and encodes those still stamped with the
ended period (a PE that expired is in its parked state, one that moved away is the receiver's to save: both
lose the stamp as they leave); these tests compare sets of their keys."""

from __future__ import annotations

from typing import Any


def touched_keys(pes: Any) -> set[Any]:
    """The keys of end_period()'s PEs that still hold the ended period's change; an empty set when the table
    takes no checkpoints. Each such PE is asserted to be the one the table holds for its key."""
    if pes.period is None:
        return set()
    dirty = [pe for pe in pes.end_period() if pe._esault_mark is pes.last_period]
    for pe in dirty:
        assert pes.get(pe.key) is pe, f"a listed PE of key {pe.key!r} still stamped is not the table's"
        pe._esault_mark = None  # encoded, as the snapshot does
    keys = [pe.key for pe in dirty]
    assert len(keys) == len(set(keys)), f"a key is listed twice with its stamp: {keys}"
    return set(keys)
