"""AckBatcher: a worker's checkpoint acks to the driver in one frame a checkpoint, not one an SPU.

Every SPU acks every checkpoint. With 16 SPUs a worker, a driver steering 256
workers decoded 4,096 frames a checkpoint (docs/SCALE.md), one CheckpointAck
each. A checkpoint completes only once its last ack is in, so holding a
worker's early acks until its last SPU acked costs the checkpoint nothing:
the batcher sends them together (CheckpointAcks) the moment every SPU of the
job in this process acked the epoch, and no later than `linger` seconds after
the first one held (a slow snapshot, an SPU that started after the barrier),
so a timed-out checkpoint still names the SPUs that did not ack. An ack that
fails the checkpoint (an error, a fatal loss) goes at once, with any held.

Thread-safe: SPUs' snapshot writers and spout threads call `tell`; the timer
runs on `schedule`'s thread. Nothing runs while no ack is held.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Protocol

from esault.messages.checkpoints import CheckpointAck, CheckpointAcks

__all__ = ["AckBatcher", "LINGER"]

LINGER = 0.25
"""Seconds an ack is held at most, waiting for the other SPUs of its worker."""

KEPT_EPOCHS = 4
"""Epochs whose acked SPUs are remembered (a late ack of an older epoch still counts towards its flush)."""


class Cancel(Protocol):
    def cancel(self) -> None: ...


def _timer(delay: float, action: Callable[[], None]) -> Cancel:
    timer = threading.Timer(delay, action)
    timer.daemon = True
    timer.start()
    return timer


class AckBatcher:
    """Stands in for the driver's checkpoint mailbox in a worker (JobContext.checkpoints): `tell(ack)`.

    `local_spus()`: how many SPUs of the job this process runs now (each acks every epoch).
    `schedule(delay, action)`: runs `action` after `delay` s, returns what cancels it (a Timer; tests
    pass their own)."""

    def __init__(self, target: Any, local_spus: Callable[[], int], linger: float = LINGER,
                 schedule: Callable[[float, Callable[[], None]], Cancel] = _timer) -> None:
        if not linger > 0:
            raise ValueError(f"linger must be seconds > 0, got {linger!r}")
        self.target = target
        self._local_spus = local_spus
        self._linger = linger
        self._schedule = schedule
        self._lock = threading.Lock()
        self._held: list[CheckpointAck] = []
        self._acked: dict[int, set[int]] = {}
        """epoch -> the SPUs here that acked it (held or sent)."""
        self._timer: Cancel | None = None

    def tell(self, ack: CheckpointAck) -> None:
        with self._lock:
            self._held.append(ack)
            if ack.error or ack.fatal or ack.epoch < 0:
                batch = self._take()
            else:
                acked = self._acked.setdefault(ack.epoch, set())
                acked.add(ack.spu_id)
                if len(self._acked) > KEPT_EPOCHS:
                    del self._acked[min(self._acked)]
                if len(acked) >= self._local_spus():
                    del self._acked[ack.epoch]
                    batch = self._take()
                else:
                    batch = None
                    if self._timer is None:
                        self._timer = self._schedule(self._linger, self.flush)
        if batch:
            self._send(batch)

    def flush(self) -> None:
        """Send whatever is held now (the linger's timer calls it)."""
        with self._lock:
            batch = self._take()
        if batch:
            self._send(batch)

    def _take(self) -> list[CheckpointAck]:
        """The held acks, and no timer any more (lock held; cancelling the timer that fired is harmless)."""
        batch, self._held = self._held, []
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        return batch

    def _send(self, batch: list[CheckpointAck]) -> None:
        self.target.tell(CheckpointAcks(tuple(batch)))
