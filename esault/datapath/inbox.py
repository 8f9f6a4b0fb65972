"""An SPU's mailbox: data in arrival order, reconfiguration commands ahead of queued data.

A reconfiguration's setup and answers (PrepareGive, PrepareReceive, InstallRoutes, StateHandoff,
MarkerSeen, CancelReconfiguration, PeersLost, and WatermarkInputs: upstream SPUs that start or are gone) carry no
position in the data stream, so an SPU may act on them before the batches
queued in front; at load that backlog is most of an operation's time (docs/CONTROL_PLANE.md,
"Where the time goes"). Everything that marks a position in a channel stays in band: batches,
EpochMarker, ForwardMarker, Watermark, checkpoint barriers, latency probes (they measure the queue).
Why jumping is safe, per message: docs/PROTOCOLS.md.

A giver's ForwardMarker is answered as it enters the data lane, not when the SPU reaches it: the
lane is FIFO, so the giver's outputs before the marker are ahead of anything a receiver sends after
the answer, and the receiver's moved keys need not wait for this SPU's backlog. Only a checkpoint's
alignment takes a channel's data out of that order, so while a barrier is queued or an alignment is
open the SPU answers when it processes the marker, as before (docs/PROTOCOLS.md, step 3).
"""

from __future__ import annotations

import logging
import queue
from collections import deque
from typing import Any

from esault.messages.checkpoints import Barrier
from esault.messages.data import WatermarkInputs
from esault.messages.handoff import (
    CancelReconfiguration,
    ForwardMarker,
    InstallRoutes,
    MarkerSeen,
    PeersLost,
    PrepareGive,
    PrepareReceive,
    StateHandoff,
)

log = logging.getLogger("esault.spu")

JUMPS_QUEUE: frozenset[type] = frozenset({PrepareGive, PrepareReceive, InstallRoutes, StateHandoff, MarkerSeen,
                                          CancelReconfiguration, PeersLost, WatermarkInputs})
"""WatermarkInputs jumps too: an upstream SPU that starts holds the watermark back as soon as the SPU hears of it
(sooner only holds it longer), and a lost one sends nothing more (docs/WINDOWS.md, "Watermarks per channel")."""


class ControlFirstInbox(queue.Queue):
    """queue.Queue with two lanes: JUMPS_QUEUE messages first (FIFO among themselves), then the rest (FIFO).
    O(1) per put and get, under queue.Queue's own lock.

    With `answer_markers_as(spu_id)` set it also answers ForwardMarkers on arrival (module docstring);
    `already_answered(marker)` then tells the SPU which ones it must not answer again."""

    def _init(self, maxsize: int) -> None:
        self.queue: deque[Any] = deque()
        self._urgent: deque[Any] = deque()
        self._spu_id: int | None = None  # who answers MarkerSeen; None: the SPU answers when it gets there
        self._barriers = 0  # Barriers in the data lane
        self._aligning = False  # a Barrier was taken and its alignment is not over (`alignment_over`)
        self._answered: set[tuple[int, int]] = set()  # (reconfig_id, giver) answered on arrival
        self._to_answer: deque[ForwardMarker] = deque()  # answered under the lock, sent after it

    def answer_markers_as(self, spu_id: int) -> None:
        self._spu_id = spu_id

    def _qsize(self) -> int:
        return len(self.queue) + len(self._urgent)

    def _put(self, item: Any) -> None:
        kind = type(getattr(item, "message", None))
        if kind in JUMPS_QUEUE:
            self._urgent.append(item)
            return
        self.queue.append(item)
        if kind is Barrier:
            self._barriers += 1
        elif kind is ForwardMarker and self._spu_id is not None and not self._barriers and not self._aligning:
            marker = item.message
            self._answered.add((marker.reconfig_id, marker.giver))
            self._to_answer.append(marker)

    def _get(self) -> Any:
        if self._urgent:
            return self._urgent.popleft()
        item = self.queue.popleft()
        if self._barriers and type(getattr(item, "message", None)) is Barrier:
            self._barriers -= 1
            self._aligning = True
        return item

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        super().put(item, block, timeout)
        if self._to_answer:
            self._send_answers()

    def _send_answers(self) -> None:
        """Outside the lock: a receiver's mailbox may be another process's (its control lane never blocks)."""
        while True:
            try:
                marker = self._to_answer.popleft()
            except IndexError:
                return
            for receiver in marker.receivers.values():
                try:
                    receiver.tell(MarkerSeen(marker.reconfig_id, marker.giver, self._spu_id))
                except Exception as exc:  # noqa: BLE001 - its process died: the job aborts the reconfiguration
                    log.warning("SPU %s: receiver of a hand-off unreachable: %r", self._spu_id, exc)

    def already_answered(self, marker: ForwardMarker) -> bool:
        """True once per marker this mailbox answered on arrival (only the SPU's thread asks)."""
        key = (marker.reconfig_id, marker.giver)
        if key in self._answered:
            self._answered.discard(key)
            return True
        return False

    def alignment_over(self) -> None:
        """The SPU's thread: no checkpoint alignment is open, so arriving markers may be answered again."""
        with self.mutex:
            self._aligning = False
