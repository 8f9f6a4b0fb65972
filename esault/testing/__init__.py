"""Test kit for esault users and esault's own tests: conditions, list spouts, collecting bolts, runs to completion.

ListSpout is a finite source and CollectorBolt a sink whose SPUs run in the
driver, so collected(name) reads it in the test's process also when bolts run
in worker processes; run_to_completion runs a topology until every spout is
exhausted and every tuple done and returns what each collector got
(docs/TESTING.md).
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Iterable, TypeVar

from esault.clock import ManualClock
from esault.dsl.spout import ReplayingSpout
from esault.errors import RunIncomplete
from esault.testing.collect import CollectorBolt, collected, reset_collected
from esault.testing.run import RunResult, run_to_completion

T = TypeVar("T")

__all__ = ["CollectorBolt", "ListSpout", "ManualClock", "RunIncomplete", "RunResult", "WaitTimeout", "collected",
           "reset_collected", "run_to_completion", "wait_until"]


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
        self.position = max(self.position, end)  # a limit() that went down holds back; it never rewinds
        if self.position >= len(self.items):
            self.finish()

    def snapshot_position(self) -> int:
        return self.position

    def restore_position(self, position: int) -> None:
        self.position = int(position)
