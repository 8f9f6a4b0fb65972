"""Split and merge planning: where to cut an overloaded interval, whom to merge into.

A midpoint split halves the hash range, not the load: with skewed keys one
half may carry nearly everything. So each SPU samples the key hashes it sees
(HashSampler, cheap enough for the per-tuple path) and the split point is the
median of the samples inside the interval.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from typing import Iterable, Mapping

from esault.errors import ConfigError, RoutingError
from esault.routing.interval_table import IntervalTable

__all__ = ["HashSampler", "choose_merge_target", "choose_split_point"]


class HashSampler:
    """A ring buffer of every `every`-th key hash recorded; the newest `capacity` are kept.

    record() is on the per-tuple path: when not sampling it is one decrement
    and one compare. Not thread-safe (the SPU's actor thread owns it).
    """

    __slots__ = ("_capacity", "_every", "_countdown", "_ring", "_pos", "_size")

    def __init__(self, capacity: int = 1024, every: int = 16) -> None:
        for name, value in (("capacity", capacity), ("every", every)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"HashSampler {name} must be a whole number >= 1, got {value!r}")
        self._capacity = capacity
        self._every = every
        self._countdown = every
        self._ring: list[int] = [0] * capacity
        self._pos = 0
        self._size = 0

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def every(self) -> int:
        return self._every

    def record(self, h: int) -> None:
        """Count one tuple's key hash; store it if it is the every-th. O(1)."""
        c = self._countdown - 1
        if c:
            self._countdown = c
            return
        self._countdown = self._every
        self._ring[self._pos] = h
        self._pos = (self._pos + 1) % self._capacity
        if self._size < self._capacity:
            self._size += 1

    def record_many(self, items: list[int]) -> None:
        """record() for each item in order, as C slices: O(len(items) / every)."""
        start = self._countdown - 1  # index of the next item to store
        n = len(items)
        if start >= n:
            self._countdown -= n
            return
        every, capacity, ring = self._every, self._capacity, self._ring
        pos = self._pos
        for h in items[start::every]:
            ring[pos] = h
            pos = (pos + 1) % capacity
        stored = (n - 1 - start) // every + 1
        self._pos = pos
        self._size = min(capacity, self._size + stored)
        self._countdown = every - (n - 1 - start) % every

    def snapshot(self) -> list[int]:
        """The stored hashes, oldest first. O(capacity)."""
        if self._size < self._capacity:
            return self._ring[: self._size]
        return self._ring[self._pos:] + self._ring[: self._pos]

    def clear(self) -> None:
        """Forget the stored hashes (e.g. after the SPU's interval changed)."""
        self._pos = 0
        self._size = 0
        self._countdown = self._every

    def __len__(self) -> int:
        return self._size


def choose_split_point(hashes: Iterable[int], start: int, end: int) -> int:
    """The split point p (start < p <= end) that halves the sampled load of [start, end].

    Hashes outside [start, end] are ignored. With fewer than 2 samples inside,
    the midpoint start + (end - start + 1) // 2. Otherwise p puts as close to
    half of the samples below p as any cut can (repeated hashes, i.e. hot
    keys, cannot be cut), placed halfway between the two neighbouring sampled
    hashes so unsampled keys split evenly too. O(k log k) for k samples.
    """
    if not start < end:
        raise RoutingError(
            f"cannot choose a split point in [{start}, {end}]: a split needs an interval of "
            "at least two hashes (start < end)"
        )
    s = sorted(h for h in hashes if start <= h <= end)
    n = len(s)
    if n < 2:
        return start + (end - start + 1) // 2
    m = s[n // 2]
    i = bisect_left(s, m)  # samples below p when p == m
    j = bisect_right(s, m)  # samples below p when m < p <= next sampled hash
    half = n / 2
    if abs(i - half) <= abs(j - half) and (i > 0 or m > start):
        low = s[i - 1] if i > 0 else start  # p in (low, m] leaves exactly i samples below
        p = low + (m - low + 1) // 2 if i > 0 else m
    else:
        high = s[j] if j < n else end + 1  # p in (m, high] leaves exactly j samples below
        p = m + (high - m + 1) // 2 if j < n else m + (end - m + 1) // 2
    return min(max(p, start + 1), end)


def choose_merge_target(table: IntervalTable, spu: int, load: Mapping[int, float]) -> int:
    """The less loaded adjacent neighbour of spu (the left one on a tie). O(log n).

    A neighbour missing from `load` counts as infinitely loaded: merge only
    into an SPU known to have room when there is one.
    """
    neighbours = table.neighbours(spu)
    if not neighbours:
        raise RoutingError(
            f"SPU {spu} has no neighbour to merge into: it is the only SPU of the unit"
        )
    inf = float("inf")
    return min(neighbours, key=lambda n: load.get(n, inf))
