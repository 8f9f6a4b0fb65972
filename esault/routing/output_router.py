"""The output router of one SPU: which downstream SPU gets each emitted tuple.

Per downstream unit it holds a route (grouping + interval table + mailboxes).
An emit appends key and value to a buffer (one flat list, key, value, key,
value...): for key grouping the buffer of the key's SPU (a cached dict get),
for the other groupings one shared buffer that flush() deals out. flush()
turns each buffer into one columnar DataBatch, so the per-tuple cost is a
dict get and two appends; everything else is per batch.
"""

from __future__ import annotations

import logging
from random import getrandbits
from typing import Any, Callable, Iterable, Iterator

from esault.keyhash import key_hash
from esault.routing.interval_table import IntervalTable
from esault.routing.tag import TagPartitioner
from esault.messages.data import DataBatch
from esault.messages.handoff import RouteSpec

_CACHE_LIMIT = 1 << 18
SPREAD = {"tag": "tag", "partial_key": "pkg"}
"""Groupings that choose an SPU per tuple, and their TagPartitioner mode."""
GROUPINGS = ("key", "shuffle", "global", "all", "chain_head", "chain_tail", *SPREAD)
NO_ROOTS: list[int] = []
"""The trees of an untracked batch (acking off, or emits outside process()); never mutated."""
log = logging.getLogger("esault.routing")


