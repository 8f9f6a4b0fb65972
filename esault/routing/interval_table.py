"""IntervalTable: the output routing table between SPUs (PAPER_NOTES section 3).

The key-hash space [0, KEY_SPACE_MAX] is cut into contiguous intervals. A node
holds an interval's start and its SPU; it covers [start, next start), the last
one [start, KEY_SPACE_MAX]. Lookup is the greatest start <= hash. The paper
gives each SPU one interval; esault's control plane (`assign_workload`) may
give an SPU several, never two adjacent ones (they would be one interval).
With n = number of intervals, lookup is O(log n) (a SortedDict of starts plus
a dict from SPU to its starts); split, merge and assign rebuild the table in
O(n log n) (rare: reconfigurations). lookup(), the per-tuple call, bisects
flat lists copied from the SortedDict: the copy costs O(n) once after each
change and makes a lookup a C-level bisect.

The table is a plain value: not thread-safe; one actor owns each copy and
ships changes as a whole new table (to_wire/from_wire) tagged with `version`.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Any, Iterable, Mapping

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
    without gap or overlap, the first starts at 0, and no two adjacent
    intervals have the same SPU.
    """

    __slots__ = ("_starts", "_start_of", "version", "_flat_starts", "_flat_spus")

    def __init__(self, first_spu: int) -> None:
        """One interval [0, KEY_SPACE_MAX] owned by first_spu; version 0."""
        _check_spu_id(first_spu, "first_spu")
        self._starts: SortedDict = SortedDict({0: first_spu})  # start -> spu
        self._start_of: dict[int, list[int]] = {first_spu: [0]}  # spu -> its starts, ascending
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
        previous: Any = None
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
            if spu == previous:
                raise RoutingError(
                    f"SPU {spu} is given two adjacent intervals (the second starts at {start}): they are one "
                    "interval; give its first start only"
                )
            starts[start] = spu
            previous = spu
        if starts.peekitem(0)[0] != 0:
            raise RoutingError(
                f"the first interval starts at {starts.peekitem(0)[0]}, not 0: hashes below it would "
                "have no SPU; add a (0, spu) pair"
            )
        return cls._build(starts, version)

    @classmethod
    def from_assignment(cls, assignment: Mapping[int, Iterable[tuple[int, int]]], version: int = 0
                        ) -> "IntervalTable":
        """Build from {spu: [(lo, hi), ...]} (inclusive ranges) that cover the key space exactly once.

        Adjacent ranges of one SPU become one interval; an SPU with no range is
        left out. Raises RoutingError naming the gap, the overlap or the bad
        range. O(n log n).
        """
        ranges: list[tuple[int, int, int]] = []
        try:
            items = [(spu, [tuple(r) for r in rs]) for spu, rs in dict(assignment).items()]
        except (TypeError, ValueError):
            raise RoutingError(
                f"a workload assignment maps SPU ids to lists of (lo, hi) hash ranges, got {assignment!r:.200}; "
                f"e.g. {{1: [(0, {KEY_SPACE_MAX // 2})], 2: [({KEY_SPACE_MAX // 2 + 1}, {KEY_SPACE_MAX})]}}"
            ) from None
        for spu, rs in items:
            _check_spu_id(spu, "spu")
            for r in rs:
                if len(r) != 2 or not all(_is_int(x) for x in r) or not 0 <= r[0] <= r[1] <= KEY_SPACE_MAX:
                    raise RoutingError(
                        f"SPU {spu}: {r!r} is not a hash range; give (lo, hi) with 0 <= lo <= hi <= {KEY_SPACE_MAX}"
                    )
                ranges.append((r[0], r[1], spu))
        ranges.sort()
        expected = 0
        for lo, hi, spu in ranges:
            if lo > expected:
                raise RoutingError(f"hashes [{expected}, {lo - 1}] are assigned to no SPU; every hash needs one")
            if lo < expected:
                raise RoutingError(
                    f"hashes [{lo}, {min(hi, expected - 1)}] are assigned twice (SPU {spu} and another); "
                    "every hash belongs to exactly one SPU"
                )
            expected = hi + 1
        if expected <= KEY_SPACE_MAX:
            raise RoutingError(
                f"hashes [{expected}, {KEY_SPACE_MAX}] are assigned to no SPU; every hash needs one"
            )
        return cls._build(cls._coalesce([(lo, spu) for lo, _hi, spu in ranges]), version)

    @staticmethod
    def _coalesce(pairs: Iterable[tuple[int, int]]) -> SortedDict:
        """(start, spu) pairs in key order -> starts, dropping a start whose SPU owns the interval before it."""
        starts: SortedDict = SortedDict()
        previous: Any = None
        for start, spu in pairs:
            if spu != previous:
                starts[start] = spu
                previous = spu
        return starts

    @classmethod
    def _build(cls, starts: SortedDict, version: int) -> "IntervalTable":
        if not _is_int(version) or version < 0:
            raise RoutingError(f"IntervalTable version must be a whole number >= 0, got {version!r}")
        table = cls.__new__(cls)
        table._starts = starts
        table._start_of = {}
        for start, spu in starts.items():
            table._start_of.setdefault(spu, []).append(start)
        table.version = version
        table._flat_starts = None
        table._flat_spus = []
        return table

    def _replace(self, starts: SortedDict) -> None:
        """Take `starts` (coalesced) as the new layout and bump the version."""
        rebuilt = IntervalTable._build(IntervalTable._coalesce(starts.items()), self.version + 1)
        self._starts, self._start_of, self.version = rebuilt._starts, rebuilt._start_of, rebuilt.version
        self._flat_starts = None

    def copy(self) -> "IntervalTable":
        """An independent copy (same version). O(n)."""
        table = IntervalTable.__new__(IntervalTable)
        table._starts = self._starts.copy()
        table._start_of = {spu: list(starts) for spu, starts in self._start_of.items()}
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
        """SPU's inclusive interval (start, end), for an SPU that owns one. O(log n)."""
        starts = self._starts_of_or_raise(spu, "interval_of")
        if len(starts) > 1:
            raise RoutingError(
                f"SPU {spu} owns {len(starts)} intervals ({_short_list(starts)} are their starts); "
                "use intervals_of(spu)"
            )
        return starts[0], self._end_of(starts[0])

    def intervals_of(self, spu: int) -> list[tuple[int, int]]:
        """SPU's inclusive intervals (start, end), in key order. O(k log n) for k intervals."""
        return [(start, self._end_of(start)) for start in self._starts_of_or_raise(spu, "intervals_of")]

    def assignment(self) -> dict[int, list[tuple[int, int]]]:
        """{spu: its intervals}: the form assign_workload takes. O(n)."""
        out: dict[int, list[tuple[int, int]]] = {}
        for start, end, spu in self.intervals():
            out.setdefault(spu, []).append((start, end))
        return out

    def owns(self, spu: int, h: int) -> bool:
        """Whether hash h lies in one of spu's intervals. O(log n)."""
        self._starts_of_or_raise(spu, "owns")
        return 0 <= h <= KEY_SPACE_MAX and self.lookup(h) == spu

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
        """The SPUs owning an interval next to one of spu's, in key order. O(k log n)."""
        starts = self._starts
        out: list[int] = []
        for start in self._starts_of_or_raise(spu, "neighbours"):
            idx = starts.index(start)
            for j in (idx - 1, idx + 1):
                if 0 <= j < len(starts):
                    other = starts.peekitem(j)[1]
                    if other not in out:
                        out.append(other)
        return sorted(out, key=lambda s: self._start_of[s][0])

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
        """Give new_spu every hash >= `at` that spu owns. Increments version.

        For an SPU with one interval [start, end], `at` defaults to the
        midpoint start + (end - start + 1) // 2 and must satisfy
        start < at <= end; the moved range is (at, end). With several
        intervals `at` defaults to the point with half of spu's hashes below
        it, and the moved hashes are spu's within (at, end of its last
        interval). Every other hash keeps its owner.
        """
        owned = self.intervals_of(spu)
        _check_spu_id(new_spu, "new_spu")
        if new_spu in self._start_of:
            ns, ne = self.intervals_of(new_spu)[0]
            raise RoutingError(
                f"cannot split SPU {spu} onto SPU {new_spu}: SPU {new_spu} already owns [{ns}, {ne}]; "
                "give the new SPU an id not in the table"
            )
        first, last = owned[0][0], owned[-1][1]
        total = sum(hi - lo + 1 for lo, hi in owned)
        if total == 1:
            raise RoutingError(
                f"cannot split SPU {spu}: its interval [{first}, {last}] holds a single hash; "
                "pick another SPU to relieve"
            )
        if at is None:
            at = _hash_after(owned, total // 2)
        elif not _is_int(at) or not first < at <= last:
            raise RoutingError(
                f"cannot split SPU {spu} at {at!r}: the split point must be a whole number with "
                f"{first} < at <= {last} (SPU {spu} owns [{first}, {last}]"
                + (f" in {len(owned)} intervals" if len(owned) > 1 else "")
                + f"; at={first + 1} moves all but the first hash, at={last} moves only the last)"
            )
        starts = self._starts.copy()
        for lo, hi in owned:
            if lo >= at:
                starts[lo] = new_spu
            elif lo < at <= hi:
                starts[at] = new_spu  # [lo, at - 1] stays spu's; hi + 1 starts another SPU's interval
        self._replace(starts)
        return at, last

    def merge(self, spu: int, into: int | None = None) -> tuple[int, int, int]:
        """Hand all of spu's hashes to another SPU and drop spu. Increments version.

        `into` defaults to the SPU left of spu's first interval (the right one
        if there is none). Any other SPU may receive; one that is not adjacent
        ends up with several intervals. Returns (first, last, receiver): spu's
        hashes within [first, last] moved.
        """
        owned = self.intervals_of(spu)
        if len(self._start_of) == 1:
            raise RoutingError(
                f"cannot merge SPU {spu}: it is the last SPU and owns the whole key space "
                f"[0, {KEY_SPACE_MAX}]; a unit keeps at least one SPU"
            )
        first, last = owned[0][0], owned[-1][1]
        if into is None:
            into = self.lookup(first - 1) if first > 0 else self.lookup(owned[0][1] + 1)
        elif into == spu or into not in self._start_of:
            problem = "an SPU cannot merge into itself" if into == spu else f"SPU {into!r} is not in the table"
            raise RoutingError(
                f"cannot merge SPU {spu} [{first}, {last}] into {into!r}: {problem}; "
                f"merge into one of {_short_list(s for s in self._start_of if s != spu)}"
            )
        starts = self._starts.copy()
        for lo, _hi in owned:
            starts[lo] = into
        self._replace(starts)
        return first, last, into

    def assign(self, assignment: Mapping[int, Iterable[tuple[int, int]]]) -> "IntervalTable":
        """A new table with this one's version + 1 laid out as `assignment` says (see from_assignment)."""
        return IntervalTable.from_assignment(assignment, version=self.version + 1)

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
        assert all(a != b for a, b in zip(owners, owners[1:])), f"two adjacent intervals have one SPU: {starts}"
        mirror: dict[int, list[int]] = {}
        for s, spu in starts:
            mirror.setdefault(spu, []).append(s)
        assert mirror == self._start_of, f"spu->start index {self._start_of} disagrees with starts {starts}"
        assert _is_int(self.version) and self.version >= 0, f"bad version {self.version!r}"
        if self._flat_starts is not None:
            assert self._flat_starts == [s for s, _ in starts] and self._flat_spus == owners, (
                f"stale lookup cache {list(zip(self._flat_starts, self._flat_spus))} != {starts}"
            )

    # ---------------------------------------------------------------- helpers
    def _starts_of_or_raise(self, spu: int, op: str) -> list[int]:
        try:
            return self._start_of[spu]
        except (KeyError, TypeError):
            raise RoutingError(
                f"{op}: SPU {spu!r} is not in the routing table (version {self.version}); "
                f"known SPUs: {_short_list(self._start_of)}"
            ) from None

    def _end_of(self, start: int) -> int:
        starts = self._starts
        idx = starts.index(start)
        return starts.peekitem(idx + 1)[0] - 1 if idx + 1 < len(starts) else KEY_SPACE_MAX


def _hash_after(owned: list[tuple[int, int]], below: int) -> int:
    """The hash with `below` of the owned hashes (sorted, disjoint ranges) under it; below >= 1."""
    for lo, hi in owned:
        size = hi - lo + 1
        if below < size:
            return lo + below
        below -= size
    raise ValueError("below exceeds the owned hashes")


def _check_spu_id(spu: Any, name: str) -> None:
    if not _is_int(spu):
        raise RoutingError(f"{name} must be an int SPU id, got {spu!r} ({type(spu).__name__})")
