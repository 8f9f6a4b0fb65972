"""Bolts fused into another unit's SPU (operator chaining): a function call per tuple, no batch.

The head's emit feeds the first stage's process(), whose emit feeds the next
stage, and the last stage emits into the SPU's output router. Each stage is
one instance of its bolt (chained bolts are shuffle-grouped: no per-key PEs),
with its own stats, on the head SPU's thread. See Topology.chained.
"""

from __future__ import annotations

from typing import Any, Callable

from esault.dsl.topology import UnitSpec
from esault.dsl.tuple import Tuple
from esault.metrics.stats import SpuStats
from esault.datapath.faults import UserFaults

Emit = Callable[[Any, Any], None]


class Stage:
    """One chained bolt in one SPU: its instance, stats and the feed function upstream emits call."""

    def __init__(self, spec: UnitSpec, source: str, downstream: Emit, stats: SpuStats, faults: UserFaults,
                 defer: Callable[[], Any]) -> None:
        self.spec = spec
        self.stats = stats
        stats.pes = 1
        self.pe = spec.instantiate()
        self.pe.emit = downstream  # an instance attribute: the stage's emits call the next stage directly
        self.pe._esault_emit = downstream
        self.pe._esault_defer = defer
        view = Tuple(source=source)
        process = self.pe.process
        pe = self.pe

        def feed(key: Any, value: Any) -> None:
            view.key = key
            view.value = value
            stats.processed += 1
            try:
                process(view)
            except Exception as exc:
                faults.retry(pe, view, key, value, source, exc)

        self.feed: Emit = feed


def sync_emitted(head: SpuStats, stages: list[Stage], sent_by_last: int) -> None:
    """Per-unit emitted counts: what each unit fed the next stage, and the router's count for the last."""
    stats = [head] + [s.stats for s in stages]
    for upstream, stage in zip(stats, stages):
        upstream.emitted = stage.stats.processed
    stats[-1].emitted += sent_by_last
