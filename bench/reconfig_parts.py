"""The reconfiguration bench's topology: a paced source whose tuples carry their due time, a keyed count,
and a sink in the driver that records each tuple's latency and key hash.

Latency = arrival at the sink - the tuple's *due* time (t0 + i / rate, wall clock, one process): a
source that stops (a restart) and catches up shows the downtime in its tuples' latency, as a queue in
front of a real job would."""

from __future__ import annotations

import threading
import time
from typing import Any

from esault import Bolt, Spout, key_hash

RECORDS: dict[str, list[tuple[float, float, int]]] = {}  # name -> (arrival, latency, key hash)
_LOCK = threading.Lock()


class DueSpout(Spout):
    """Item i is due at t0 + i / rate; emitted once due, in chunks; key i*7919 mod keys. Rewinds."""

    def __init__(self, keys: int, rate: float, t0: float, total: int) -> None:
        self.keys = [f"k{j}" for j in range(keys)]
        self.rate, self.t0, self.total = rate, t0, total
        self.position = 0

    def next_tuple(self) -> None:
        due = min(self.total, int((time.time() - self.t0) * self.rate))
        end = min(due, self.position + 200)
        if end <= self.position:
            if self.position >= self.total:
                self.finish()
            return
        n = len(self.keys)
        self.emit_batch([self.keys[(i * 7919) % n] for i in range(self.position, end)],
                        list(range(self.position, end)), msg_id=self.position)
        self.position = end

    def snapshot_position(self) -> Any:
        return self.position

    def restore_position(self, position: Any) -> None:
        self.position = position


class CountBolt(Bolt):
    def open(self, context: Any) -> None:
        self.count = 0

    def process(self, tup: Any) -> None:
        self.count += 1
        self.emit(tup.key, tup.value)


class LatencySink(Bolt):
    """In the driver: one record per tuple."""

    esault_placement = "driver"

    def __init__(self, name: str, rate: float, t0: float) -> None:
        self.name, self.rate, self.t0 = name, rate, t0

    def process(self, tup: Any) -> None:
        now = time.time()
        record = (now, now - (self.t0 + tup.value / self.rate), key_hash(tup.key))
        with _LOCK:
            RECORDS.setdefault(self.name, []).append(record)

    def snapshot_state(self) -> dict[str, Any]:
        return {}


def records(name: str) -> list[tuple[float, float, int]]:
    with _LOCK:
        return list(RECORDS.get(name, ()))
