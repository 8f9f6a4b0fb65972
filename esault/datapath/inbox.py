"""An SPU's mailbox: data in arrival order, reconfiguration commands ahead of queued data.

A reconfiguration's setup and answers (PrepareGive, PrepareReceive, InstallRoutes, StateHandoff,
MarkerSeen, CancelReconfiguration) carry no position in the data stream, so an SPU may act on them before the batches
queued in front; at load that backlog is most of an operation's time (docs/CONTROL_PLANE.md,
"Where the time goes"). Everything that marks a position in a channel stays in band: batches,
EpochMarker, ForwardMarker, checkpoint barriers, latency probes (they measure the queue).
Why jumping is safe, per message: docs/PROTOCOLS.md.
"""

from __future__ import annotations

import queue
from collections import deque
from typing import Any

from esault.messages.handoff import (
    CancelReconfiguration,
    InstallRoutes,
    MarkerSeen,
    PrepareGive,
    PrepareReceive,
    StateHandoff,
)

JUMPS_QUEUE: frozenset[type] = frozenset({PrepareGive, PrepareReceive, InstallRoutes, StateHandoff, MarkerSeen,
                                          CancelReconfiguration})


class ControlFirstInbox(queue.Queue):
    """queue.Queue with two lanes: JUMPS_QUEUE messages first (FIFO among themselves), then the rest (FIFO).
    O(1) per put and get, under queue.Queue's own lock."""

    def _init(self, maxsize: int) -> None:
        self.queue: deque[Any] = deque()
        self._urgent: deque[Any] = deque()

    def _qsize(self) -> int:
        return len(self.queue) + len(self._urgent)

    def _put(self, item: Any) -> None:
        (self._urgent if type(getattr(item, "message", None)) in JUMPS_QUEUE else self.queue).append(item)

    def _get(self) -> Any:
        return self._urgent.popleft() if self._urgent else self.queue.popleft()
