"""CollectorBolt: a sink that records what it gets where a test can read it, the driver process."""

from __future__ import annotations

import threading
from collections import defaultdict
from typing import Any

from esault.dsl.bolt import Bolt
from esault.dsl.tuple import Tuple

__all__ = ["CollectorBolt", "collected", "reset_collected"]

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
    """Forget what collectors named `name` (every collector: None) received."""
    with _collected_lock:
        if name is None:
            _collected.clear()
        else:
            _collected.pop(name, None)
