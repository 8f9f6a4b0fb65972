"""Controller: a user policy called periodically with a MetricsSnapshot; it returns operations."""

from __future__ import annotations

from typing import Iterable

from esault.control.operations import Operation
from esault.control.snapshot import MetricsSnapshot
from esault.messages.control import ScaleResult


class Controller:
    """Subclass and override `decide`. It runs on the driver's controller thread, never on a data path;
    an exception it raises is logged and the next period calls it again (the job goes on)."""

    interval: float = 1.0
    """Seconds between two calls of decide()."""

    def decide(self, snapshot: MetricsSnapshot) -> Iterable[Operation]:
        """The operations to apply now (applied in order; a refused one is logged and the rest go on)."""
        return ()

    def applied(self, operation: Operation, result: ScaleResult | None, error: Exception | None) -> None:
        """Told of each operation's outcome: its ScaleResult, or the error that refused or aborted it."""
