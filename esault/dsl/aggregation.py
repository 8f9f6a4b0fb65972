"""Two-stage aggregation: a partial stage that combines per SPU, a key-grouped final stage that merges.

TopologyBuilder.aggregate(name, aggregate, ...) declares it; the grouping
chosen on the result picks the plan:

- key_grouping(src): one stage, `name`, key-grouped: each key's PE folds its values (add).
- tag_grouping(src), partial_key_grouping(src), shuffle_grouping(src): `name_partial`
  reads src with that grouping, folds each input batch per key (add) and emits
  one partial accumulator per key at the batch's end; `name`, key-grouped on
  the partials, merges them into the key's accumulator.

Both stages' `name` emits (key, result(acc)) after every update, so the last
tuple per key is its aggregate over everything so far: the same value under
every plan (merge is associative and commutative, create() its identity).

A partial accumulator never outlives its input batch: it leaves in that
batch's trees (acked, replayed and checkpointed with it), so a replay, a
rollback, a split or a merge of the partial stage never loses or double-counts
one.
"""

from __future__ import annotations

import importlib
from typing import Any

from esault.aggregates import BUILTIN, Aggregate, aggregate_of
from esault.dsl.bolt import Bolt
from esault.transport.codec import check_serialisable

PARTIAL_SUFFIX = "_partial"


def aggregate_to_wire(aggregate: Aggregate) -> Any:
    """Plain data naming an aggregate (so params can travel to a worker process), or the instance itself
    when it holds something that cannot travel (a Reduce of a lambda): then it runs in one process only."""
    cls = type(aggregate)
    for name, builtin in BUILTIN.items():
        if cls is builtin:
            return name
    args = dict(vars(aggregate))
    try:
        check_serialisable(args)
    except TypeError:
        return aggregate
    if "<locals>" in cls.__qualname__:
        return aggregate
    return {"class": f"{cls.__module__}:{cls.__qualname__}", "args": args}


def aggregate_from_wire(wire: Any) -> Aggregate:
    if isinstance(wire, dict) and "class" in wire:
        module, _, qualname = wire["class"].partition(":")
        obj: Any = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
        aggregate = obj.__new__(obj)
        vars(aggregate).update(wire.get("args") or {})
        return aggregate
    return aggregate_of(wire)


class PartialAggregate(Bolt):
    """One instance per SPU: folds each input batch per key, emits (key, partial accumulator) at its end."""

    def __init__(self, aggregate: Any) -> None:
        self._aggregate = aggregate_from_wire(aggregate)
        self._accs: dict[Any, Any] = {}

    def process(self, tup: Any) -> None:
        accs, agg = self._accs, self._aggregate
        key = tup.key
        acc = accs.get(key)
        accs[key] = agg.add(agg.create() if acc is None else acc, tup.value)

    def on_batch_end(self) -> None:
        accs, self._accs = self._accs, {}
        emit = self.emit
        for key, acc in accs.items():
            emit(key, acc)

    def snapshot_state(self) -> dict[str, Any]:
        return {}  # empty between batches, where checkpoints and hand-offs happen

    def restore_state(self, state: dict[str, Any]) -> None:
        pass


class FinalAggregate(Bolt):
    """Key-grouped: the key's accumulator; adds raw values (merge=False) or merges partials (merge=True),
    then emits (key, result)."""

    def __init__(self, aggregate: Any, merge: bool = False) -> None:
        self._aggregate = aggregate_from_wire(aggregate)
        self._merge = merge
        self.acc = self._aggregate.create()

    def process(self, tup: Any) -> None:
        agg = self._aggregate
        self.acc = agg.merge(self.acc, tup.value) if self._merge else agg.add(self.acc, tup.value)
        self.emit(self.key, agg.result(self.acc))

    def snapshot_state(self) -> dict[str, Any]:
        return {"acc": self.acc}

    def restore_state(self, state: dict[str, Any]) -> None:
        self.acc = state["acc"]
