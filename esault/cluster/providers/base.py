"""The one interface between the driver and whatever starts worker processes.

The local pool forks them on this host, a static cluster admits the ones an operator started, Ray places
them as actors on its nodes. The driver's capacity keeper (esault.cluster.capacity) is the only caller: it
asks for a worker when placement finds no room for a new SPU, and gives back one that has hosted no SPU for
`release_after` seconds. A provider never decides placement and never touches the data path: a worker it
starts joins the driver like any other (hello over CurveZMQ, admitted by the key the driver made for it).
"""

from __future__ import annotations

import abc
import time
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class WorkerRequest:
    """One worker asked for: the name the driver gives it and why (shown while it is pending)."""

    name: str
    reason: str
    asked_at: float = field(default_factory=time.time)


@dataclass(frozen=True, slots=True)
class WorkerOrigin:
    """Where a joined worker came from, for status views: its provider, the node it runs on, since when."""

    provider: str
    node: str
    started_at: float


class WorkerProvider(abc.ABC):
    """Starts and ends worker processes for one driver. Methods are called from the driver's capacity keeper
    (one thread at a time); none may block for long: `request` starts a worker, its join is awaited elsewhere."""

    kind: str = "provider"
    """Named in status views and the event log: "local", "static", "ray"."""

    floor: int = 0
    """Workers the provider keeps however idle they are (a local pool's --workers)."""

    @abc.abstractmethod
    def cannot_grow(self, live: int) -> str | None:
        """Why no further worker can be asked for with `live` joined or pending (a ceiling, a static
        cluster), or None when one can."""

    @abc.abstractmethod
    def request(self, request: WorkerRequest) -> None:
        """Start one worker named `request.name`; it joins the driver on its own. Raises ResourceError with
        the cause when it cannot be started at all."""

    @abc.abstractmethod
    def release(self, worker: str) -> None:
        """Give `worker` back: the driver has told it to exit; end what the provider holds for it (a Ray
        actor, a process handle) once it has."""

    def origin(self, worker: str) -> WorkerOrigin | None:
        """Where `worker` came from, if this provider started it."""
        return None

    def lost(self, worker: str) -> None:
        """`worker` was declared dead: forget it (a later request may start its replacement)."""

    def shutdown(self) -> None:
        """The cluster ends: end every worker this provider started (they were told to exit first)."""
