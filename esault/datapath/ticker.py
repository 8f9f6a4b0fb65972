"""The one place that waits on time: a thread telling Tick to subscribed actors."""

from __future__ import annotations

import threading
from typing import Any

from esault.clock import Clock
from esault.messages.data import Tick
from esault.thread_names import os_named


class Ticker:
    """Every `interval` seconds tells Tick(now) to each subscriber. Actors never sleep."""

    def __init__(self, clock: Clock, interval: float) -> None:
        self.clock = clock
        self.interval = interval
        self._subscribers: list[Any] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=os_named(self._run), name="esault-ticker", daemon=True)

    def subscribe(self, mailbox: Any) -> None:
        with self._lock:
            self._subscribers.append(mailbox)

    def unsubscribe(self, mailbox: Any) -> None:
        with self._lock:
            if mailbox in self._subscribers:
                self._subscribers.remove(mailbox)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            tick = Tick(self.clock.now())
            with self._lock:
                targets = list(self._subscribers)
            for mailbox in targets:
                try:
                    mailbox.tell(tick)
                except Exception:  # an actor that stopped meanwhile
                    self.unsubscribe(mailbox)
