"""SpaceSaving: the heavy hitters of a stream in ceil(1/epsilon) counters (Metwally et al., 2005).

TAG grouping finds its heavy keys with it, per time window. Guarantees, for a
stream of n items: every item occurring more than epsilon * n times is
monitored; a monitored item's count over-estimates its true frequency f by at
most its `error`, and error <= min count <= epsilon * n; so
count - error <= f <= count.

O(1) per update with the "stream summary" layout: monitored items grouped in
buckets by count, and the least count kept. (No well-kept PyPI package offers
Space-Saving over arbitrary hashable keys: Apache DataSketches has Misra-Gries
for strings only.)
"""

from __future__ import annotations

import math
from typing import Any, Hashable


class SpaceSaving:
    """Approximate counts of the most frequent items; not thread-safe (one owner)."""

    __slots__ = ("capacity", "total", "_count", "_error", "_buckets", "_min")

    def __init__(self, epsilon: float) -> None:
        if not isinstance(epsilon, (int, float)) or isinstance(epsilon, bool) or not 0 < epsilon < 1:
            raise ValueError(f"SpaceSaving(epsilon): epsilon must be a number in (0, 1), got {epsilon!r}; "
                             "it is the error bound as a share of the stream (0.001 keeps 1000 counters)")
        self.capacity = math.ceil(1 / epsilon)
        self.total = 0
        self._count: dict[Hashable, int] = {}
        self._error: dict[Hashable, int] = {}
        self._buckets: dict[int, dict[Hashable, None]] = {}  # count -> its items (dict: insertion-ordered set)
        self._min = 0

    def __len__(self) -> int:
        return len(self._count)

    def __contains__(self, item: Hashable) -> bool:
        return item in self._count

    def add(self, item: Hashable) -> int:
        """Count one occurrence of `item`; its count now. Counts only grow by one, so the least count moves up
        by at most one."""
        self.total += 1
        count = self._count.get(item)
        if count is not None:
            bucket = self._buckets[count]
            del bucket[item]
            if not bucket:
                del self._buckets[count]
                if count == self._min:
                    self._min = count + 1
            self._count[item] = count + 1
            self._bucket_of(count + 1)[item] = None
            return count + 1
        if len(self._count) < self.capacity:
            self._count[item] = 1
            self._error[item] = 0
            self._bucket_of(1)[item] = None
            self._min = 1
            return 1
        least = self._min  # full: the newcomer replaces an item of the least count and inherits it as error
        bucket = self._buckets[least]
        victim = next(iter(bucket))
        del bucket[victim], self._count[victim], self._error[victim]
        if not bucket:
            del self._buckets[least]
            self._min = least + 1
        self._count[item] = least + 1
        self._error[item] = least
        self._bucket_of(least + 1)[item] = None
        return least + 1

    def _bucket_of(self, count: int) -> dict[Hashable, None]:
        bucket = self._buckets.get(count)
        if bucket is None:
            bucket = self._buckets[count] = {}
        return bucket

    def count(self, item: Hashable) -> int:
        """The over-estimate of item's frequency (0 if unmonitored: then it is at most the least count)."""
        return self._count.get(item, 0)

    def error(self, item: Hashable) -> int:
        """How much count(item) may over-estimate by."""
        return self._error.get(item, 0)

    def heavy(self, share: float) -> dict[Any, int]:
        """{item: count} of every item whose count is at least share * total (no item above it is missed
        when share >= epsilon; items with count - error below it may be false positives)."""
        threshold = share * self.total
        return {item: c for item, c in self._count.items() if c >= threshold and c > 0}

    def clear(self) -> None:
        """Start a new window."""
        self.total = 0
        self._count.clear()
        self._error.clear()
        self._buckets.clear()
        self._min = 0

    def check_invariants(self) -> None:
        """Raise AssertionError if the summary is inconsistent (tests call it after every step)."""
        assert len(self._count) <= self.capacity, (len(self._count), self.capacity)
        assert set(self._count) == set(self._error)
        assert sum(self._count.values()) == self.total, (sum(self._count.values()), self.total)
        seen = 0
        for count, bucket in self._buckets.items():
            assert bucket, f"empty bucket {count}"
            for item in bucket:
                assert self._count[item] == count, (item, self._count[item], count)
            seen += len(bucket)
        assert seen == len(self._count)
        for item, count in self._count.items():
            assert 0 <= self._error[item] <= count - 1, (item, count, self._error[item])
        if self._count:
            assert self._min == min(self._count.values()), (self._min, min(self._count.values()))
