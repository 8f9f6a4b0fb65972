"""A windowed stream join: orders x payments, per customer, an S2J chain per key (docs/JOINS.md).

Run it:  esault run examples/joins.py
Orders and payments arrive per customer (the tuple key). Query "paid" pairs a
payment with its order (equi on the order id) when they are at most 30 time
units apart; query "similar" (sharing the chain) pairs an order with any
payment of the same customer whose amount is within 1. The counts land in
<data_dir>/joins/pairs.json and are checked against a nested loop (`oracle`).
"""

from __future__ import annotations

import collections
import json
import random
from pathlib import Path
from typing import Any

from esault import Bolt, ReplayingSpout, TopologyBuilder

WINDOW = 30


def events(kind: str, total: int, seed: int) -> list[tuple[str, dict]]:
    """Deterministic (customer, event) pairs; time goes up by 0-2 per event."""
    rnd = random.Random(f"{kind}-{seed}")
    out, ts = [], 0
    for i in range(total):
        ts += rnd.randint(0, 2)
        order = rnd.randrange(total // 2) if kind == "payment" else i // 2
        out.append((f"c{order % 20}", {"ts": ts, "order": order, "amount": rnd.randint(1, 100), "id": i}))
    return out


def oracle(total: int, seed: int = 1) -> dict[str, int]:
    """Pairs each query must produce (nested loop)."""
    counts = collections.Counter()
    for ck, o in events("order", total, seed):
        for pk, p in events("payment", total, seed):
            if ck == pk and abs(o["ts"] - p["ts"]) <= WINDOW:
                counts["paid"] += o["order"] == p["order"]
                counts["similar"] += abs(o["amount"] - p["amount"]) <= 1
    return dict(counts)


class EventSpout(ReplayingSpout):
    """Emits `total` seeded events of one kind; its position is all a restart needs."""

    def __init__(self, kind: str, total: int = 2000, seed: int = 1) -> None:
        super().__init__()
        self.items, self.position = events(kind, total, seed), 0

    def next_tuple(self) -> None:
        end = min(self.position + 32, len(self.items))
        for i in range(self.position, end):
            self.emit(*self.items[i], msg_id=i)
        self.position = end
        if self.position == len(self.items):
            self.finish()

    def snapshot_position(self) -> int:
        return self.position

    def restore_position(self, position: int) -> None:
        self.position = int(position)


class PairCounter(Bolt):
    """Counts joined pairs per query; writes them to <data_dir>/pairs.json when the job stops."""

    def open(self, context: Any) -> None:
        self.counts: dict[str, int] = {}
        self.path = str(Path(context.data_dir) / "pairs.json")

    def process(self, tup: Any) -> None:
        query = tup.value["query"]
        self.counts[query] = self.counts.get(query, 0) + 1

    def close(self) -> None:
        Path(self.path).write_text(json.dumps(self.counts, sort_keys=True))


def build_topology(total: int = 2000, seed: int = 1, workers: int = 3):
    b = TopologyBuilder("joins")
    b.set_spout("orders", EventSpout, params={"kind": "order", "total": total, "seed": seed})
    b.set_spout("payments", EventSpout, params={"kind": "payment", "total": total, "seed": seed})
    b.join("paid", "orders", "payments", on="order", window=WINDOW, workers=workers, parallelism=2,
           also=[{"name": "similar", "kind": "band", "on": "amount", "band": 1}])
    b.set_bolt("count", PairCounter).global_grouping("paid")
    return b.build()


def summarize(job: Any) -> str:
    """Printed by `esault run`: pairs per query, against the nested loop over the same events."""
    path = Path(job.data_dir) / "pairs.json"
    counts = json.loads(path.read_text()) if path.exists() else {}
    expected = oracle(2000)
    return "\n".join(f"join {q!r}: {counts.get(q, 0)} pairs (nested loop: {n})" for q, n in sorted(expected.items()))
