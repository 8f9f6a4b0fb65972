"""Test kit for esault users and esault's own tests: conditions, list spouts, collecting bolts."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from typing import Any, Callable, Iterable, TypeVar

from esault.clock import ManualClock
from esault.dsl.bolt import Bolt
from esault.dsl.spout import ReplayingSpout
from esault.dsl.tuple import Tuple

T = TypeVar("T")

__all__ = ["CollectorBolt", "ListSpout", "ManualClock", "WaitTimeout", "collected", "reset_collected", "wait_until"]


class WaitTimeout(AssertionError):
    """wait_until() gave up; the message shows the last value seen."""


def wait_until(predicate: Callable[[], T], timeout: float = 10.0, interval: float = 0.005,
               message: str = "condition") -> T:
    """Poll `predicate` until it returns a truthy value, or raise WaitTimeout with the last value."""
    deadline = time.monotonic() + timeout
    gate = threading.Event()
    last: Any = None
    while True:
        last = predicate()
        if last:
            return last
        if time.monotonic() >= deadline:
            raise WaitTimeout(f"{message} not met within {timeout}s; last value: {last!r}")
        gate.wait(interval)


class ListSpout(ReplayingSpout):
    """Emits the given (key, value) pairs once, tracked and replayed on failure, then finishes.

    params: items (list of [key, value]), per_call (tuples per next_tuple call).
    """

    def __init__(self, items: Iterable[Any], per_call: int = 64) -> None:
        super().__init__()
        self.items = [tuple(i) for i in items]
        self.per_call = per_call
        self.position = 0

    def limit(self) -> int:
        """How far into items this spout may emit now; override to hold some back."""
        return len(self.items)

    def backlog(self) -> int:
        """Items it may emit now and has not (what max_spout_pending holds back)."""
        return max(0, self.limit() - self.position)

    def next_tuple(self) -> None:
        end = min(self.position + self.per_call, self.limit())
        for i in range(self.position, end):
            key, value = self.items[i]
            self.emit(key, value, msg_id=i)
        self.position = end
        if self.position >= len(self.items):
            self.finish()

    def snapshot_position(self) -> int:
        return self.position

    def restore_position(self, position: int) -> None:
        self.position = int(position)


_collected: dict[str, list[tuple[Any, Any]]] = defaultdict(list)
_collected_lock = threading.Lock()


class CollectorBolt(Bolt):
    """Records every tuple it gets into a list of this process named by params `name` (default: the unit).

    Its SPUs run in the driver, also when the job has worker processes
    (esault_placement = "driver"), so collected(name) in the test's process
    sees what it received whatever the grouping into it and its parallelism.
    Never chained: it is a unit of its own, after the bolt it reads.
    """

    esault_placement = "driver"

    def __init__(self, name: str | None = None) -> None:
        self._name = name

    def open(self, context: Any) -> None:
        if self._name is None:
            self._name = context.unit

    def process(self, tup: Tuple) -> None:
        with _collected_lock:
            _collected[self._name].append((tup.key, tup.value))

    def snapshot_state(self) -> dict[str, Any]:
        return {}


def collected(name: str) -> list[tuple[Any, Any]]:
    """A copy of what CollectorBolts named `name` received so far."""
    with _collected_lock:
        return list(_collected.get(name, ()))


def reset_collected(name: str | None = None) -> None:
    with _collected_lock:
        if name is None:
            _collected.clear()
        else:
            _collected.pop(name, None)