class Route:
    """One downstream unit as seen by one sender. Not thread-safe (owned by an actor).

    `pending` (non-key groupings) and the `_cache` dict are the same objects
    for the route's whole life, so emit closures may bind them; update()
    changes what they point to in place.
    """

    __slots__ = ("unit", "grouping", "version", "broadcast", "keyed", "spread", "partitioner", "buffers", "pending",
                 "batch_tuples", "_mailboxes", "_order", "_table", "_cache", "_rr")

    def __init__(self, spec: RouteSpec, seed: int = 0) -> None:
        if spec.grouping not in GROUPINGS:
            raise ValueError(f"unknown grouping {spec.grouping!r} for route to {spec.unit!r}")
        self.unit = spec.unit
        self.grouping = spec.grouping
        self.broadcast = spec.grouping == "all"
        self.keyed = spec.grouping == "key"
        self.spread = spec.grouping in SPREAD
        """TAG and PKG: each tuple's SPU is chosen when it is emitted (TagPartitioner), not cached per key."""
        self.partitioner: TagPartitioner | None = (
            TagPartitioner(spec.spus, mode=SPREAD[spec.grouping], seed=seed) if self.spread else None)
        self._cache: dict[Any, list] = {}
        self.pending: list = []
        self.buffers: dict[int, list] = {}
        self.batch_tuples: dict[int, float] = {}
        """Spread routes: a moving mean of the tuples per batch sent to each SPU (turns its queue of batches
        into tuples for TAG's load t_i x queued)."""
        self._rr = 0
        self.update(spec)

    def update(self, spec: RouteSpec) -> None:
        """Switch to a new table/SPU set in place, so emit closures holding this route stay valid."""
        if spec.unit != self.unit or spec.grouping != self.grouping:
            raise ValueError(f"route to {self.unit!r}/{self.grouping} cannot become {spec.unit!r}/{spec.grouping}")
        if not spec.spus:
            raise ValueError(f"route to unit {spec.unit!r} has no SPU")
        if self.has_data():
            raise RuntimeError(f"route to {spec.unit!r} updated with unflushed tuples: flush() first")
        self.version = spec.version
        self._mailboxes: dict[int, Any] = dict(spec.spus)
        self._order = sorted(self._mailboxes)
        self.buffers: dict[int, list] = {spu: [] for spu in self._order} if self.keyed or self.spread else {}
        if self.partitioner is not None:
            self.partitioner.set_spus(self._order)
        self._table = IntervalTable.from_wire(spec.table) if self.keyed else None
        self._cache.clear()
        self._rr = 0

    def buffer_for(self, key: Any) -> list:
        """The flat buffer an emit of `key` appends to. O(1) for cached keys, O(log SPUs) otherwise."""
        if not self.keyed:
            if self.spread:
                return self.buffers[self.partitioner.choose(key)]
            return self.pending
        buf = self._cache.get(key)
        if buf is None:
            buf = self.buffers[self._table.lookup(key_hash(key))]
            if len(self._cache) >= _CACHE_LIMIT:
                self._cache.clear()
            self._cache[key] = buf
        return buf

    def has_data(self) -> bool:
        return bool(self.pending) or any(self.buffers.values())

    def take(self) -> Iterator[tuple[int, list]]:
        """(spu, flat [k, v, ...] list) per destination with data; the buffers are left empty.

        Shuffle deals the shared buffer out in equal runs, starting at a rotating SPU (tiny
        batches still spread); global and chain_head send it to the first SPU, chain_tail to the
        last (a join chain's ends: SPU ids grow along the chain), all to every SPU.
        """
        if self.keyed or self.spread:
            sizes = self.batch_tuples
            for spu, buf in self.buffers.items():
                if buf:
                    out = buf[:]
                    buf.clear()
                    if self.spread:
                        tuples = len(out) // 2
                        sizes[spu] = 0.8 * sizes.get(spu, tuples) + 0.2 * tuples
                    yield spu, out
            return
        flat = self.pending
        if not flat:
            return
        data = flat[:]
        flat.clear()
        order = self._order
        if self.broadcast:
            for spu in order:
                yield spu, data
        elif self.grouping in ("global", "chain_head") or len(order) == 1:
            yield order[0], data
        elif self.grouping == "chain_tail":
            yield order[-1], data
        else:
            n = len(order)
            pairs = len(data) // 2
            per = -(-pairs // n)  # ceil
            start = self._rr
            self._rr = (start + 1) % n
            for i in range(n):
                lo = i * per * 2
                if lo >= len(data):
                    break
                yield order[(start + i) % n], data[lo:lo + per * 2]

    def mailbox(self, spu: int) -> Any:
        return self._mailboxes[spu]


class OutputRouter:
    """All downstream routes of one SPU; install() swaps a route after a reconfiguration."""

    def __init__(self, sender: int, source: str, specs: Iterable[RouteSpec]) -> None:
        self.sender = sender
        self.source = source
        self.routes: list[Route] = [Route(s, seed=sender) for s in specs]
        self.dropped_to: dict[int, int] = {}
        """Tuples lost per downstream SPU that could not be reached (its process died): the first loss to each
        is a warning, later ones (every flush until its replacement is installed) only debug lines."""

    def install(self, spec: RouteSpec) -> None:
        """Switch the route to spec.unit in place; call flush() first so old-table tuples leave first."""
        for route in self.routes:
            if route.unit == spec.unit:
                route.update(spec)
                return
        raise ValueError(f"this SPU does not send to unit {spec.unit!r}; the topology fixes its downstream units")

    def has_data(self) -> bool:
        return any(route.has_data() for route in self.routes)

    def flush(self, roots: list[int] = NO_ROOTS, rand: Callable[[int], int] = getrandbits) -> tuple[int, list[int]]:
        """Send each buffer as one DataBatch in the trees `roots`; (tuples emitted, XOR of new edges per root).

        Each batch gets a fresh edge id per root; the caller XORs the returned
        values into its acks so the trees stay open until the batches are acked.
        A destination that cannot be reached (its process died) loses its
        batch: the edges stay unacked, the trees time out and are replayed.
        Its tuples still count as emitted, so the job's totals show them as
        never processed: without acking (guarantee "none") that is how the
        loss is reported (Job.status()["unaccounted"]), not hidden.
        """
        sent = 0
        xors = [0] * len(roots)
        for route in self.routes:
            for spu, flat in route.take():
                edges = [rand(64) | 1 for _ in roots]
                for i, edge in enumerate(edges):
                    xors[i] ^= edge
                try:
                    route.mailbox(spu).tell(DataBatch(self.sender, self.source, flat[0::2], flat[1::2], roots, edges))
                except Exception as exc:  # the SPU's process is gone: its replacement gets the replays
                    self._dropped(route.unit, spu, len(flat) // 2, exc)
                sent += len(flat) // 2
        return sent, xors

    def _dropped(self, unit: str, spu: int, tuples: int, exc: BaseException) -> None:
        before = self.dropped_to.get(spu, 0)
        self.dropped_to[spu] = before + tuples
        if not before:
            log.warning("unit %r SPU %d unreachable, %d tuples dropped (acking replays them; without acking they "
                        "count as lost; more dropped to it until its replacement is routed to are logged at debug): "
                        "%r", unit, spu, tuples, exc)
        else:
            log.debug("unit %r SPU %d unreachable, %d more tuples dropped (%d in all)", unit, spu, tuples,
                      before + tuples)

    def broadcast(self, message: Any) -> None:
        """Tell `message` to every downstream SPU, behind the data already sent (call flush() first).

        For in-band control (checkpoint barriers): channels are FIFO, so it
        arrives after every batch this SPU sent before. An unreachable SPU is
        skipped: its process died and a rollback follows.
        """
        for route in self.routes:
            for spu in route._order:
                try:
                    route.mailbox(spu).tell(message)
                except Exception as exc:  # noqa: BLE001 - see docstring
                    log.warning("unit %r SPU %d unreachable for %s: %r", route.unit, spu,
                                type(message).__name__, exc)

    def downstream_spus(self) -> frozenset[int]:
        """Every SPU this one sends to, over all its routes."""
        return frozenset(spu for route in self.routes for spu in route._order)

    def version_of(self, unit: str) -> int | None:
        for route in self.routes:
            if route.unit == unit:
                return route.version
        return None
