"""Shared ranges: a source's instances take the ranges of one space (a file's bytes) as each becomes free.

Flink's split enumerator (FLIP-27) for a space [0, size). Static shares (instance i reads the i-th of n
equal parts) finish unevenly as soon as the instances' processes are not equally busy: in the word count
the worker holding the heavier count SPU reads slower, and the other one idles for the last 15-30% of the
run (docs/PERFORMANCE.md). Here each instance leases the next free block when it starts its current one,
so whoever is faster reads more.

The checkpoint holds no enumerator state. An instance's position is the ranges it has read (`done`), and
the spout's merge hook gives every restored instance the union of all of them, so the pool after a restore
is exactly [0, size) minus what the checkpoint's instances had read: a block leased after an instance's
barrier is in no position and is leased again. A generation (one per launch of the unit's instances) keeps
a discarded instance's late request from resetting or draining the new instances' pool.

Without checkpoints (at_least_once) nothing rolls back: an instance lost with its process is replaced, and
the replacement's first request names the SPUs it `replaces` (the lost one, and those it replaced if it died
before it asked); every block they held goes back to the front of the pool, to be read again whole (at least
once: what they had emitted and was acked comes twice).
"""

from __future__ import annotations

from collections import deque
from typing import Any, Iterable

Range = tuple[int, int]


def coalesce(ranges: Iterable[Range]) -> list[Range]:
    """The same bytes as sorted, disjoint, non-adjacent ranges (empty ones dropped)."""
    out: list[list[int]] = []
    for start, end in sorted((int(a), int(b)) for a, b in ranges if b > a):
        if out and start <= out[-1][1]:
            if end > out[-1][1]:
                out[-1][1] = end
        else:
            out.append([start, end])
    return [(a, b) for a, b in out]


def complement(done: Iterable[Range], size: int) -> list[Range]:
    """The ranges of [0, size) that `done` does not cover, in order."""
    free, at = [], 0
    for start, end in coalesce(done):
        if start > at:
            free.append((at, min(start, size)))
        at = max(at, end)
        if at >= size:
            break
    if at < size:
        free.append((at, size))
    return [r for r in free if r[1] > r[0]]


def blocks(free: Iterable[Range], block: int) -> deque[Range]:
    """Each free range cut into consecutive pieces of at most `block` bytes."""
    out: deque[Range] = deque()
    for start, end in free:
        for at in range(start, end, block):
            out.append((at, min(at + block, end)))
    return out


def parse_ranges(value: Any, size: int, what: str = "ranges") -> list[Range]:
    """`value` as coalesced ranges of [0, size]: a list of [start, end] pairs of whole numbers,
    0 <= start < end <= size. ValueError saying what is wrong otherwise (a position or a frame is checked
    before it is trusted)."""
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"{what}: expected a list of [start, end] pairs, got {type(value).__name__}")
    out = []
    for item in value:
        if (not isinstance(item, (list, tuple)) or len(item) != 2
                or not all(isinstance(x, int) and not isinstance(x, bool) for x in item)):
            raise ValueError(f"{what}: {item!r:.60} is not a [start, end] pair of whole numbers")
        start, end = item
        if not 0 <= start < end <= size:
            raise ValueError(f"{what}: [{start}, {end}] is not within [0, {size}] with start < end")
        out.append((start, end))
    return coalesce(out)


class _Pool:
    """One unit's generation: the blocks nobody has leased yet."""

    __slots__ = ("generation", "size", "done", "block", "free", "held")

    def __init__(self, generation: int, size: int, done: list[Range], block: int) -> None:
        self.generation, self.size, self.done, self.block = generation, size, done, block
        self.free = blocks(complement(done, size), block)
        self.held: dict[int, list[Range]] = {}  # owner -> the blocks leased to it (for a replacement)


STALE = object()
"""RangeLeases.lease's answer to a request of an older generation: no answer is sent."""


class RangeLeases:
    """The job's side of shared ranges (held by the ack server, in the driver): per source unit, the blocks
    no instance of the unit's current generation has leased. Pure; every argument is checked, as it comes
    from a frame."""

    def __init__(self) -> None:
        self._units: dict[str, _Pool] = {}

    def lease(self, unit: str, generation: int, size: int, done: Any, block: int, owner: int = 0,
              replaces: Iterable[int] = ()) -> Range | None | object:
        """The next free block of `unit`'s space for SPU `owner`, an instance of `generation` that restored
        `done` (the same for every instance of a generation), None once every block is leased, or STALE for a
        request of an older generation. A newer generation starts a fresh pool from its `done`. `replaces`:
        the lost SPUs this one replaces; the blocks they held are leased again first.
        ValueError for a malformed request, or one that disagrees with its generation's space."""
        if not isinstance(unit, str) or not unit:
            raise ValueError(f"range request: unit {unit!r:.40} is not a name")
        for name, v in (("generation", generation), ("size", size), ("block", block)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ValueError(f"range request for {unit!r}: {name} {v!r:.40} is not a whole number >= 0")
        if block < 1:
            raise ValueError(f"range request for {unit!r}: block must be >= 1 byte, got {block}")
        ranges = parse_ranges(done, size, f"range request for {unit!r}: done")
        pool = self._units.get(unit)
        if pool is not None and generation < pool.generation:
            return STALE
        if pool is None or generation > pool.generation:
            pool = self._units[unit] = _Pool(generation, size, ranges, block)
        elif (size, ranges) != (pool.size, pool.done):
            raise ValueError(f"range request for {unit!r}: generation {generation} has a space of {pool.size} bytes "
                             f"with {len(pool.done)} range(s) read, this instance says {size} and {len(ranges)}: "
                             "every instance of a generation must restore the same merged position")
        if not all(isinstance(r, int) and not isinstance(r, bool) for r in replaces):
            raise ValueError(f"range request for {unit!r}: replaces {replaces!r:.60} is not a list of SPU ids")
        for lost in replaces:
            for got in reversed(pool.held.pop(lost, [])):
                pool.free.appendleft(got)
        if not pool.free:
            return None
        got = pool.free.popleft()
        pool.held.setdefault(owner, []).append(got)
        return got

    def left(self, unit: str) -> int:
        """Blocks of `unit` not leased yet (0 for an unknown unit)."""
        pool = self._units.get(unit)
        return len(pool.free) if pool is not None else 0
