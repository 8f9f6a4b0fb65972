"""The key hand-off state machines of a split or merge (docs/PROTOCOLS.md).

Giver: the SPU that loses the keys of [lo, hi]. It keeps processing every
tuple it receives; once an EpochMarker arrived from every upstream SPU, no
tuple of a moved key can reach it any more, so the moved PEs' state is final
and is handed over.
Receiver: the SPU that gains [lo, hi]. It buffers, in arrival order, only the
tuples of moved keys until the state arrives, then replays them. Keys outside
[lo, hi] never pause.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, NamedTuple


class GiverHandoff:
    """Counts EpochMarkers until every upstream SPU has switched tables."""

    def __init__(self, reconfig_id: int, lo: int, hi: int, upstream: Iterable[int], retire: bool) -> None:
        self.reconfig_id = reconfig_id
        self.lo = lo
        self.hi = hi
        self.retire = retire
        self._waiting = set(upstream)

    def marker(self, sender: int) -> None:
        self._waiting.discard(sender)

    @property
    def ready(self) -> bool:
        """True once no upstream SPU can still send a tuple of a moved key."""
        return not self._waiting

    @property
    def waiting_for(self) -> frozenset[int]:
        return frozenset(self._waiting)

    def moves(self, h: int) -> bool:
        return self.lo <= h <= self.hi


class HeldBatch(NamedTuple):
    """Part of a DataBatch held back by a receiver, still in its trees (`edges` are its own edge ids)."""

    source: str
    keys: list[Any]
    values: list[Any]
    roots: list[int]
    edges: list[int]


class ReceiverHandoff:
    """Holds tuples of incoming keys until the giver's state arrives."""

    def __init__(self, reconfig_id: int, lo: int, hi: int, giver_id: int, started_at: float) -> None:
        self.reconfig_id = reconfig_id
        self.lo = lo
        self.hi = hi
        self.giver_id = giver_id
        self.started_at = started_at
        self.buffered: list[HeldBatch] = []
        self.first_buffered_at: float | None = None
        self.moved = 0  # keys restored so far (a hand-off may come in chunks)

    def holds(self, h: int) -> bool:
        return self.lo <= h <= self.hi

    def divide(self, keys: list[Any], values: list[Any], hash_of: Callable[[Any], int]
               ) -> tuple[list[Any], list[Any], list[Any], list[Any]]:
        """(keys, values) that pass now and (keys, values) to hold, each in arrival order. O(n)."""
        lo, hi = self.lo, self.hi
        pass_k: list[Any] = []
        pass_v: list[Any] = []
        held_k: list[Any] = []
        held_v: list[Any] = []
        for key, value in zip(keys, values):
            if lo <= hash_of(key) <= hi:
                held_k.append(key)
                held_v.append(value)
            else:
                pass_k.append(key)
                pass_v.append(value)
        return pass_k, pass_v, held_k, held_v

    def buffer(self, held: HeldBatch, now: float) -> None:
        if self.first_buffered_at is None:
            self.first_buffered_at = now
        self.buffered.append(held)

    def paused_seconds(self, now: float) -> float:
        """How long the first held tuple waited: the pause moved keys saw."""
        return 0.0 if self.first_buffered_at is None else now - self.first_buffered_at


HANDOFF_CHUNK_BYTES = 4 * 2**20
"""Bytes of encoded state per StateHandoff message: far under the transport's frame cap (16 MiB)."""


def chunk_states(states: list[tuple[Any, bytes]], budget: int = HANDOFF_CHUNK_BYTES,
                 size_of_key: Callable[[Any], int] = lambda key: 64) -> list[list[tuple[Any, bytes]]]:
    """Cut (key, state) pairs into consecutive chunks of at most `budget` bytes each (estimated: the
    state's bytes plus `size_of_key`), in order; a state larger than `budget` gets a chunk of its own.
    Always at least one chunk, so an empty hand-off still says it is done."""
    chunks: list[list[tuple[Any, bytes]]] = [[]]
    used = 0
    for key, blob in states:
        cost = len(blob) + size_of_key(key)
        if chunks[-1] and used + cost > budget:
            chunks.append([])
            used = 0
        chunks[-1].append((key, blob))
        used += cost
    return chunks


class EarlyMessages:
    """Markers and hand-offs that overtook their reconfiguration's setup message."""

    def __init__(self) -> None:
        self.markers: dict[int, set[int]] = {}
        self.handoffs: dict[int, list[Any]] = {}  # reconfig id -> StateHandoff chunks, in arrival order

    def take_markers(self, reconfig_id: int) -> set[int]:
        return self.markers.pop(reconfig_id, set())
