"""The paper's resource interface: ask for and give back slots, whatever manages them."""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass
from typing import Protocol

from esault.errors import ResourceError


@dataclass(frozen=True, slots=True)
class Slot:
    """Capacity for SPUs on one resource (a thread pool here, a worker process elsewhere)."""

    id: int
    location: str


class ResourceManager(Protocol):
    """acquire() a slot for a new SPU; release() it when the SPU is merged away."""

    def acquire(self) -> Slot: ...

    def release(self, slot: Slot) -> None: ...


class InProcessResources:
    """Slots are threads of this process: for tests and the embedded default. Bounded by max_slots."""

    def __init__(self, max_slots: int = 1024) -> None:
        self.max_slots = max_slots
        self._ids = itertools.count(1)
        self._held: set[int] = set()
        self._lock = threading.Lock()

    def acquire(self) -> Slot:
        with self._lock:
            if len(self._held) >= self.max_slots:
                raise ResourceError(
                    f"all {self.max_slots} in-process slots are in use; raise max_slots or merge SPUs first"
                )
            slot = Slot(next(self._ids), "in-process")
            self._held.add(slot.id)
            return slot

    def release(self, slot: Slot) -> None:
        with self._lock:
            if slot.id not in self._held:
                raise ResourceError(f"slot {slot.id} is not held; it was released already or never acquired")
            self._held.discard(slot.id)

    @property
    def in_use(self) -> int:
        with self._lock:
            return len(self._held)
