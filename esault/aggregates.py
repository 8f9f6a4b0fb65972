"""Combinable aggregates: the add/merge/result API that windows, TAG grouping and key windows share.

An aggregate folds values into an accumulator with add(), combines two
accumulators with merge(), and reads the answer with result(). merge() must be
associative and commutative and create() its identity, so partial aggregates
computed anywhere (TAG's split heavy keys, panes of a sliding window) combine
into the answer a single fold would give. Accumulators are PE state: they must
be msgpack-serialisable (numbers, str, bytes, bool, None, lists, dicts) so they
move with their key on split/merge and enter checkpoints.

Aggregates are pure and stateless themselves: one instance serves every key.
"""

from __future__ import annotations

import heapq
from typing import Any, Callable, Generic, TypeVar

Acc = TypeVar("Acc")


class Aggregate(Generic[Acc]):
    """Subclass and implement create/add/merge/result (all pure: return new or updated accumulators)."""

    def create(self) -> Acc:
        """The empty accumulator: merge(create(), a) == a."""
        raise NotImplementedError(f"{type(self).__name__} must implement create()")

    def add(self, acc: Acc, value: Any) -> Acc:
        """Fold one value in; may update acc in place and return it."""
        raise NotImplementedError(f"{type(self).__name__} must implement add(acc, value)")

    def merge(self, a: Acc, b: Acc) -> Acc:
        """Combine two partial accumulators (associative, commutative); may reuse a."""
        raise NotImplementedError(f"{type(self).__name__} must implement merge(a, b)")

    def result(self, acc: Acc) -> Any:
        """The answer for an accumulator (what a window or TAG's final stage emits)."""
        return acc

    def fold(self, values: Any) -> Acc:
        """An accumulator of all values, one add() at a time (tests and oracles use it)."""
        acc = self.create()
        for value in values:
            acc = self.add(acc, value)
        return acc


class Count(Aggregate[int]):
    """How many values."""

    def create(self) -> int:
        return 0

    def add(self, acc: int, value: Any) -> int:
        return acc + 1

    def merge(self, a: int, b: int) -> int:
        return a + b


class Sum(Aggregate[Any]):
    """The sum of numeric values."""

    def create(self) -> Any:
        return 0

    def add(self, acc: Any, value: Any) -> Any:
        return acc + value

    def merge(self, a: Any, b: Any) -> Any:
        return a + b


class Min(Aggregate[Any]):
    """The least value; None when there were none."""

    def create(self) -> Any:
        return None

    def add(self, acc: Any, value: Any) -> Any:
        return value if acc is None or value < acc else acc

    def merge(self, a: Any, b: Any) -> Any:
        return b if a is None else a if b is None else min(a, b)


class Max(Aggregate[Any]):
    """The greatest value; None when there were none."""

    def create(self) -> Any:
        return None

    def add(self, acc: Any, value: Any) -> Any:
        return value if acc is None or value > acc else acc

    def merge(self, a: Any, b: Any) -> Any:
        return b if a is None else a if b is None else max(a, b)


class Mean(Aggregate[list]):
    """The arithmetic mean; accumulator [sum, count]; result None when empty."""

    def create(self) -> list:
        return [0, 0]

    def add(self, acc: list, value: Any) -> list:
        return [acc[0] + value, acc[1] + 1]

    def merge(self, a: list, b: list) -> list:
        return [a[0] + b[0], a[1] + b[1]]

    def result(self, acc: list) -> float | None:
        return acc[0] / acc[1] if acc[1] else None


class TopK(Aggregate[list]):
    """The k greatest values, greatest first. Exact under merge: each partial keeps its own k greatest."""

    def __init__(self, k: int) -> None:
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise ValueError(f"TopK(k): k must be a positive int, got {k!r}")
        self.k = k

    def create(self) -> list:
        return []

    def add(self, acc: list, value: Any) -> list:
        if len(acc) < self.k:
            heapq.heappush(acc, value)
        elif value > acc[0]:
            heapq.heapreplace(acc, value)
        return acc

    def merge(self, a: list, b: list) -> list:
        return heapq.nlargest(self.k, a + b)[::-1] if a or b else []

    def result(self, acc: list) -> list:
        return sorted(acc, reverse=True)


class Reduce(Aggregate[Any]):
    """An aggregate from one associative, commutative binary function (e.g. operator.add); None when empty."""

    def __init__(self, combine: Callable[[Any, Any], Any]) -> None:
        if not callable(combine):
            raise ValueError(f"Reduce(combine): combine must be callable, got {combine!r}")
        self.combine = combine

    def create(self) -> Any:
        return None

    def add(self, acc: Any, value: Any) -> Any:
        return value if acc is None else self.combine(acc, value)

    def merge(self, a: Any, b: Any) -> Any:
        return b if a is None else a if b is None else self.combine(a, b)


BUILTIN = {"count": Count, "sum": Sum, "min": Min, "max": Max, "mean": Mean}
"""Ready aggregates by name (TopK and Reduce take an argument: build them yourself)."""


def aggregate_of(spec: Any) -> Aggregate:
    """An Aggregate from an instance, a class, or a built-in name ("count", "sum", "min", "max", "mean")."""
    if isinstance(spec, Aggregate):
        return spec
    if isinstance(spec, type) and issubclass(spec, Aggregate):
        return spec()
    if isinstance(spec, str) and spec in BUILTIN:
        return BUILTIN[spec]()
    raise ValueError(
        f"{spec!r} is not an aggregate: pass an esault.aggregates.Aggregate (instance or class), "
        f"or one of {sorted(BUILTIN)}; for top-k use TopK(k)"
    )

