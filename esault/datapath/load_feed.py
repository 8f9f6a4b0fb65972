"""LoadFeed: brings the downstream SPUs' measured load to a sender's TAG and PKG routes.

On each tick it reads, for every SPU a spread route sends to, the SpuStats of
this process's registry (the SPUs running here): mean completion time per
tuple t_i = busy time / tuples over the last interval, and the queue = batches
waiting in the SPU's mailbox x the tuples per batch this sender sends it. It
reports both to the route's TagPartitioner and closes the partitioner's
heavy-key window every `window` seconds.

SPUs in another process are not in this registry: their counts come from
REMOTE_LOADS, which a worker fills from the driver's DriverBeat (every 0.1 s,
with what the workers' heartbeats reported every 0.2 s: up to ~0.3 s old). An
SPU in neither keeps its t_i at the mean of the known ones and its queue at
what this sender counted (the partitioner's own +1 per tuple).
"""

from __future__ import annotations

import threading
from typing import Iterable

from esault.metrics.stats import StatsRegistry
from esault.routing.output_router import OutputRouter

TAG_WINDOW_SECONDS = 1.0
"""How long one heavy-key window of TAG lasts."""
REPORT_SECONDS = 0.05
"""How often loads are read (every few ticks)."""


Row = tuple[str, str, int, int, int, int]
"""(topology, unit, spu, busy_us, processed, backlog) of one SPU."""


class RemoteLoads:
    """The last counts of SPUs in other processes, as the driver relayed them; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rows: dict[tuple[str, str, int], Row] = {}

    def replace(self, rows: Iterable[Row]) -> None:
        """The driver's latest view: SPUs not in it are gone."""
        fresh = {}
        for row in rows:
            if isinstance(row, (tuple, list)) and len(row) == 6:
                fresh[(row[0], row[1], row[2])] = tuple(row)
        with self._lock:
            self._rows = fresh

    def rows(self) -> list[Row]:
        with self._lock:
            return list(self._rows.values())


REMOTE_LOADS = RemoteLoads()
"""This process's copy of the other processes' SPU loads (filled by a worker's control on DriverBeat)."""


def tag_load_rows(stats: Iterable, units: set[tuple[str, str]]) -> list[Row]:
    """The DriverBeat rows for the SPUs of (topology, unit) in `units`, from SpuStats-like objects."""
    return [(s.topology, s.unit, s.spu, int(s.busy_us), int(s.processed), int(s.backlog))
            for s in stats if (s.topology, s.unit) in units]


class LoadFeed:
    """Owned by one sender actor; call on_tick(now) from its tick handler."""

    def __init__(self, topology: str, router: OutputRouter, stats: StatsRegistry, now: float,
                 window: float = TAG_WINDOW_SECONDS, remote: RemoteLoads = REMOTE_LOADS) -> None:
        self.topology = topology
        self.routes = [route for route in router.routes if route.spread]
        self.stats = stats
        self.remote = remote
        self.window = window
        self._window_ends = now + window
        self._next_report = now
        self._last: dict[tuple[str, int], tuple[int, int]] = {}  # (unit, spu) -> (busy_us, processed)
        self._seen: dict[tuple[str, int], tuple] = {}  # (unit, spu) -> the last row reported

    def next_due(self) -> float | None:
        """When on_tick() next has work: a load report or a window's end; None without spread routes."""
        if not self.routes:
            return None
        return min(self._next_report, self._window_ends)

    def on_tick(self, now: float) -> None:
        if not self.routes or now < self._next_report:
            return
        self._next_report = now + REPORT_SECONDS
        units = {route.unit: route for route in self.routes if route.partitioner.mode == "tag"}
        if units:
            rows = {(r[1], r[2]): r for r in self.remote.rows() if r[0] == self.topology and r[1] in units}
            for stats in self.stats.live():  # SPUs in this process: their own counters, fresher than a relay
                if stats.topology == self.topology and stats.unit in units:
                    rows[(stats.unit, stats.spu)] = (stats.topology, stats.unit, stats.spu, stats.busy_us,
                                                     stats.processed, stats.backlog)
            for (unit, spu), row in rows.items():
                route = units[unit]
                if spu not in route.partitioner.time or self._seen.get((unit, spu)) == row:
                    continue  # unknown, or nothing new (a relayed row repeats until the next heartbeat)
                self._seen[(unit, spu)] = row
                _, _, _, busy, done, backlog = row
                last_busy, last_done = self._last.get((unit, spu), (0, 0))
                if done != last_done or (unit, spu) not in self._last:
                    self._last[(unit, spu)] = (busy, done)
                mean_time = (busy - last_busy) / 1e6 / (done - last_done) if done > last_done else None
                route.partitioner.report(spu, mean_time, backlog * route.batch_tuples.get(spu, 1.0))
        if now >= self._window_ends:
            self._window_ends = now + self.window
            for route in self.routes:
                route.partitioner.end_window()
