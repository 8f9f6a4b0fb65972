"""LoadFeed: brings the downstream SPUs' measured load to a sender's TAG and PKG routes.

On each tick it reads, for every SPU a spread route sends to, the SpuStats of
this process's registry (the SPUs running here): mean completion time per
tuple t_i = busy time / tuples over the last interval, and the queue = batches
waiting in the SPU's mailbox x the tuples per batch this sender sends it. It
reports both to the route's TagPartitioner and closes the partitioner's
heavy-key window every `window` seconds.

SPUs in another process are not in this registry: their t_i stays at the
mean of the known ones and their queue at what this sender counted (the
partitioner's own +1 per tuple): TAG degrades to PKG's local estimate for them.
"""

from __future__ import annotations

from esault.metrics.stats import StatsRegistry
from esault.routing.output_router import OutputRouter

TAG_WINDOW_SECONDS = 1.0
"""How long one heavy-key window of TAG lasts."""
REPORT_SECONDS = 0.05
"""How often loads are read (every few ticks)."""


class LoadFeed:
    """Owned by one sender actor; call on_tick(now) from its tick handler."""

    def __init__(self, topology: str, router: OutputRouter, stats: StatsRegistry, now: float,
                 window: float = TAG_WINDOW_SECONDS) -> None:
        self.topology = topology
        self.routes = [route for route in router.routes if route.spread]
        self.stats = stats
        self.window = window
        self._window_ends = now + window
        self._next_report = now
        self._last: dict[tuple[str, int], tuple[int, int]] = {}  # (unit, spu) -> (busy_us, processed)

    def on_tick(self, now: float) -> None:
        if not self.routes or now < self._next_report:
            return
        self._next_report = now + REPORT_SECONDS
        units = {route.unit: route for route in self.routes}
        for stats in self.stats.live():
            route = units.get(stats.unit)
            if route is None or stats.topology != self.topology or stats.spu not in route.partitioner.time:
                continue
            key = (stats.unit, stats.spu)
            busy, done = stats.busy_us, stats.processed
            last_busy, last_done = self._last.get(key, (0, 0))
            self._last[key] = (busy, done)
            mean_time = (busy - last_busy) / 1e6 / (done - last_done) if done > last_done else None
            queued = stats.backlog * route.batch_tuples.get(stats.spu, 1.0)
            route.partitioner.report(stats.spu, mean_time, queued)
        if now >= self._window_ends:
            self._window_ends = now + self.window
            for route in self.routes:
                route.partitioner.end_window()
