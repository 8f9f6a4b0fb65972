"""The key hand-off state machines of a reconfiguration (docs/PROTOCOLS.md).

A reconfiguration moves any number of key ranges between the SPUs of one
unit at once (a split and a merge are one range each).
Giver: an SPU that loses ranges. It keeps processing every tuple it
receives; once an EpochMarker arrived from every upstream SPU, no tuple of a
moved key can reach it any more, so the moved PEs' state is final and goes
to each range's receiver.
Receiver: an SPU that gains ranges. It buffers, in arrival order, only the
tuples of incoming keys whose giver has not handed over yet. A giver's ranges
are released (their held tuples run first, in order) once its last state
chunk is in *and* every downstream SPU said MarkerSeen for it: the giver sent
a ForwardMarker down every output channel after its last output of the moved
keys, so those outputs are ahead of anything the receiver emits for them
(key order holds downstream too, across processes). Keys outside incoming
ranges never pause. An SPU may give and receive in one reconfiguration
(different ranges).
"""

from __future__ import annotations

from bisect import bisect_right
from collections import deque
from typing import Any, Callable, Iterable, NamedTuple


class GiverHandoff:
    """Counts EpochMarkers until every upstream SPU has switched tables."""

    def __init__(self, reconfig_id: int, ranges: Iterable[tuple[int, int, int]], upstream: Iterable[int],
                 retire: bool) -> None:
        self.reconfig_id = reconfig_id
        self.ranges = tuple(sorted(ranges))  # (lo, hi, receiver)
        self.retire = retire
        self._waiting = set(upstream)

    def marker(self, sender: int) -> None:
        self._waiting.discard(sender)

    def peers_lost(self, spus: Iterable[int]) -> None:
        """Upstream SPUs that died with their worker send nothing more: as good as their marker."""
        self._waiting.difference_update(spus)

    @property
    def ready(self) -> bool:
        """True once no upstream SPU can still send a tuple of a moved key."""
        return not self._waiting

    def by_receiver(self) -> dict[int, list[tuple[int, int]]]:
        """receiver -> the (lo, hi) ranges it gets from this giver, in key order."""
        out: dict[int, list[tuple[int, int]]] = {}
        for lo, hi, receiver in self.ranges:
            out.setdefault(receiver, []).append((lo, hi))
        return out


class HeldBatch(NamedTuple):
    """Part of a DataBatch held back by a receiver, still in its trees (`edges` are its own edge ids)."""

    source: str
    keys: list[Any]
    values: list[Any]
    roots: list[int]
    edges: list[int]


class RangeSet:
    """Disjoint inclusive hash ranges with a bisect membership test."""

    __slots__ = ("_los", "_his")

    def __init__(self, ranges: Iterable[tuple[int, int]]) -> None:
        pairs = sorted(ranges)
        self._los = [lo for lo, _ in pairs]
        self._his = [hi for _, hi in pairs]

    def __contains__(self, h: int) -> bool:
        i = bisect_right(self._los, h) - 1
        return i >= 0 and h <= self._his[i]



