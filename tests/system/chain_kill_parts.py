"""Parts of the join chain's kill -9 tests: spouts released and held by files, a join predicate that holds the
worker process it runs in, and a collector whose pairs are checkpointed (a rollback cannot double them).

Worker processes import these by module name (tests/system is on their path). The gate directory is the
environment variable CHAIN_KILL_GATES, set before the cluster starts so every worker (and any respawned one)
inherits it.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any

from esault import Bolt
from esault.dsl.chain_join_bolt import ChainJoinBolt
from esault.testing import ListSpout
from esault.testing.collect import _collected, _collected_lock

from eo_parts import hold_while

GATES_ENV = "CHAIN_KILL_GATES"


def _gate_dir() -> str:
    return os.environ.get(GATES_ENV, "")


def gate_of(directory: Path | str, pid: int) -> Path:
    """The file that holds every chain SPU of process `pid` at its next predicate call while it exists."""
    return Path(directory) / f"gate-{pid}"


def reached(gate: Path) -> Path:
    return Path(str(gate) + ".reached")


def hold_here(gate: str) -> None:
    if os.path.exists(gate):
        reached(Path(gate)).touch()
        hold_while(gate)


class GatedChainJoinBolt(ChainJoinBolt):
    """The chain join's declaration, plus a tick (every 50 ms) that blocks its SPU while gate-<this pid> exists,
    after touching gate-<pid>.reached: the SPU then handles no message (data, link messages, barriers, a split's
    or merge's), whatever data it holds, until the test removes the file."""

    esault_tick_interval = 0.05

    def open(self, context: Any) -> None:
        self.want_ticks(True)

    def on_tick(self, now: float) -> None:
        directory = _gate_dir()
        if directory:
            hold_here(str(gate_of(directory, os.getpid())))


class FileStagedSpout(ListSpout):
    """Emits items up to the number written in `limit_file` (0 while it is missing); while `gate` exists, the
    spout's SPU blocks (in backlog(), asked every tick), so it cannot switch routes for a split or merge."""

    def __init__(self, items: list, limit_file: str, gate: str = "", per_call: int = 8) -> None:
        super().__init__(items, per_call)
        self.limit_file, self.gate = limit_file, gate

    def limit(self) -> int:
        try:
            return min(len(self.items), int(Path(self.limit_file).read_text() or 0))
        except (FileNotFoundError, ValueError):
            return 0

    def backlog(self) -> int:
        hold_here(self.gate)
        return super().backlog()


class CheckpointedCollectorBolt(Bolt):
    """In the driver: counts the pairs it gets as checkpointed state, and publishes them to
    esault.testing.collected(name) only in close() (when the job stops): a rollback restores the count of
    its checkpoint, so a pair replayed after it is not counted twice, and one lost would be missing."""

    esault_placement = "driver"

    def __init__(self, name: str = "pairs") -> None:
        self._name = name

    def open(self, context: Any) -> None:
        self.pairs: dict[str, int] = {}

    def process(self, tup: Any) -> None:
        v = tup.value
        pair = f"{v['query']}|{tup.key}|{v['left']['id']}|{v['right']['id']}"
        self.pairs[pair] = self.pairs.get(pair, 0) + 1

    def snapshot_state(self) -> dict[str, Any]:
        return {"pairs": dict(self.pairs)}

    def restore_state(self, state: dict[str, Any]) -> None:
        self.pairs = dict(state["pairs"])

    def close(self) -> None:
        with _collected_lock:
            _collected[self._name] = [(pair, n) for pair, n in self.pairs.items()]


def collected_pairs(name: str = "pairs") -> Counter:
    from esault.testing import collected

    out: Counter = Counter()
    for pair, n in collected(name):
        query, key, left, right = pair.split("|")
        out[(query, key, int(left), int(right))] += n
    return out
