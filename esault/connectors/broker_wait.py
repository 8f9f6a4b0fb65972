"""What a connector's background thread waits for at the broker: the text KafkaSink.waiting_for() returns.

The sink's publishes run on a thread of their own (kafka_transactions), so its SPU cannot see a publish held by
a broker that stopped answering; this note, written by that thread and read by the SPU's, makes the wait show in
Job.status(), `esault status` and esault_bolt_waiting_since_seconds, as a source's does.
"""

from __future__ import annotations

import threading
import time
from typing import Callable

WAIT_AFTER = 2.0
"""Seconds a broker step may run before it counts as a wait (a commit of a large epoch on a busy broker is no
outage); a step that failed with a retriable error counts at once."""


class BrokerWait:
    """The broker step running now, if any, and whether it is a wait. Thread-safe: one thread runs the steps,
    any other reads waiting_for(). The text stays the same for the whole step, so a reader that notes since
    when it first saw it (the SPU) keeps one start for one outage."""

    def __init__(self, broker: str, after: float = WAIT_AFTER, clock: Callable[[], float] = time.monotonic) -> None:
        self.broker = broker
        self.after = after
        self._clock = clock
        self._lock = threading.Lock()
        self._step: str | None = None
        self._started = 0.0
        self._retried = False

    def begin(self, step: str) -> None:
        """`step` ("publishing epoch 5") started: a wait once it runs `after` seconds or retries."""
        with self._lock:
            self._step, self._started, self._retried = step, self._clock(), False

    def retrying(self) -> None:
        """The step failed with a retriable error and is tried again: a wait from now on."""
        with self._lock:
            self._retried = True

    def end(self) -> None:
        """The step returned (or gave up): no wait."""
        with self._lock:
            self._step = None

    def waiting_for(self) -> str | None:
        """'broker <address> (<step>)' while a step waits, else None."""
        with self._lock:
            if self._step is None:
                return None
            if not self._retried and self._clock() - self._started < self.after:
                return None
            return f"broker {self.broker} ({self._step})"