class ReceiverHandoff:
    """Holds tuples of incoming keys until their giver's state arrives."""

    def __init__(self, reconfig_id: int, ranges: Iterable[tuple[int, int, int]], downstream: Iterable[int] = ()
                 ) -> None:
        self.reconfig_id = reconfig_id
        self.ranges = tuple(sorted(ranges))  # (lo, hi, giver)
        self.pending_givers = {giver for _, _, giver in self.ranges}
        self.downstream = frozenset(downstream)  # SPUs whose MarkerSeen each giver's release waits for
        self._state_in: set[int] = set()  # givers whose last state chunk arrived
        self._lost: set[int] = set()  # givers that died with their worker (PeersLost)
        self._seen: dict[int, set[int]] = {}  # giver -> downstream SPUs that saw its ForwardMarker
        self._pending = RangeSet((lo, hi) for lo, hi, _ in self.ranges)
        self.buffered: list[HeldBatch] = []
        self.first_buffered_at: float | None = None
        self.paused = 0.0  # longest wait of a held tuple over the givers released so far
        self.moved = 0  # keys restored so far (a hand-off may come in chunks)

    @property
    def done(self) -> bool:
        return not self.pending_givers

    def divide(self, keys: list[Any], values: list[Any], hash_of: Callable[[Any], int]
               ) -> tuple[list[Any], list[Any], list[Any], list[Any]]:
        """(keys, values) that pass now and (keys, values) to hold, each in arrival order. O(n log r)."""
        return _divide(keys, values, hash_of, self._pending)

    def buffer(self, held: HeldBatch, now: float) -> None:
        if self.first_buffered_at is None:
            self.first_buffered_at = now
        self.buffered.append(held)

    def state_done(self, giver: int) -> None:
        """The giver's last chunk is in: its keys' state is complete here."""
        self._state_in.add(giver)

    def marker_seen(self, giver: int, sender: int) -> None:
        self._seen.setdefault(giver, set()).add(sender)

    def downstream_changed(self, spus: Iterable[int]) -> None:
        """The unit downstream reconfigured first (an atomic group commits downstream first): its SPUs now
        are the ones the givers' ForwardMarkers reach, since givers and receivers both read from it."""
        self.downstream = frozenset(spus)

    def peers_lost(self, spus: Iterable[int]) -> None:
        """SPUs that died with their worker, without exactly_once (no rollback follows). A lost giver sends no
        more state: its keys go on from what arrived (the rest of their state died with it), and no marker of
        its may ever come; a lost downstream SPU answers no marker: what was sent to it is lost with it
        (acking replays it), so there is no order there to keep."""
        lost = set(spus)
        self._lost |= lost & self.pending_givers
        self.downstream = self.downstream - lost

    def ready_givers(self) -> list[int]:
        """Pending givers whose state is in and whose ForwardMarker every downstream SPU has seen (or lost)."""
        return sorted(g for g in self.pending_givers if g in self._lost or (
            g in self._state_in and self.downstream <= self._seen.get(g, set())))

    def release(self, giver: int, now: float, hash_of: Callable[[Any], int], new_edge: Callable[[], int]
                ) -> list[HeldBatch]:
        """The giver's state is all here: its ranges stop holding; returns their held tuples (in arrival
        order, to run before anything newer). A batch holding other givers' keys too keeps those under
        fresh edge ids; the released part's edges hand its share of the tree over to them."""
        if giver not in self.pending_givers:
            return []
        self.paused = max(self.paused, self.paused_seconds(now))
        self.pending_givers.discard(giver)
        released = RangeSet((lo, hi) for lo, hi, g in self.ranges if g == giver)
        self._pending = RangeSet((lo, hi) for lo, hi, g in self.ranges if g in self.pending_givers)
        out: list[HeldBatch] = []
        kept: list[HeldBatch] = []
        for held in self.buffered:
            keep_k, keep_v, run_k, run_v = _divide(held.keys, held.values, hash_of, released)
            if not keep_k:
                out.append(held)
            elif not run_k:
                kept.append(held)
            else:
                own = [new_edge() for _ in held.roots]
                out.append(HeldBatch(held.source, run_k, run_v, held.roots, [e ^ o for e, o in zip(held.edges, own)]))
                kept.append(HeldBatch(held.source, keep_k, keep_v, held.roots, own))
        self.buffered = kept
        if not kept:
            self.first_buffered_at = None
        return out

    def paused_seconds(self, now: float) -> float:
        """How long the oldest held tuple has waited: the pause moved keys see."""
        return 0.0 if self.first_buffered_at is None else now - self.first_buffered_at


def _divide(keys: list[Any], values: list[Any], hash_of: Callable[[Any], int], held: RangeSet
            ) -> tuple[list[Any], list[Any], list[Any], list[Any]]:
    pass_k: list[Any] = []
    pass_v: list[Any] = []
    held_k: list[Any] = []
    held_v: list[Any] = []
    for key, value in zip(keys, values):
        if hash_of(key) in held:
            held_k.append(key)
            held_v.append(value)
        else:
            pass_k.append(key)
            pass_v.append(value)
    return pass_k, pass_v, held_k, held_v


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
    """Markers, hand-offs and MarkerSeen answers that overtook their reconfiguration's setup message.

    One that comes after this SPU finished its side of the reconfiguration (a lost giver's chunk, an answer
    from a downstream SPU no longer waited for) is late, not early: it is dropped, not kept for good."""

    FINISHED_KEPT = 64
    """How many finished reconfigurations' ids are remembered to tell late messages from early ones."""

    def __init__(self) -> None:
        self.markers: dict[int, set[int]] = {}
        self.handoffs: dict[int, list[Any]] = {}  # reconfig id -> StateHandoff chunks, in arrival order
        self.seen: dict[int, list[tuple[int, int]]] = {}  # reconfig id -> (giver, downstream SPU)
        self._finished: deque[int] = deque(maxlen=self.FINISHED_KEPT)

    def forget(self, reconfig_id: int) -> None:
        """The reconfiguration was called off, or this SPU's side of it is done: drop whatever came early for
        it, and keep nothing that comes for it later."""
        self.markers.pop(reconfig_id, None)
        self.handoffs.pop(reconfig_id, None)
        self.seen.pop(reconfig_id, None)
        if reconfig_id not in self._finished:
            self._finished.append(reconfig_id)

    def keep_handoff(self, msg: Any) -> bool:
        """Keep a StateHandoff chunk that came before its PrepareReceive (False: late, not kept)."""
        if msg.reconfig_id in self._finished:
            return False
        self.handoffs.setdefault(msg.reconfig_id, []).append(msg)
        return True

    def keep_seen(self, reconfig_id: int, giver: int, sender: int) -> bool:
        """Keep a MarkerSeen that came before its PrepareReceive (False: late, not kept)."""
        if reconfig_id in self._finished:
            return False
        self.seen.setdefault(reconfig_id, []).append((giver, sender))
        return True

    def take_markers(self, reconfig_id: int) -> set[int]:
        return self.markers.pop(reconfig_id, set())
