"""The output router of one SPU: which downstream SPU gets each emitted tuple.

Per downstream unit it holds a route (grouping + interval table + mailboxes)
and one buffer per destination SPU. Emits append to buffers; flush() sends
each non-empty buffer as one DataBatch, so the per-tuple cost is a dict
lookup and a list append, not an actor message.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Iterable

from esault.keyhash import key_hash
from esault.routing.interval_table import IntervalTable
from esault.runtime.messages import DataBatch, RouteSpec

_CACHE_LIMIT = 1 << 16
log = logging.getLogger("esault.routing")


class Route:
    """One downstream unit as seen by one sender. Not thread-safe (owned by an actor)."""

    __slots__ = ("unit", "grouping", "version", "broadcast", "buffers", "_mailboxes", "_order",
                 "_table", "_cache", "_rr", "target")

    def __init__(self, spec: RouteSpec) -> None:
        self.unit = spec.unit
        self.grouping = spec.grouping
        self.broadcast = spec.grouping == "all"
        self._cache: dict[Any, list] = {}
        self._rr = 0
        self.target: Callable[[Any], list] = {
            "key": self._by_key,
            "shuffle": self._round_robin,
            "global": self._first,
            "all": self._first,
        }[spec.grouping]
        self.update(spec)

    def update(self, spec: RouteSpec) -> None:
        """Switch to a new table/SPU set in place, so emit closures holding this route stay valid."""
        if spec.unit != self.unit or spec.grouping != self.grouping:
            raise ValueError(f"route to {self.unit!r}/{self.grouping} cannot become {spec.unit!r}/{spec.grouping}")
        if not spec.spus:
            raise ValueError(f"route to unit {spec.unit!r} has no SPU")
        self.version = spec.version
        self._mailboxes: dict[int, Any] = dict(spec.spus)
        self._order = sorted(self._mailboxes)
        self.buffers: dict[int, list] = {spu: [] for spu in self._order}
        self._table = IntervalTable.from_wire(spec.table) if spec.grouping == "key" else None
        self._cache.clear()
        self._rr = 0

    def _by_key(self, key: Any) -> list:
        buf = self._cache.get(key)
        if buf is None:
            buf = self.buffers[self._table.lookup(key_hash(key))]
            if len(self._cache) >= _CACHE_LIMIT:
                self._cache.clear()
            self._cache[key] = buf
        return buf

    def _round_robin(self, key: Any) -> list:
        order = self._order
        self._rr = (self._rr + 1) % len(order)
        return self.buffers[order[self._rr]]

    def _first(self, key: Any) -> list:
        return self.buffers[self._order[0]]

    def all_buffers(self) -> list[list]:
        return [self.buffers[spu] for spu in self._order]

    def flush(self, sender: int) -> int:
        sent = 0
        for spu, buf in self.buffers.items():
            if buf:
                try:
                    self._mailboxes[spu].tell(DataBatch(sender, buf[:]))
                    sent += len(buf)
                except Exception as exc:  # the SPU's process is gone: its replacement gets the replays
                    log.warning("unit %r SPU %d unreachable, %d tuples dropped (acking replays them): %r",
                                self.unit, spu, len(buf), exc)
                buf.clear()
        return sent


class OutputRouter:
    """All downstream routes of one SPU; install() swaps a route after a reconfiguration."""

    def __init__(self, sender: int, specs: Iterable[RouteSpec]) -> None:
        self.sender = sender
        self.routes: list[Route] = [Route(s) for s in specs]

    def install(self, spec: RouteSpec) -> None:
        """Switch the route to spec.unit in place; call flush() first so old-table tuples leave first."""
        for route in self.routes:
            if route.unit == spec.unit:
                if any(route.buffers.values()):
                    raise RuntimeError(f"install({spec.unit!r}) with unflushed tuples: flush() first")
                route.update(spec)
                return
        raise ValueError(f"this SPU does not send to unit {spec.unit!r}; the topology fixes its downstream units")

    def flush(self) -> int:
        return sum(route.flush(self.sender) for route in self.routes)

    def version_of(self, unit: str) -> int | None:
        for route in self.routes:
            if route.unit == unit:
                return route.version
        return None
