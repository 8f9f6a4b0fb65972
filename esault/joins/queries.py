"""Join queries and the per-worker indexes that find a tuple's partners without a full scan.

A query says which (r, s) pairs join: `equi` (left key == right key, a hash
index: O(1) probe), `band` (|left - right| <= band, a sortedcontainers index:
O(log n + matches) probe) or any predicate (a scan). Several queries over the
same stream pair share one chain: each keeps its own index over the same
stored tuples.
"""

from __future__ import annotations

import importlib
import math
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from sortedcontainers import SortedKeyList

from esault.errors import TopologyError

KINDS = ("equi", "band")
Extractor = Callable[[Any], Any]
Predicate = Callable[[Any, Any], bool]


def extractor(on: str | Extractor | None, what: str) -> Extractor:
    """A field name of dict values, or a callable on the value; None means the value itself."""
    if on is None:
        return _identity
    if callable(on):
        return on
    if isinstance(on, str):
        return _Field(on, what)
    raise TopologyError(f"join {what}: expected a field name (str) or a callable on the tuple value, got {on!r}")


def _identity(value: Any) -> Any:
    return value


@dataclass(frozen=True, slots=True)
class _Field:
    name: str
    what: str

    def __call__(self, value: Any) -> Any:
        try:
            return value[self.name]
        except (KeyError, TypeError, IndexError):
            raise TopologyError(f"join {self.what}: the value {value!r:.80} has no field {self.name!r}; emit dict "
                                f"values with {self.name!r}, or pass a callable") from None


def resolve_predicate(kind: Any, name: str) -> Predicate:
    """A callable, or "module:function" (what a topology file sends to worker processes)."""
    if callable(kind):
        return kind
    if isinstance(kind, str) and ":" in kind:
        module, _, attr = kind.partition(":")
        try:
            found = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as exc:
            hint = (" (a function of the driver's __main__ is not there in a worker process: put it in a module of "
                    "its own and name it 'module:function')" if module == "__main__" else "")
            raise TopologyError(f"join {name!r}: cannot import predicate {kind!r} ({exc}){hint}") from None
        if not callable(found):
            raise TopologyError(f"join {name!r}: predicate {kind!r} is {type(found).__name__} {found!r:.60}, not a "
                                "function (r, s) -> bool; name a function")
        return found
    raise TopologyError(f"join {name!r}: kind must be 'equi', 'band', a predicate (r, s) -> bool, or "
                        f"'module:function' naming one; got {kind!r}")


@dataclass(frozen=True)
class JoinQuery:
    """One join over the stream pair: which pairs match, and the index that finds them."""

    name: str
    kind: str | Predicate = "equi"
    left_on: Extractor = _identity
    right_on: Extractor = _identity
    band: float = 0.0
    _predicate: Predicate | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.kind in KINDS:
            if self.kind == "band" and not (isinstance(self.band, (int, float)) and not isinstance(self.band, bool)
                                            and 0 <= self.band < math.inf):
                raise TopologyError(f"join {self.name!r}: a band join needs a finite band >= 0 (the largest "
                                    f"|left - right| that joins), got {self.band!r}")
            return
        object.__setattr__(self, "_predicate", resolve_predicate(self.kind, self.name))

    @property
    def kind_name(self) -> str:
        return self.kind if self.kind in KINDS else "predicate"

    def matches(self, r: Any, s: Any) -> bool:
        """Whether values r (left stream) and s (right stream) join: the nested-loop definition."""
        if self.kind == "equi":
            return self.left_on(r) == self.right_on(s)
        if self.kind == "band":
            return abs(self.left_on(r) - self.right_on(s)) <= self.band
        return bool(self._predicate(r, s))

    def index(self, side: str) -> "JoinIndex":
        """An index over stored tuples of `side` ("R" or "S"), probed by the other side's values."""
        stored, probe = (self.left_on, self.right_on) if side == "R" else (self.right_on, self.left_on)
        if self.kind == "equi":
            return HashIndex(stored, probe)
        if self.kind == "band":
            return BandIndex(stored, probe, self.band)
        return ScanIndex(self._predicate, stored_is_left=side == "R")  # called directly: a frame less per test


class JoinIndex:
    """Stored tuples (seq, ts, value) of one side, for one query. probe() returns candidates that match; given
    a time range [lo, hi] it may leave out tuples whose ts is outside it (the caller checks the window too)."""

    def add(self, tup: tuple) -> None: ...

    def remove(self, tup: tuple) -> None: ...

    def probe(self, value: Any, lo: float = -math.inf, hi: float = math.inf) -> Iterable[tuple]: ...

    def __len__(self) -> int: ...


