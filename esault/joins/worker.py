"""One S2J chain worker as a pure state machine: messages in, effects (sends, joined pairs) out.

R tuples enter the chain's left end and move right; S tuples enter the right
end and move left. A worker stores the tuples that are currently "at" it. A
tuple arriving at a worker probes the other side's stored tuples there, so
two tuples are compared when they pass each other. Tuples move in blocks of
`zeta` (TUPLE_BLK), when this worker holds clearly more than its neighbour
(SIZE_CHG tells each worker its neighbours' sizes).

MP-2PF (two-phase forwarding) catches the one race: an R block and an S block
crossing on the same link. The sender keeps each R block until its ACK; an S
block arriving from the right is also compared with those unacknowledged R
tuples. Links are FIFO and a worker acknowledges a block before it forwards
anything, so an R tuple is still unacknowledged exactly when it crossed the S
tuple in flight: every pair meets exactly once (tests/unit/test_join_chain.py
checks it against a nested loop under random interleavings).

Window: event time `ts`, non-decreasing per stream. Pairs join iff
|ts_r - ts_s| <= window. A stored r is dropped once an S tuple newer than
ts_r + window reached this worker: S tuples reach a worker in order, so every
S tuple that could still join r has passed r by then.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Sequence

from esault.joins.protocol import LEFT, RIGHT, Ack, Joined, Send, SizeChange, TupleBlock
from esault.joins.queries import JoinIndex, JoinQuery


class SideStore:
    """One side's stored tuples at a worker, oldest first, with one index per query."""

    def __init__(self, side: str, queries: Sequence[JoinQuery]) -> None:
        self.side = side
        self.tuples: dict[int, tuple] = {}  # seq -> (seq, ts, value); insertion order = age order
        self.indexes: list[tuple[JoinQuery, JoinIndex]] = [(q, q.index(side)) for q in queries]

    def __len__(self) -> int:
        return len(self.tuples)

    def add(self, tup: tuple) -> None:
        self.tuples[tup[0]] = tup
        for _, index in self.indexes:
            index.add(tup)

    def remove(self, tup: tuple) -> None:
        del self.tuples[tup[0]]
        for _, index in self.indexes:
            index.remove(tup)

    def oldest(self, n: int, upto: int | None = None) -> list[tuple]:
        """The n oldest tuples (only those with seq <= upto, if given: stores are in seq order)."""
        out = []
        for tup in self.tuples.values():
            if len(out) == n or (upto is not None and tup[0] > upto):
                break
            out.append(tup)
        return out

    def holds_upto(self, bound: int) -> bool:
        """Whether a tuple with seq <= bound is still stored here."""
        return bool(self.tuples) and next(iter(self.tuples)) <= bound

    def expire(self, before: float) -> int:
        """Drop tuples with ts < before from the old end; returns how many."""
        dropped = 0
        while self.tuples:
            tup = next(iter(self.tuples.values()))
            if tup[1] >= before:
                break
            self.remove(tup)
            dropped += 1
        return dropped


class EntryNumbering:
    """Where tuples enter a chain: each stream's sequence numbers (the order every store keeps) and its
    newest event time. Event time must not go back within a stream: a late tuple takes the newest (counted
    in `late`), so the window stays exact."""

    def __init__(self) -> None:
        self.seq = {"R": 0, "S": 0}
        self.last_ts: dict[str, float | None] = {"R": None, "S": None}
        self.late = 0

    def stamp(self, side: str, ts: float) -> tuple[int, float]:
        """(seq, ts) for the next tuple of `side`."""
        last = self.last_ts[side]
        if last is not None and ts < last:
            self.late += 1
            ts = last
        self.last_ts[side] = ts
        self.seq[side] += 1
        return self.seq[side], ts


def within(window: float, r: tuple, s: tuple) -> bool:
    return abs(r[1] - s[1]) <= window


def time_span(ts: float, window: float) -> tuple[float, float]:
    """The event times a tuple at `ts` can join, widened by far more than a rounding error (an index may cut its
    probe to this range; `within` decides exactly); the whole line when ts or window is not finite."""
    slack = (abs(ts) + window) * 1e-9
    lo, hi = ts - window - slack, ts + window + slack
    if lo != lo or hi != hi:  # nan
        return -math.inf, math.inf
    return lo, hi


