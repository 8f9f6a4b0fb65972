"""Starting many SPUs as one: every start sent before any is awaited, each one's failure its own.

A rollback relaunches every SPU of a job and a job starts all of its own: waiting for each answer before the
next start made N SPUs cost N round trips. Both launchers (the worker processes', the in-process one) start
a batch through `in_two_phases`.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, TypeVar

__all__ = ["in_two_phases"]

Item = TypeVar("Item")


def in_two_phases(items: Iterable[Item], send: Callable[[Item], Any], wait: Callable[[Any], Any]) -> list[Any]:
    """`send(item)` for every item, then `wait(what send returned)` for each, in order. Each item of the
    result: what its wait returned, or the exception its send or wait raised (the others go on)."""
    sent: list[Any] = []
    for item in items:
        try:
            sent.append(send(item))
        except Exception as exc:  # noqa: BLE001 - this item's failure
            sent.append(exc)
    out: list[Any] = []
    for pending in sent:
        if isinstance(pending, Exception):
            out.append(pending)
            continue
        try:
            out.append(wait(pending))
        except Exception as exc:  # noqa: BLE001 - as above
            out.append(exc)
    return out