class HashIndex(JoinIndex):
    """key -> {seq: tuple}: an equi-join probe is one dict lookup."""

    def __init__(self, stored: Extractor, probe: Extractor) -> None:
        self._stored, self._probe = stored, probe
        self._buckets: dict[Any, dict[int, tuple]] = {}
        self._n = 0

    def add(self, tup: tuple) -> None:
        self._buckets.setdefault(self._stored(tup[2]), {})[tup[0]] = tup
        self._n += 1

    def remove(self, tup: tuple) -> None:
        key = self._stored(tup[2])
        bucket = self._buckets[key]
        del bucket[tup[0]]
        if not bucket:
            del self._buckets[key]
        self._n -= 1

    def probe(self, value: Any, lo: float = -math.inf, hi: float = math.inf) -> Iterable[tuple]:
        bucket = self._buckets.get(self._probe(value))
        return list(bucket.values()) if bucket else ()

    def __len__(self) -> int:
        return self._n


class BandIndex(JoinIndex):
    """Tuples sorted by join attribute (sortedcontainers): a band probe is a range scan."""

    def __init__(self, stored: Extractor, probe: Extractor, band: float) -> None:
        self._probe, self._band = probe, band
        self._sorted = SortedKeyList(key=lambda t: (stored(t[2]), t[0]))
        self._stored = stored

    def add(self, tup: tuple) -> None:
        self._sorted.add(tup)

    def remove(self, tup: tuple) -> None:
        self._sorted.remove(tup)

    def probe(self, value: Any, lo: float = -math.inf, hi: float = math.inf) -> Iterable[tuple]:
        v = self._probe(value)
        lo, hi = v - self._band, v + self._band
        return list(self._sorted.irange_key((lo, float("-inf")), (hi, float("inf"))))

    def __len__(self) -> int:
        return len(self._sorted)


class ScanIndex(JoinIndex):
    """No index on the value: an arbitrary predicate is tested against every stored tuple *in the probe's time
    range*. Tuples are kept in event-time order (a chain store adds them in seq order, and event time does not
    go back within a stream), so the range is found by bisection: O(log n + tuples in the window) predicate
    calls per probe, however many stale tuples a lagging chain worker still holds. An out-of-order add is
    still correct (inserted in place), only slower. Removal is O(1) amortised at the old end (expiry,
    forwarding the oldest), O(n) elsewhere."""

    def __init__(self, predicate: Predicate, stored_is_left: bool) -> None:
        self._predicate, self._stored_is_left = predicate, stored_is_left
        self._items: list[tuple] = []  # ts order; [_start:] are live
        self._times: list[float] = []
        self._start = 0
        self._ordered = True  # False once a stored time is nan: then every probe scans all

    def add(self, tup: tuple) -> None:
        ts = tup[1]
        if ts != ts:
            self._ordered = False
        if self._ordered and self._times and ts < self._times[-1]:
            i = bisect_right(self._times, ts, self._start)
            self._times.insert(i, ts)
            self._items.insert(i, tup)
        else:
            self._times.append(ts)
            self._items.append(tup)

    def remove(self, tup: tuple) -> None:
        items, start = self._items, self._start
        if start < len(items) and items[start][0] == tup[0]:
            items[start] = None  # type: ignore[call-overload]  # dropped at the next compaction
            self._start = start = start + 1
            if start > 64 and start * 2 > len(items):
                del items[:start], self._times[:start]
                self._start = 0
            return
        i = bisect_left(self._times, tup[1], start) if self._ordered else start
        while i < len(items) and items[i][0] != tup[0]:
            i += 1  # among the tuples of equal time
        if i == len(items):
            raise KeyError(f"tuple seq {tup[0]} is not in this index")
        del items[i], self._times[i]

    def probe(self, value: Any, lo: float = -math.inf, hi: float = math.inf) -> Iterable[tuple]:
        times, start = self._times, self._start
        if not self._ordered:
            lo, hi = -math.inf, math.inf
        i = start if lo == -math.inf else bisect_left(times, lo, start)
        j = len(times) if hi == math.inf else bisect_right(times, hi, i)
        test = self._predicate
        if self._stored_is_left:
            return [t for t in self._items[i:j] if test(t[2], value)]
        return [t for t in self._items[i:j] if test(value, t[2])]

    def __len__(self) -> int:
        return len(self._items) - self._start
