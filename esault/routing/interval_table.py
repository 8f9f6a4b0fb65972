"""IntervalTable: the output routing table between SPUs (PAPER_NOTES section 3).

The key-hash space [0, KEY_SPACE_MAX] is cut into contiguous intervals, one per
SPU. A node holds an interval's start and its SPU; it covers [start, next
start), the last one [start, KEY_SPACE_MAX]. Lookup is the greatest start <=
hash. With n = number of SPUs, lookup, split and merge are O(log n) (a
SortedDict of starts plus a dict from SPU to start). lookup(), the per-tuple
call, bisects flat lists copied from the SortedDict: the copy costs O(n) once
after each split or merge (rare) and makes a lookup a C-level bisect.

The table is a plain value: not thread-safe; one actor owns each copy and
ships changes as a whole new table (to_wire/from_wire) tagged with `version`.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Any, Iterable

from sortedcontainers import SortedDict

from esault.errors import RoutingError
from esault.keyhash import KEY_SPACE_MAX, key_hash

__all__ = ["IntervalTable"]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _short_list(items: Iterable[int], limit: int = 20) -> str:
    items = list(items)
    text = ", ".join(str(i) for i in items[:limit])
    return text + (f", ... ({len(items)} in all)" if len(items) > limit else "")


class IntervalTable:
    """Which SPU owns which contiguous interval of key hashes.

    Invariants (see check_invariants): the intervals cover [0, KEY_SPACE_MAX]
    without gap or overlap, the first starts at 0, and every SPU owns exactly
    one interval.
    """

    __slots__ = ("_starts", "_start_of", "version", "_flat_starts", "_flat_spus")

    def __init__(self, first_spu: int) -> None:
        """One interval [0, KEY_SPACE_MAX] owned by first_spu; version 0."""
        _check_spu_id(first_spu, "first_spu")
        self._starts: SortedDict = SortedDict({0: first_spu})  # start -> spu
        self._start_of: dict[int, int] = {first_spu: 0}  # spu -> start
        self.version: int = 0
        self._flat_starts: list[int] | None = None  # lookup cache; None = stale
        self._flat_spus: list[int] = []

    # ------------------------------------------------------------------ build
    @classmethod
    def from_intervals(cls, pairs: Iterable[tuple[int, int]], version: int = 0) -> "IntervalTable":
        """Build from (start, spu) pairs; the lowest start must be 0. O(n log n).

        Each interval ends just before the next start; the last ends at
        KEY_SPACE_MAX. Raises RoutingError on a missing 0 start, a start out of
        range, a repeated start or an SPU given twice.
        """
        try:
            pairs = [tuple(p) for p in pairs]
        except TypeError:
            raise RoutingError(
                f"IntervalTable.from_intervals takes (start, spu) pairs, got {pairs!r:.200}; "
                "e.g. [(0, 1), (1073741824, 2)]"
            ) from None
        if not pairs:
            raise RoutingError(
                "IntervalTable.from_intervals needs at least one (start, spu) pair, got none; "
                "e.g. IntervalTable.from_intervals([(0, 1)])"
            )
        for p in pairs:
            if len(p) != 2:
                raise RoutingError(
                    f"IntervalTable.from_intervals takes (start, spu) pairs, got {p!r}; "
                    "e.g. [(0, 1), (1073741824, 2)]"
                )
        if not _is_int(version) or version < 0:
            raise RoutingError(f"IntervalTable version must be a whole number >= 0, got {version!r}")
        pairs.sort(key=lambda p: p[0] if _is_int(p[0]) else -1)
        starts: SortedDict = SortedDict()
        start_of: dict[int, int] = {}
        for start, spu in pairs:
            if not _is_int(start) or not 0 <= start <= KEY_SPACE_MAX:
                raise RoutingError(
                    f"interval start {start!r} (SPU {spu!r}) is not a whole number in [0, {KEY_SPACE_MAX}]"
                )
            _check_spu_id(spu, "spu")
            if start in starts:
                raise RoutingError(
                    f"interval start {start} is given twice (SPUs {starts[start]} and {spu}); "
                    "every interval needs its own start"
                )
            if spu in start_of:
                raise RoutingError(
                    f"SPU {spu} is given two intervals (starts {start_of[spu]} and {start}); "
                    "every SPU owns exactly one contiguous interval"
                )
            starts[start] = spu
            start_of[spu] = start
        if starts.peekitem(0)[0] != 0:
            raise RoutingError(
                f"the first interval starts at {starts.peekitem(0)[0]}, not 0: hashes below it would "
                "have no SPU; add a (0, spu) pair"
            )
        table = cls.__new__(cls)
        table._starts = starts
        table._start_of = start_of
        table.version = version
        table._flat_starts = None
        table._flat_spus = []
        return table

    def copy(self) -> "IntervalTable":
        """An independent copy (same version). O(n)."""
        table = IntervalTable.__new__(IntervalTable)
        table._starts = self._starts.copy()
        table._start_of = dict(self._start_of)
        table.version = self.version
        table._flat_starts = None
        table._flat_spus = []
        return table

    # ----------------------------------------------------------------- lookup
    def lookup(self, h: int) -> int:
        """The SPU owning hash h: the greatest start <= h. O(log n); O(n) once after a split/merge."""
        if not 0 <= h <= KEY_SPACE_MAX:
            raise RoutingError(
                f"hash {h!r} is outside the key space [0, {KEY_SPACE_MAX}]; "
                "hash keys with esault.keyhash.key_hash (or use lookup_key(key))"
            )
        flat = self._flat_starts
        if flat is None:
            flat = self._flat_starts = list(self._starts.keys())
            self._flat_spus = list(self._starts.values())
        return self._flat_spus[bisect_right(flat, h) - 1]

    def lookup_key(self, key: Any) -> int:
        """The SPU owning key: lookup(key_hash(key)). O(len(key) + log n)."""
        return self.lookup(key_hash(key))

    def interval_of(self, spu: int) -> tuple[int, int]:
        """SPU's inclusive interval (start, end). O(log n)."""
        start = self._start_of_or_raise(spu, "interval_of")
        return start, self._end_of(start)

    def owns(self, spu: int, h: int) -> bool:
        """Whether hash h lies in spu's interval. O(log n)."""
        start, end = self.interval_of(spu)
        return start <= h <= end

    def intervals(self) -> list[tuple[int, int, int]]:
        """Every (start, end, spu), inclusive, in key order. O(n)."""
        items = list(self._starts.items())
        out = []
        for i, (start, spu) in enumerate(items):
            end = items[i + 1][0] - 1 if i + 1 < len(items) else KEY_SPACE_MAX
            out.append((start, end, spu))
        return out

    def spus(self) -> list[int]:
        """The SPU ids in key order. O(n)."""
        return list(self._starts.values())

    def neighbours(self, spu: int) -> list[int]:
        """The SPUs owning the intervals left and right of spu's (0, 1 or 2 of them), left first. O(log n)."""
        start = self._start_of_or_raise(spu, "neighbours")
        starts = self._starts
        idx = starts.index(start)
        out = []
        if idx > 0:
            out.append(starts.peekitem(idx - 1)[1])
        if idx + 1 < len(starts):
            out.append(starts.peekitem(idx + 1)[1])
        return out

    def __len__(self) -> int:
        return len(self._starts)

    def __contains__(self, spu: object) -> bool:
        return spu in self._start_of

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, IntervalTable):
            return NotImplemented
        return self.version == other.version and list(self._starts.items()) == list(other._starts.items())

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        parts = ", ".join(f"[{s}, {e}]->{spu}" for s, e, spu in self.intervals()[:8])
        more = f", ... ({len(self)} intervals)" if len(self) > 8 else ""
        return f"IntervalTable(v{self.version}: {parts}{more})"

    # ---------------------------------------------------------- split / merge
    def split(self, spu: int, new_spu: int, at: int | None = None) -> tuple[int, int]:
        """Give new_spu the upper part [at, end] of spu's interval [start, end]. O(log n).

        `at` defaults to the midpoint start + (end - start + 1) // 2 and must
        satisfy start < at <= end. Returns the moved inclusive range (at, end);
        every other hash keeps its owner. Increments version.
        """
        start = self._start_of_or_raise(spu, "split")
        _check_spu_id(new_spu, "new_spu")
        if new_spu in self._start_of:
            ns, ne = self.interval_of(new_spu)
            raise RoutingError(
                f"cannot split SPU {spu} onto SPU {new_spu}: SPU {new_spu} already owns [{ns}, {ne}]; "
                "give the new SPU an id not in the table"
            )
        end = self._end_of(start)
        if start == end:
            raise RoutingError(
                f"cannot split SPU {spu}: its interval [{start}, {end}] holds a single hash; "
                "pick another SPU to relieve"
            )
        if at is None:
            at = start + (end - start + 1) // 2
        elif not _is_int(at) or not start < at <= end:
            raise RoutingError(
                f"cannot split SPU {spu} at {at!r}: the split point must be a whole number with "
                f"{start} < at <= {end} (SPU {spu} owns [{start}, {end}]; at={start + 1} moves all "
                f"but the first hash, at={end} moves only the last)"
            )
        self._starts[at] = new_spu
        self._start_of[new_spu] = at
        self._flat_starts = None
        self.version += 1
        return at, end

    def merge(self, spu: int, into: int | None = None) -> tuple[int, int, int]:
        """Hand spu's whole interval to an adjacent SPU and drop spu. O(log n).

        `into` defaults to the left neighbour (the right one if spu is
        leftmost) and must be adjacent. Returns (start, end, receiver) of the
        moved inclusive range. Increments version.
        """
        start = self._start_of_or_raise(spu, "merge")
        if len(self._starts) == 1:
            raise RoutingError(
                f"cannot merge SPU {spu}: it is the last SPU and owns the whole key space "
                f"[0, {KEY_SPACE_MAX}]; a unit keeps at least one SPU"
            )
        end = self._end_of(start)
        starts = self._starts
        idx = starts.index(start)
        left = starts.peekitem(idx - 1)[1] if idx > 0 else None
        right = starts.peekitem(idx + 1)[1] if idx + 1 < len(starts) else None
        if into is None:
            into = left if left is not None else right
        elif into not in (left, right):
            if into == spu:
                problem = "an SPU cannot merge into itself"
            elif into not in self._start_of:
                problem = f"SPU {into!r} is not in the table"
            else:
                problem = f"SPU {into} owns [{self._start_of[into]}, {self._end_of(self._start_of[into])}], not adjacent"
            adjacent = " or ".join(str(n) for n in (left, right) if n is not None)
            raise RoutingError(
                f"cannot merge SPU {spu} [{start}, {end}] into {into!r}: {problem}; "
                f"merge into an adjacent SPU: {adjacent}"
            )
        del starts[start]
        del self._start_of[spu]
        if into == right:
            # The right neighbour's interval now begins where spu's began.
            del starts[end + 1]
            starts[start] = into
            self._start_of[into] = start
        self._flat_starts = None
        self.version += 1
        return start, end, into  # type: ignore[return-value]

    # ------------------------------------------------------------------- wire
    def to_wire(self) -> list[Any]:
        """[version, [[start, spu], ...]]: msgpack-able, in key order. O(n)."""
        return [self.version, [[start, spu] for start, spu in self._starts.items()]]

    @classmethod
    def from_wire(cls, wire: list[Any]) -> "IntervalTable":
        """Rebuild a table from to_wire() output (lists or tuples). O(n log n)."""
        try:
            version, pairs = wire
            pairs = [(start, spu) for start, spu in pairs]
        except (TypeError, ValueError):
            raise RoutingError(
                f"not an IntervalTable wire value: {wire!r:.200}; expected [version, [[start, spu], ...]] "
                "as produced by IntervalTable.to_wire()"
            ) from None
        return cls.from_intervals(pairs, version=version)

    # ------------------------------------------------------------- invariants
    def check_invariants(self) -> None:
        """Raise AssertionError with detail if the table is inconsistent. O(n)."""
        starts = list(self._starts.items())
        assert starts, "table has no interval"
        assert starts[0][0] == 0, f"first interval starts at {starts[0][0]}, not 0"
        assert all(_is_int(s) and 0 <= s <= KEY_SPACE_MAX for s, _ in starts), (
            f"a start lies outside [0, {KEY_SPACE_MAX}]: {starts}"
        )
        assert all(a[0] < b[0] for a, b in zip(starts, starts[1:])), f"starts not increasing: {starts}"
        owners = [spu for _, spu in starts]
        assert len(set(owners)) == len(owners), f"an SPU owns two intervals: {starts}"
        mirror = {spu: s for s, spu in starts}
        assert mirror == self._start_of, f"spu->start index {self._start_of} disagrees with starts {starts}"
        assert _is_int(self.version) and self.version >= 0, f"bad version {self.version!r}"
        if self._flat_starts is not None:
            assert self._flat_starts == [s for s, _ in starts] and self._flat_spus == owners, (
                f"stale lookup cache {list(zip(self._flat_starts, self._flat_spus))} != {starts}"
            )

    # ---------------------------------------------------------------- helpers
    def _start_of_or_raise(self, spu: int, op: str) -> int:
        try:
            return self._start_of[spu]
        except (KeyError, TypeError):
            raise RoutingError(
                f"{op}: SPU {spu!r} is not in the routing table (version {self.version}); "
                f"known SPUs: {_short_list(self._starts.values())}"
            ) from None

    def _end_of(self, start: int) -> int:
        starts = self._starts
        idx = starts.index(start)
        return starts.peekitem(idx + 1)[0] - 1 if idx + 1 < len(starts) else KEY_SPACE_MAX


def _check_spu_id(spu: Any, name: str) -> None:
    if not _is_int(spu):
        raise RoutingError(f"{name} must be an int SPU id, got {spu!r} ({type(spu).__name__})")
