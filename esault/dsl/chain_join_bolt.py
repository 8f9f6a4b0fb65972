"""ChainJoinBolt: a join whose S2J chain workers are SPUs (docs/JOINS.md, "A chain of SPUs").

Declared by `TopologyBuilder.join(..., mode="chain", parallelism=N)`: N SPUs
in a chain (on worker processes: spread over them), R entering the first, S
the last. The class only carries the join's declaration (it imports no runtime
code): the runtime sees `esault_chain` and runs its SPUs as bolt SPUs whose processing part is
`esault.datapath.chain_spu.ChainProcessing`, which drives an `esault.joins.node.ChainNode`.
A chain join is global: tuples join whatever their keys (put the key in `on`
for an equi-join), and each pair leaves with the left tuple's key.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from esault.dsl.bolt import Bolt
from esault.dsl.tuple import Tuple
from esault.dsl.join_bolt import query_from
from esault.joins.queries import extractor
from esault.joins.shedding import ShedPolicy


class ChainJoinBolt(Bolt):
    """The declaration of a chain join; see the module docstring. process() is never called."""

    esault_chain = True
    """Its SPUs are links of one chain: the runtime runs them with ChainProcessing (esault.datapath.actors)."""

    def __init__(self, left: str, right: str, queries: Sequence[Mapping[str, Any]], window: float,
                 time: Any = "ts", zeta: int = 20, shed: Mapping[str, Any] | None = None,
                 flush_interval: float = 0.2, max_delay: float = 1.0) -> None:
        for name, v in (("flush_interval", flush_interval), ("max_delay", max_delay)):
            if not isinstance(v, (int, float)) or isinstance(v, bool) or v <= 0:
                raise ValueError(f"{name} must be a number of seconds > 0, got {v!r}")
        self.max_delay = float(max_delay)
        self.left, self.right = left, right
        self.queries = [query_from(q) for q in queries]
        self.window, self.zeta = window, zeta
        self.time = extractor(time, "time")
        self.shed_config = dict(shed) if shed else None
        self.flush_interval = float(flush_interval)
        if self.shed_config:
            self.new_shed_policy()  # a bad shed= fails at declaration

    def new_shed_policy(self) -> ShedPolicy:
        return ShedPolicy(**{k: v for k, v in (self.shed_config or {}).items() if k != "period"})

    @property
    def shed_period(self) -> float:
        return float((self.shed_config or {}).get("period", 1.0))

    def process(self, tup: Tuple) -> None:  # pragma: no cover - the chain SPU actor enters tuples itself
        raise RuntimeError("a ChainJoinBolt runs on chain SPUs (ChainProcessing); process() is not used")
