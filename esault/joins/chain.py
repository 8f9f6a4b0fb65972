"""The S2J join chain as a pure, deterministic model: workers, FIFO links, and chain changes.

`JoinChain` owns the workers (in chain order) and one FIFO queue per directed
link. `ingest` enters a tuple at its end of the chain; `deliver(link)`
delivers the oldest message on one link; `run()` delivers until every link is
empty. Which link goes next is the caller's choice, so tests drive any
interleaving; the runtime just calls `run()`.

Adding or removing a worker first pauses block traffic on the links it
touches; once those links are empty (every block acknowledged) the change is
applied at once: an added worker starts empty, a removed worker's tuples merge
into its neighbour and the pairs the two had not yet compared (R of the left
one with S of the right one) are joined then. No pair is lost or produced twice.
"""

from __future__ import annotations

import itertools
from collections import deque
from typing import Any, Callable, Sequence

from esault.joins.protocol import LEFT, RIGHT, Joined, Send
from esault.joins.queries import JoinQuery
from esault.joins.worker import ChainWorker, EntryNumbering

Link = tuple[int, int]  # (from worker id, to worker id)


class ChainChangeError(RuntimeError):
    """A chain change that cannot be made (one at a time; at least one worker stays)."""


class JoinChain:
    """Workers in order, links between neighbours, and at most one pending chain change."""

    def __init__(self, queries: Sequence[JoinQuery], window: float, zeta: int = 20, workers: int = 1,
                 max_inflight: int = 4) -> None:
        if workers < 1:
            raise ValueError(f"a join chain needs at least one worker, got {workers}")
        if not queries:
            raise ValueError("a join chain needs at least one query")
        self.queries, self.window, self.zeta, self.max_inflight = tuple(queries), window, zeta, max_inflight
        self._ids = itertools.count()
        self.workers: dict[int, ChainWorker] = {}
        self.order: list[int] = []
        self.links: dict[Link, deque] = {}
        self.entry = EntryNumbering()
        self.messages = 0
        self._change: tuple | None = None  # ("add", position) or ("remove", left_id, right_id)
        for _ in range(workers):
            self._insert(len(self.order), self._new_worker())

    # --- data ---

    def ingest(self, side: str, ts: float, value: Any) -> list[Joined]:
        """A new tuple of stream R ("left") or S ("right"); returns pairs joined at its entry worker
        (numbered and its late event time raised by EntryNumbering)."""
        if side not in ("R", "S"):
            raise ValueError(f"side must be 'R' (left stream) or 'S' (right stream), got {side!r}")
        seq, ts = self.entry.stamp(side, ts)
        entry = self.order[0] if side == "R" else self.order[-1]
        return self._apply(entry, self.workers[entry].enter(side, (seq, ts, value)))

    @property
    def late(self) -> int:
        return self.entry.late

    def busy_links(self) -> list[Link]:
        return [link for link, queue in self.links.items() if queue]

    def deliver(self, link: Link) -> list[Joined]:
        """Deliver the oldest message on `link`; returns the pairs it produced."""
        src, dst = link
        message = self.links[link].popleft()
        self.messages += 1
        direction = LEFT if self.order.index(src) < self.order.index(dst) else RIGHT
        out = self._apply(dst, self.workers[dst].receive(message, direction))
        return out + self._try_change()

    def run(self, choose: Callable[[list[Link]], Link] | None = None, max_steps: int | None = None) -> list[Joined]:
        """Deliver messages (the first busy link, or `choose`'s pick) until the links are empty."""
        out: list[Joined] = []
        steps = 0
        while (busy := self.busy_links()) and (max_steps is None or steps < max_steps):
            out += self.deliver(choose(busy) if choose else busy[0])
            steps += 1
        return out + self._try_change()

    def drain(self) -> list[Joined]:
        """End of input: push every tuple to its far end, so every pair in the window has met."""
        out: list[Joined] = []
        for wid in self.order:
            self.workers[wid].draining = True
        for wid in list(self.order):
            out += self._apply(wid, self.workers[wid].push())
        out += self.run()
        for wid in self.order:
            self.workers[wid].draining = False
        return out

    # --- chain changes ---

    @property
    def size(self) -> int:
        return len(self.order)

    @property
    def changing(self) -> bool:
        return self._change is not None

    def add_worker(self, position: int | None = None) -> list[Joined]:
        """Insert an empty worker at `position` (default: the right end) once its link is quiet."""
        position = len(self.order) if position is None else position
        if not 0 <= position <= len(self.order):
            raise ChainChangeError(f"position {position} is outside the chain of {len(self.order)} workers")
        self._start_change(("add", position))
        return self._try_change()

    def remove_worker(self, position: int | None = None) -> list[Joined]:
        """Merge the worker at `position` (default: the last) into its neighbour once their links are quiet."""
        if len(self.order) < 2:
            raise ChainChangeError("cannot remove the only worker of a join chain")
        position = len(self.order) - 1 if position is None else position
        if not 0 <= position < len(self.order):
            raise ChainChangeError(f"position {position} is outside the chain of {len(self.order)} workers")
        left = position if position + 1 < len(self.order) else position - 1
        self._start_change(("remove", self.order[left], self.order[left + 1]))
        return self._try_change()

    def _start_change(self, change: tuple) -> None:
        if self._change is not None:
            raise ChainChangeError(f"a chain change is already under way ({self._change[0]}); one at a time")
        self._change = change
        for a, b in self._links_to_quiesce():
            self.workers[a].paused[RIGHT] = True
            self.workers[b].paused[LEFT] = True

    def _links_to_quiesce(self) -> list[tuple[int, int]]:
        """Adjacent worker pairs (left id, right id) whose links must be empty before the change."""
        change = self._change
        if change is None:
            return []
        if change[0] == "add":
            p = change[1]
            return [(self.order[p - 1], self.order[p])] if 0 < p < len(self.order) else []
        i = self.order.index(change[1])
        return [(self.order[j], self.order[j + 1]) for j in range(max(i - 1, 0), min(i + 2, len(self.order) - 1))]

    def _try_change(self) -> list[Joined]:
        if self._change is None:
            return []
        pairs = self._links_to_quiesce()
        if any(self.links[(a, b)] or self.links[(b, a)] for a, b in pairs):
            return []
        change, self._change = self._change, None
        for a, b in pairs:
            self.workers[a].paused[RIGHT] = False
            self.workers[b].paused[LEFT] = False
        if change[0] == "add":
            wid = self._new_worker()
            self._insert(change[1], wid)
            for nid in self.order[max(change[1] - 1, 0): change[1] + 2]:
                self.workers[nid].known_right_r = self.workers[nid].known_left_s = 0  # a new neighbour: empty
            touched = self.order[max(change[1] - 1, 0): change[1] + 2]
            out: list[Joined] = []
        else:
            out = self._merge(change[1], change[2])
            i = self.order.index(change[1])
            touched = self.order[max(i - 1, 0): i + 2]
        for wid in touched:
            out += self._apply(wid, self.workers[wid].push())
        return out

    def _new_worker(self) -> int:
        wid = next(self._ids)
        self.workers[wid] = ChainWorker(self.queries, self.window, self.zeta, self.max_inflight)
        return wid

    def _insert(self, position: int, wid: int) -> None:
        self.order.insert(position, wid)
        self._relink()

    def _relink(self) -> None:
        """Links between neighbours (existing queues kept), and each worker's view of its neighbours."""
        wanted = {}
        for a, b in zip(self.order, self.order[1:]):
            wanted[(a, b)] = self.links.get((a, b)) or deque()
            wanted[(b, a)] = self.links.get((b, a)) or deque()
        for link, queue in self.links.items():
            if link not in wanted and queue:
                raise AssertionError(f"link {link} dropped with messages in it")  # quiescing prevents this
        self.links = wanted
        for i, wid in enumerate(self.order):
            w = self.workers[wid]
            left, right = i > 0, i + 1 < len(self.order)
            if left != w.has_left:
                w.known_left_s = 0
            if right != w.has_right:
                w.known_right_r = 0
            w.has_left, w.has_right = left, right

    def _merge(self, left_id: int, right_id: int) -> list[Joined]:
        """Fold the right worker into the left one; join the R of left with the S of right (not met yet)."""
        out = self.workers[left_id].absorb(self.workers.pop(right_id))
        self.order.remove(right_id)
        self._relink()
        return out

    # --- effects ---

    def _apply(self, wid: int, effects: list) -> list[Joined]:
        out = []
        i = self.order.index(wid)
        for effect in effects:
            if isinstance(effect, Send):
                to = self.order[i + (1 if effect.direction == RIGHT else -1)]
                self.links[(wid, to)].append(effect.message)
            else:
                out.append(effect)
        return out

    # --- observation and checkpoints ---

    def stored(self) -> tuple[int, int]:
        """How many R and S tuples the chain holds (in workers and in flight)."""
        r = sum(len(w.r) + sum(map(len, w.sent_right.values())) for w in self.workers.values())
        s = sum(len(w.s) + sum(map(len, w.sent_left.values())) for w in self.workers.values())
        return r, s

    def loads(self) -> list[tuple[int, int]]:
        """(R, S) stored per worker, in chain order."""
        return [(len(self.workers[w].r), len(self.workers[w].s)) for w in self.order]

    def snapshot(self) -> dict:
        """msgpack-ready state; the chain must be quiet (run() first) and not mid-change."""
        if self.busy_links() or self._change is not None:
            raise RuntimeError("snapshot of a join chain with messages in flight: run() it to quiet first")
        return {"workers": [self.workers[w].snapshot() for w in self.order], "seq": dict(self.entry.seq),
                "last_ts": dict(self.entry.last_ts), "late": self.entry.late, "messages": self.messages}

    @classmethod
    def restore(cls, queries: Sequence[JoinQuery], window: float, state: dict, zeta: int = 20,
                max_inflight: int = 4) -> "JoinChain":
        chain = cls(queries, window, zeta, len(state["workers"]), max_inflight)
        for wid, wstate in zip(chain.order, state["workers"]):
            chain.workers[wid].restore(wstate)
        chain.entry.seq, chain.entry.last_ts = dict(state["seq"]), dict(state["last_ts"])
        chain.entry.late, chain.messages = state["late"], state["messages"]
        return chain
