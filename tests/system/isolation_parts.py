"""Bolts for the job isolation tests whose start fails: worker processes import them by module name."""

from __future__ import annotations

from typing import Any

from esault import Bolt, Spout


class OpenFailsBolt(Bolt):
    """open() raises: its SPU cannot start (on a worker process by default)."""

    def __init__(self, lock: Any = None) -> None:
        self.lock = lock

    def open(self, context: Any) -> None:
        raise RuntimeError("this bolt never opens")

    def process(self, tup: Any) -> None:
        self.emit(tup.key, tup.value)


class DriverOpenFailsBolt(OpenFailsBolt):
    """The same, with its SPUs in the driver."""

    esault_placement = "driver"


class ForwardOnlySpout(Spout):
    """Cannot rewind: refused under exactly_once."""

    def next_tuple(self) -> None:
        self.emit("a", 1)
