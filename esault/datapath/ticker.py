"""The one place that waits on time: a thread telling Tick to subscribed actors.

An actor with nothing time-driven to do may sleep: `sleep_until(mailbox, due)` stops its ticks until `due`
(the job clock; None: until woken), `wake(mailbox)` brings them back at once. Idle SPUs then cost nothing
between their deadlines, instead of a thread wake-up every tick (issue 51: 100 ticks/s per SPU were most of an
idle SPU's CPU).
"""

from __future__ import annotations

import math
import threading
from typing import Any

from esault.clock import Clock
from esault.messages.data import Tick
from esault.thread_names import os_named

DORMANT_CHECK = 0.25
"""Seconds (real time) between looks at the sleepers' deadlines when no subscriber ticks: a deadline is kept
within this, and a job clock that jumps (a test's manual clock) is seen as soon."""


class Ticker:
    """Every `interval` seconds tells Tick(now) to each awake subscriber. Actors never sleep on their own."""

    def __init__(self, clock: Clock, interval: float) -> None:
        self.clock = clock
        self.interval = interval
        self._subscribers: dict[int, Any] = {}  # awake: ticked every interval
        self._sleeping: dict[int, tuple[Any, float]] = {}  # id -> (mailbox, due on the job clock)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._changed = threading.Event()
        self._thread = threading.Thread(target=os_named(self._run), name="esault-ticker", daemon=True)

    def subscribe(self, mailbox: Any) -> None:
        with self._lock:
            self._subscribers[id(mailbox)] = mailbox
        self._changed.set()

    def unsubscribe(self, mailbox: Any) -> None:
        with self._lock:
            self._subscribers.pop(id(mailbox), None)
            self._sleeping.pop(id(mailbox), None)

    def sleep_until(self, mailbox: Any, due: float | None) -> None:
        """No ticks for `mailbox` until `due` (job clock; None: until wake()); a subscriber only."""
        key = id(mailbox)
        with self._lock:
            if self._subscribers.pop(key, None) is not None or key in self._sleeping:
                self._sleeping[key] = (mailbox, math.inf if due is None else due)

    def wake(self, mailbox: Any) -> None:
        """Ticks for `mailbox` again from the next interval on (a no-op for one awake or unsubscribed)."""
        key = id(mailbox)
        with self._lock:
            sleeper = self._sleeping.pop(key, None)
            if sleeper is None:
                return
            self._subscribers[key] = sleeper[0]
        self._changed.set()

    @property
    def awake(self) -> int:
        """Subscribers ticked every interval now (the rest sleep until a deadline or a wake())."""
        with self._lock:
            return len(self._subscribers)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._changed.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                idle = not self._subscribers
            if idle:  # only sleepers: look at their deadlines now and then, or as soon as one wakes
                self._changed.wait(max(self.interval, DORMANT_CHECK))
            else:
                self._stop.wait(self.interval)
            self._changed.clear()
            if self._stop.is_set():
                return
            now = self.clock.now()
            tick = Tick(now)
            with self._lock:
                for key in [k for k, (_, due) in self._sleeping.items() if due <= now]:
                    self._subscribers[key] = self._sleeping.pop(key)[0]  # its deadline: a tick, then it decides
                targets = list(self._subscribers.values())
            for mailbox in targets:
                try:
                    mailbox.tell(tick)
                except Exception:  # an actor that stopped meanwhile
                    self.unsubscribe(mailbox)