class ChainWorker:
    """A chain worker's stored windows, in-flight blocks and neighbour view; see the module docstring."""

    def __init__(self, queries: Sequence[JoinQuery], window: float, zeta: int = 20, max_inflight: int = 4) -> None:
        if zeta < 1 or max_inflight < 1:
            raise ValueError(f"zeta and max_inflight must be >= 1, got {zeta}, {max_inflight}")
        self.queries, self.window, self.zeta, self.max_inflight = tuple(queries), window, zeta, max_inflight
        self.r = SideStore("R", self.queries)
        self.s = SideStore("S", self.queries)
        self.sent_right: dict[int, tuple] = {}  # R blocks sent right, not yet acknowledged
        self.r_flight = SideStore("R", self.queries)  # the tuples of sent_right, indexed for the crossing probe
        self.sent_left: dict[int, tuple] = {}  # S blocks sent left, not yet acknowledged
        self.has_left = self.has_right = False
        self.paused = {LEFT: False, RIGHT: False}  # no blocks that way (a chain change is quiescing the link)
        self.draining = False  # push everything to the ends (end of input)
        self.drain_to: dict[str, int | None] = {"R": None, "S": None}  # a flush round: push seq <= bound on
        self.known_right_r = 0  # R stored by the right neighbour, as last heard (+ what it acknowledged since)
        self.known_left_s = 0
        self.wm_r = self.wm_s = -math.inf  # newest ts of each side that passed this worker
        self.next_block = 0
        self.reported = (0, 0)
        self.expired = 0
        self.comparisons = 0

    # --- inputs ---

    def enter(self, side: str, tup: tuple) -> list:
        """A new tuple enters the chain at this worker (the left end for R, the right end for S)."""
        effects: list = []
        self._arrive(side, (tup,), effects)
        self._settle(effects)
        return effects

    def receive(self, message: Any, direction: int) -> list:
        """A message from the neighbour in `direction` (LEFT or RIGHT)."""
        effects: list = []
        if isinstance(message, TupleBlock):
            self._arrive(message.side, message.tuples, effects)
            effects.append(Send(direction, Ack(message.side, message.block)))  # before any forwarding: MP-2PF
        elif isinstance(message, Ack):
            sent = self.sent_right if message.side == "R" else self.sent_left
            block = sent.pop(message.block)
            if message.side == "R":
                self.known_right_r += len(block)
                for r in block:
                    self.r_flight.remove(r)
            else:
                self.known_left_s += len(block)
        elif isinstance(message, SizeChange):
            if direction == RIGHT:
                self.known_right_r = message.r_size
            else:
                self.known_left_s = message.s_size
        else:
            raise TypeError(f"chain worker got an unknown message {message!r:.80}")
        self._settle(effects)
        return effects

    def push(self) -> list:
        """Forward what balance (or draining) asks for: after a pause ends or draining starts."""
        effects: list = []
        self._settle(effects)
        return effects

    # --- the join ---

    def _arrive(self, side: str, tuples: Iterable[tuple], effects: list) -> None:
        window = self.window
        if side == "R":
            for r in tuples:
                lo, hi = time_span(r[1], window)
                for query, index in self.s.indexes:
                    for s in index.probe(r[2], lo, hi):
                        if abs(r[1] - s[1]) <= window:
                            effects.append(Joined(query.name, r, s))
                self.comparisons += len(self.s)
                self.r.add(r)
                if r[1] > self.wm_r:
                    self.wm_r = r[1]
        else:
            for s in tuples:
                lo, hi = time_span(s[1], window)
                for query, index in self.r.indexes:
                    for r in index.probe(s[2], lo, hi):
                        if abs(r[1] - s[1]) <= window:
                            effects.append(Joined(query.name, r, s))
                if self.sent_right:  # R tuples crossing s on the link right now (indexed like the store)
                    for query, index in self.r_flight.indexes:
                        for r in index.probe(s[2], lo, hi):
                            if abs(r[1] - s[1]) <= window:
                                effects.append(Joined(query.name, r, s))
                self.comparisons += len(self.r)
                self.s.add(s)
                if s[1] > self.wm_s:
                    self.wm_s = s[1]

    def join_stored(self, r_tuples: Iterable[tuple], s_store: SideStore) -> list:
        """Pairs of r_tuples with s_store's tuples (used when two workers merge: they had not met yet)."""
        out = []
        for r in r_tuples:
            for query, index in s_store.indexes:
                for s in index.probe(r[2], *time_span(r[1], self.window)):
                    if within(self.window, r, s):
                        out.append(Joined(query.name, r, s))
        return out

    # --- after every step: expire, forward, report size ---

    def _settle(self, effects: list) -> None:
        self.expired += self.r.expire(self.wm_s - self.window) + self.s.expire(self.wm_r - self.window)
        if self.has_right and not self.paused[RIGHT]:
            self._forward("R", self.r, self.sent_right, RIGHT, effects)
        if self.has_left and not self.paused[LEFT]:
            self._forward("S", self.s, self.sent_left, LEFT, effects)
        # Each neighbour balances by one count: the left one sends me R (it reads r_size), the right one S
        # (s_size); each hears only when its count moved by zeta (half the messages of telling both of either).
        r_size, s_size = len(self.r), len(self.s)
        told_r, told_s = self.reported
        if abs(r_size - told_r) >= self.zeta:
            told_r = r_size
            if self.has_left:
                effects.append(Send(LEFT, SizeChange(r_size, s_size)))
        if abs(s_size - told_s) >= self.zeta:
            told_s = s_size
            if self.has_right:
                effects.append(Send(RIGHT, SizeChange(r_size, s_size)))
        self.reported = (told_r, told_s)

    def _forward(self, side: str, store: SideStore, sent: dict[int, tuple], direction: int, effects: list) -> None:
        zeta = self.zeta
        while store and len(sent) < self.max_inflight:
            known = self.known_right_r if side == "R" else self.known_left_s
            theirs = known + sum(map(len, sent.values()))
            bound = self.drain_to[side]
            upto = None
            if self.draining:
                n = min(zeta, len(store))
            elif bound is not None and store.holds_upto(bound):
                n, upto = zeta, bound
            elif len(store) >= theirs + 2 * zeta:
                n = zeta
            else:
                return
            block = tuple(store.oldest(n, upto))
            for tup in block:
                store.remove(tup)
            if side == "R":
                for tup in block:
                    self.r_flight.add(tup)
            self.next_block += 1
            sent[self.next_block] = block
            effects.append(Send(direction, TupleBlock(side, self.next_block, block)))

    # --- chain changes ---

    def absorb(self, right: "ChainWorker") -> list:
        """Fold the worker to this one's right into it: the R here and the S there had not met, so they join
        now; stores keep age order (the right one's R went further right: older; this one's S are older)."""
        out = self.join_stored(list(self.r.tuples.values()), right.s)
        mine = list(self.r.tuples.values())
        for t in mine:
            self.r.remove(t)
        for t in list(right.r.tuples.values()) + mine:
            self.r.add(t)
        for t in right.s.tuples.values():
            self.s.add(t)
        self.wm_r, self.wm_s = min(self.wm_r, right.wm_r), min(self.wm_s, right.wm_s)
        self.expired += right.expired
        self.known_right_r = right.known_right_r
        return out

    def drop_in_flight(self) -> int:
        """Forget every unacknowledged block (its receiver is gone with its process); how many tuples."""
        dropped = sum(map(len, self.sent_right.values())) + sum(map(len, self.sent_left.values()))
        self.sent_right.clear()
        self.sent_left.clear()
        self.r_flight = SideStore("R", self.queries)
        return dropped

    def quiet_towards(self, direction: int) -> bool:
        return not (self.sent_right if direction == RIGHT else self.sent_left)

    def snapshot(self) -> dict:
        """msgpack-ready state of a quiescent worker (no unacknowledged blocks)."""
        if self.sent_left or self.sent_right:
            raise RuntimeError("snapshot of a chain worker with blocks in flight: run the chain to quiet first")
        return {"r": [list(t) for t in self.r.tuples.values()], "s": [list(t) for t in self.s.tuples.values()],
                "wm": [_finite(self.wm_r), _finite(self.wm_s)], "known": [self.known_right_r, self.known_left_s],
                "block": self.next_block, "expired": self.expired}

    def restore(self, state: dict) -> None:
        for t in state["r"]:
            self.r.add(tuple(t))
        for t in state["s"]:
            self.s.add(tuple(t))
        self.wm_r, self.wm_s = (-math.inf if w is None else w for w in state["wm"])
        self.known_right_r, self.known_left_s = state["known"]
        self.next_block, self.expired = state["block"], state["expired"]
        self.reported = (len(self.r), len(self.s))


def _finite(x: float) -> float | None:
    return None if x == -math.inf else x
