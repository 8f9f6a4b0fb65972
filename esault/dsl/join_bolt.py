"""JoinBolt: a windowed stream join per key, each key's join an S2J chain (esault.joins.chain).

Declared by `TopologyBuilder.join(...)`: key-grouped on both inputs, so tuples
join only with tuples of the other stream that carry the same key (as Flink's
keyed interval join; emit one constant key for a global join). Each key is a
PE whose state is its chain: esault's split/merge moves keys with their chains
between SPUs (worker processes), checkpoints carry them, and `assign_logic`
to the same class with another `workers` resizes every key's chain (applied
on the key's next tuple, with the chain's exact add/remove).

Output: key = the input key, value = {"query": name, "left": r, "right": s}.
"""

from __future__ import annotations

import time as _time
from typing import Any, Mapping, Sequence

from esault.dsl.bolt import Bolt
from esault.dsl.tuple import Tuple
from esault.joins.chain import JoinChain
from esault.joins.queries import JoinQuery, extractor
from esault.joins.shedding import ShedPolicy


MAX_HELD = 512
"""Inputs a PE holds unacked before it drains its chain (max_spout_pending must not stall on them)."""


def query_from(spec: Mapping[str, Any]) -> JoinQuery:
    """A JoinQuery from its declaration {"name", "kind", "on", "band"} (what crosses to worker processes)."""
    on = spec.get("on")
    left, right = (on, on) if not isinstance(on, (list, tuple)) else on
    name = spec["name"]
    return JoinQuery(name, spec.get("kind", "equi"), extractor(left, f"{name!r} on"), extractor(right, f"{name!r} on"),
                     band=spec.get("band", 0.0))


class JoinBolt(Bolt):
    """One PE per key: an S2J chain over that key's tuples of `left` and `right`."""

    def __init__(self, left: str, right: str, queries: Sequence[Mapping[str, Any]], window: float,
                 time: Any = "ts", zeta: int = 20, workers: int = 1, shed: Mapping[str, Any] | None = None,
                 flush_interval: float | None = 1.0) -> None:
        self._left, self._right = left, right
        self._specs = list(queries)
        self._queries = [query_from(q) for q in self._specs]
        self._window, self._zeta, self._workers = window, zeta, workers
        self._time = extractor(time, "time")
        self._shed_config = dict(shed) if shed else None
        self._flush_interval = flush_interval
        self._chain = JoinChain(self._queries, window, zeta=zeta, workers=workers)
        self._policy = (ShedPolicy(**{k: v for k, v in self._shed_config.items() if k != "period"})
                        if self._shed_config else None)
        self._period_start = _time.perf_counter()
        self._busy = 0.0
        self._spu_busy_us: int | None = None  # the SPU's busy counter at the last sample
        self._last_flush = self._period_start
        self._held: list = []  # anchors of inputs whose pairs may not all be out yet (chains of 2+ workers)
        self.shed = 0
        self.joined = 0

    @staticmethod
    def esault_check_at_start(params: Mapping[str, Any]) -> None:
        """Run where each SPU starts, before any key: a predicate named "module:function" that this process
        cannot import fails the unit at start (TopologyError), as in mode="chain", not every key's tuples."""
        for spec in params.get("queries", ()):
            query_from(spec)

    # --- the data path ---

    def process(self, tup: Tuple) -> None:
        now = _time.perf_counter()
        if self._chain.size != self._workers and not self._chain.changing:
            self._resize()
        side = "R" if tup.source == self._left else "S"
        if self._policy is not None:
            self._observe(now)
            if not self._policy.admit():
                self._count_shed()
                return
        pairs = self._chain.ingest(side, self._time(tup.value), tup.value)
        pairs += self._chain.run()
        self._emit(pairs)
        if self._chain.size > 1:  # a pair may wait for its tuples to cross: the input is acked once it cannot
            self._held.append(self.defer())
            if self._input_idle() or self._flush_due(now) or len(self._held) >= MAX_HELD:
                self._drain()
        self._busy += _time.perf_counter() - now

    def _drain(self) -> None:
        """Push every tuple to its far end: every pair of the tuples so far is out; ack the inputs held."""
        self._last_flush = _time.perf_counter()
        if self._esault_emit is None:  # outside the runtime (a harness calling snapshot_state): nothing to emit
            return
        self._emit(self._chain.drain())
        held, self._held = self._held, []
        for anchor in held:
            anchor.ack()

    def _input_idle(self) -> bool:
        """Nothing waits behind this batch in the SPU's mailbox: spare time, so push every pair out now
        (a pair waits for its tuples to cross only while the join is busy)."""
        stats = getattr(self, "_esault_stats", None)
        return stats is not None and stats.backlog == 0

    def _flush_due(self, now: float) -> bool:
        return self._flush_interval is not None and now - self._last_flush >= self._flush_interval

    def on_expire(self) -> None:
        """The key went idle: push every tuple through, so the pairs still waiting to meet come out."""
        self._drain()

    def _emit(self, pairs: list) -> None:
        for p in pairs:
            self.emit(self.key, {"query": p.query, "left": p.r[2], "right": p.s[2]})
        self.joined += len(pairs)

    def _resize(self) -> None:
        pairs: list = []
        while self._chain.size < self._workers:
            pairs += self._chain.add_worker() + self._chain.run()
        while self._chain.size > self._workers:
            pairs += self._chain.remove_worker() + self._chain.run()
        self._emit(pairs)

    # --- load shedding (S2J tau1), counted ---

    def _observe(self, now: float) -> None:
        """One utilisation sample per period: the SPU's busy fraction (all its keys; this key's alone would
        read low when many keys share the SPU), or this PE's outside the runtime."""
        elapsed = now - self._period_start
        if elapsed < self._policy_period:
            return
        stats = getattr(self, "_esault_stats", None)
        if stats is not None:
            if self._spu_busy_us is None:  # a new PE: its first sample starts here
                self._spu_busy_us, self._period_start = stats.busy_us, now
                return
            if stats.busy_us == self._spu_busy_us:
                return  # the SPU counts busy time per batch: no batch finished since the last sample
            busy, self._spu_busy_us = (stats.busy_us - self._spu_busy_us) / 1e6, stats.busy_us
        else:
            busy = self._busy
        self._policy.observe(busy / elapsed if elapsed > 0 else 0.0, self._chain.size)
        self._busy, self._period_start = 0.0, now

    @property
    def _policy_period(self) -> float:
        return float((self._shed_config or {}).get("period", 1.0))

    def _count_shed(self) -> None:
        self.shed += 1
        stats = getattr(self, "_esault_stats", None)
        if stats is not None:
            stats.shed += 1

    # --- state: the chain moves and checkpoints with the key ---

    def snapshot_state(self) -> dict[str, Any]:
        """Drained first (at a checkpoint, before its barrier; when the key moves, its pairs so far leave from
        here), so no input stays held by an instance that may be dropped: the state owes no pair."""
        if self._held:
            self._drain()
        return {"chain": self._chain.snapshot(), "shed": self.shed, "joined": self.joined}

    def restore_state(self, state: dict[str, Any]) -> None:
        self._chain = JoinChain.restore(self._queries, self._window, state["chain"], zeta=self._zeta)
        self.shed, self.joined = state["shed"], state["joined"]
