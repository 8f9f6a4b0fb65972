"""What the PE table's stamps say is dirty, as a set: the tests' view of a checkpoint's dirty keys.

A checkpoint takes PeManager.end_period()'s list as it is (a key may repeat, or its PE have left since);
these tests compare sets, so this keeps the keys whose PE is still here (one that expired is in its parked
state, one that moved away is the receiver's to save)."""

from __future__ import annotations

from typing import Any


def touched_keys(pes: Any) -> set[Any]:
    """end_period() as a set of the keys whose PE is still here; an empty set when the table takes no
    checkpoints."""
    if pes.period is None:
        return set()
    keys = set(pes.end_period())
    return {key for key in keys if pes.get(key) is not None}
