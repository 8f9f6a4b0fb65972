"""Which partitions a source instance owns, and where it is in each: the pure core of KafkaSource.

Partitions are the unit of work. esault assigns them, not a consumer-group
rebalance it could not see: partition p of topic t belongs to instance
(crc32(t) + p) % instances. The owner of a partition never depends on the
other partitions, so a partition added to a topic later has an owner at once
and no existing one moves.

`PartitionOffsets` keeps, per owned partition, the offset of the next record
to emit and an optional end. A checkpoint's position is the list of
[topic, partition, next offset] (and the ends of a bounded read), so a
restore resumes at the first record the checkpoint does not cover.
"""

from __future__ import annotations

import heapq
import operator
import re
from bisect import bisect_left
import zlib
from collections import deque
from dataclasses import dataclass
from typing import Any, Container, Iterable, Mapping, Sequence

TopicPartition = tuple[str, int]


def owner(topic: str, partition: int, instances: int) -> int:
    """The instance (0 .. instances - 1) that reads `partition` of `topic`: stable across processes and runs."""
    return (zlib.crc32(topic.encode("utf-8")) + partition) % instances


def owned(partitions: Iterable[TopicPartition], instance: int, instances: int) -> list[TopicPartition]:
    """The partitions `instance` reads, sorted; the instances' sets are disjoint and cover every partition."""
    return sorted(tp for tp in set(partitions) if owner(tp[0], tp[1], instances) == instance)


def matching(pattern: str, topics: Iterable[str]) -> list[str]:
    """The topics a pattern ('^orders-.*', re.match) names, sorted; internal topics ('__...') never match."""
    regex = re.compile(pattern)
    return sorted(t for t in topics if regex.match(t) and not t.startswith("__"))


def partitions_read(topics: Iterable[str], metadata: Mapping[str, Iterable[int]]) -> list[TopicPartition]:
    """Every partition a source reading `topics` (names, or patterns starting with '^') reads, by a
    metadata answer `metadata` (topic -> its partition ids). A named topic the answer lacks has none yet."""
    names = [n for t in topics for n in (matching(t, metadata) if t.startswith("^") else [t])]
    return sorted((t, p) for t in dict.fromkeys(names) if t in metadata for p in metadata[t])


def newly_owned(partitions: Iterable[TopicPartition], known: Container[TopicPartition], instance: int,
                instances: int) -> list[TopicPartition]:
    """What a metadata refresh adds to `instance`: the partitions it owns that it does not read yet (`known`).

    Over the instances 0 .. instances - 1 these are disjoint and cover every partition no instance knew:
    a partition added to a topic (its count grew) or a new topic of a pattern is read by exactly one
    instance, the one a fresh start would give it, and no partition already read changes owner."""
    return [tp for tp in owned(partitions, instance, instances) if tp not in known]


@dataclass(slots=True)
class _Partition:
    next: int
    """Offset of the next record to emit: every record before it was emitted (or skipped as poison)."""
    end: int | None = None
    """Bounded read: the partition is done once `next` reaches it (records at or past it are not emitted)."""
    end_known: bool = True
    """False until the broker confirmed the end (see PartitionOffsets.confirm_end)."""


class PartitionOffsets:
    """Next offset (and end) per owned partition; what snapshot() returns, restore() takes back."""

    def __init__(self) -> None:
        self._parts: dict[TopicPartition, _Partition] = {}

    def add(self, tp: TopicPartition, start: int, end: int | None = None, end_known: bool = True) -> None:
        if start < 0:
            raise ValueError(f"partition {tp}: a start offset is >= 0, got {start}")
        self._parts[tp] = _Partition(start, end, end_known or end is None)

    def __contains__(self, tp: TopicPartition) -> bool:
        return tp in self._parts

    def __len__(self) -> int:
        return len(self._parts)

    def remove(self, tp: TopicPartition) -> tuple[int, int | None]:
        """Stop tracking `tp` (it moved to another instance): its (next offset, end if confirmed)."""
        part = self._parts.pop(tp)
        return part.next, part.end if part.end_known else None

    def partitions(self) -> list[TopicPartition]:
        return sorted(self._parts)

    def next_offset(self, tp: TopicPartition) -> int:
        return self._parts[tp].next

    def end(self, tp: TopicPartition) -> int | None:
        return self._parts[tp].end

    def accept(self, tp: TopicPartition, offset: int) -> bool:
        """A record at `offset` arrived: True if it is to be emitted (then `next` moves past it).

        A record before `next` was emitted already (a fetch that overlapped a
        seek): False. A record at or past a bounded end: False, and the
        partition is done.
        """
        part = self._parts.get(tp)
        if part is None or offset < part.next:
            return False
        if part.end is not None and offset >= part.end:
            part.next = max(part.next, part.end)
            return False
        part.next = offset + 1
        return True

    def accept_run(self, tp: TopicPartition, offsets: Sequence[int]) -> tuple[int, int]:
        """Records of one partition at `offsets`, strictly increasing (a fetch delivers a partition in order),
        arrived: the slice [start, stop) of them to emit. The same as accept() on each in turn, in
        O(log n) instead of n calls: those before `next` were emitted already, those at or past a bounded
        end are not, and `next` moves past the last one emitted (or to the end, once reached)."""
        part = self._parts.get(tp)
        if part is None or not offsets:
            return 0, 0
        count = len(offsets)
        start = 0 if offsets[0] >= part.next else bisect_left(offsets, part.next)
        stop = count
        if part.end is not None and offsets[-1] >= part.end:
            stop = bisect_left(offsets, part.end, start)
        if stop > start:
            part.next = offsets[stop - 1] + 1
        if stop < count:
            part.next = max(part.next, part.end)
        return start, stop

    def confirm_end(self, tp: TopicPartition, high_watermark: int) -> None:
        """The broker's first fetch answer for `tp` says its log ends at `high_watermark` (once per partition).

        A broker's ListOffsets may answer less than the log's real end (Tansu
        answers the last batch's base offset + 1), so a bounded read's end is
        the larger of the two: the end as the partition's first fetch saw it.
        """
        part = self._parts.get(tp)
        if part is None or part.end is None or part.end_known:
            return
        part.end = max(part.end, high_watermark)
        part.end_known = True

    def stop_at_time(self, tp: TopicPartition) -> None:
        """A bounded-by-time read met a record at or past its end time: the partition is done there."""
        part = self._parts.get(tp)
        if part is not None:
            part.end = part.next
            part.end_known = True

    def done(self, tp: TopicPartition) -> bool:
        part = self._parts[tp]
        return part.end is not None and part.end_known and part.next >= part.end

    def all_done(self) -> bool:
        """Every owned partition reached its end (never, for an unbounded read; at once, owning none)."""
        return all(self.done(tp) for tp in self._parts)

    def lag(self, tp: TopicPartition, high_watermark: int) -> int:
        """Records between `next` and the log's end (a bounded read: its end), never negative."""
        part = self._parts[tp]
        end = high_watermark if part.end is None else min(part.end, high_watermark)
        return max(0, end - part.next)

    def snapshot(self) -> dict[str, list[list[Any]]]:
        """The position for a checkpoint: {"next": [[topic, partition, offset], ...], "end": [...]}.

        Only confirmed ends are kept: an end the broker has not confirmed yet is
        taken again (and confirmed) after a restore, never trusted as final.
        """
        parts = sorted(self._parts.items())
        return {"next": [[t, p, part.next] for (t, p), part in parts],
                "end": [[t, p, part.end] for (t, p), part in parts if part.end is not None and part.end_known]}

    @staticmethod
    def read(position: Any) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
        """(next offsets, ends) of a snapshot(); ValueError naming what is wrong with anything else."""
        if not isinstance(position, dict) or not isinstance(position.get("next"), list):
            raise ValueError(f"a Kafka source position is {{'next': [[topic, partition, offset], ...]}}, "
                             f"got {position!r:.200}")
        out: list[dict[TopicPartition, int]] = []
        for field in ("next", "end"):
            entries: dict[TopicPartition, int] = {}
            for entry in position.get(field) or []:
                if (not isinstance(entry, (list, tuple)) or len(entry) != 3 or not isinstance(entry[0], str)
                        or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in entry[1:])):
                    raise ValueError(f"a Kafka source position's {field!r} entries are [topic, partition, offset] "
                                     f"with whole numbers >= 0, got {entry!r:.200}")
                entries[(entry[0], entry[1])] = entry[2]
            out.append(entries)
        return out[0], out[1]


def increasing(offsets: Sequence[int]) -> bool:
    """Strictly increasing (what PartitionOffsets.accept_run needs), checked at C speed."""
    return all(map(operator.lt, offsets, offsets[1:]))


def merge_positions(positions: Iterable[Any]) -> dict[str, list[list[Any]]]:
    """One position holding every partition of several instances' positions (their partition sets are
    disjoint): what each instance of a rescaled source is restored from, keeping the partitions it owns.

    None entries (an instance that recorded nothing) are skipped. ValueError names a partition that two
    positions both hold, or an entry that is no position."""
    nexts: dict[TopicPartition, int] = {}
    ends: dict[TopicPartition, int] = {}
    for position in positions:
        if position is None:
            continue
        more_nexts, more_ends = PartitionOffsets.read(position)
        twice = sorted(set(nexts) & set(more_nexts))
        if twice:
            raise ValueError(f"partition {twice[0]} is in two instances' positions; the instances of a source "
                             "own disjoint partitions, so these positions are not of one checkpoint")
        nexts.update(more_nexts)
        ends.update(more_ends)
    return {"next": [[t, p, o] for (t, p), o in sorted(nexts.items())],
            "end": [[t, p, o] for (t, p), o in sorted(ends.items())]}


class AckedOffsets:
    """at_least_once: per partition, its acked watermark: the offset before which every emitted batch was acked
    (or dropped), and which batches of it are still in flight.

    Batches complete in any order; a partition's watermark only moves past a
    batch once every earlier batch of that partition completed, so a restart
    from the committed offsets never skips an unacked record. The same
    watermark is what a live rescale hands a partition over at (release()):
    every record below it was acked, every record not acked is at or above it.

    Complexity: emitted() O(partitions of the batch), settled() O(partitions of
    the batch + batches it lets go), in_flight() O(batches of the partition).
    """

    def __init__(self) -> None:
        self._queues: dict[TopicPartition, deque[tuple[int, int]]] = {}  # tp -> (batch, next offset after it)
        self._batches: dict[int, tuple[TopicPartition, ...]] = {}  # batch in some queue -> its partitions
        self._settled: set[int] = set()  # acked or dropped, still behind an earlier batch in some queue
        self._failed: set[int] = set()  # failed at least once and not settled since (replayed, or read again)
        self._watermarks: dict[TopicPartition, int] = {}
        self._committable: dict[TopicPartition, int] = {}

    def start(self, tp: TopicPartition, offset: int) -> None:
        """`tp` is read from `offset` on (its watermark until a batch of it completes); forgets any earlier
        reading of it."""
        self._drop(tp)
        self._watermarks[tp] = offset

    def emitted(self, batch: int, nexts: dict[TopicPartition, int]) -> None:
        """Batch `batch` holds records of each tp in `nexts` up to (not including) nexts[tp]."""
        for tp, offset in nexts.items():
            self._queues.setdefault(tp, deque()).append((batch, offset))
        if nexts:
            self._batches[batch] = tuple(nexts)

    def settled(self, batch: int) -> None:
        """Batch `batch` was acked, or given up (dead-lettered: it is not read again either)."""
        parts = self._batches.get(batch)
        if parts is None:
            return
        self._settled.add(batch)
        self._failed.discard(batch)
        for tp in parts:
            queue = self._queues.get(tp)
            moved = False
            while queue and queue[0][0] in self._settled:
                gone, offset = queue.popleft()
                self._watermarks[tp] = offset
                moved = True
                self._let_go(gone, tp)
            if moved:
                self._committable[tp] = self._watermarks[tp]

    def failed(self, batch: int) -> None:
        """Batch `batch` failed (it is replayed, and stays in flight until settled): its outcome is known, not
        acked. A partition whose every batch in flight failed has nothing more to wait for (in_flight)."""
        if batch in self._batches and batch not in self._settled:
            self._failed.add(batch)

    def take(self) -> dict[TopicPartition, int]:
        """Offsets that moved since the last take(): what to commit to the group."""
        out, self._committable = self._committable, {}
        return out

    def watermark(self, tp: TopicPartition) -> int | None:
        """The lowest offset of `tp` not known to be acked (every record below it was), or None when `tp` was
        never start()ed and no batch of it completed."""
        return self._watermarks.get(tp)

    def in_flight(self, tp: TopicPartition) -> bool:
        """Some batch with records of `tp` is neither settled nor failed: waiting for it may move the watermark."""
        return any(b not in self._settled and b not in self._failed for b, _ in self._queues.get(tp, ()))

    def release(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        """Give `tps` up (a rescale moves them): each one's watermark now, and it is forgotten (its batches'
        later outcomes, and its uncommitted watermark, no longer count here)."""
        out = {}
        for tp in tps:
            out[tp] = self._watermarks.get(tp)
            self._drop(tp)
        return out

    def partitions(self) -> list[TopicPartition]:
        """The partitions it tracks, sorted."""
        return sorted(set(self._watermarks) | set(self._queues))

    def _drop(self, tp: TopicPartition) -> None:
        for batch, _ in self._queues.pop(tp, ()):
            self._let_go(batch, tp)
        self._watermarks.pop(tp, None)
        self._committable.pop(tp, None)

    def _let_go(self, batch: int, tp: TopicPartition) -> None:
        """`batch` left the queue of `tp`: forgotten once it is in no queue."""
        parts = tuple(p for p in self._batches.get(batch, ()) if p != tp)
        if parts:
            self._batches[batch] = parts
        else:
            self._batches.pop(batch, None)
            self._settled.discard(batch)
            self._failed.discard(batch)

    def check_invariants(self) -> None:
        """Every batch in a queue is in _batches with that partition; settled and failed ones are known ones."""
        for tp, queue in self._queues.items():
            for batch, _ in queue:
                assert tp in self._batches[batch], (tp, batch)
        held = {b for q in self._queues.values() for b, _ in q}
        assert set(self._batches) == held, (sorted(self._batches), sorted(held))
        assert self._settled <= held and self._failed <= held and not (self._settled & self._failed)


class TimeAligner:
    """Event-time alignment inside one source: per-partition buffers released in timestamp order.

    A window's watermark is the newest timestamp its SPU has seen minus a bound,
    and librdkafka hands over one partition's fetched batch before the next: a
    partition read ahead would make the others' records late. Records wait here
    per partition; the oldest buffered one is released while it is at most
    `max_skew` ms past the newest timestamp of every partition that has nothing
    buffered (so nothing older can still come from it). A partition at its end
    (nothing to read now) holds no one back; one not heard from yet holds
    everyone until it is. Within a partition the order is the log's.
    """

    def __init__(self, max_skew: int) -> None:
        self.max_skew = max_skew
        self._buffers: dict[TopicPartition, deque[tuple[int, Any]]] = {}
        self._newest: dict[TopicPartition, int] = {}
        self._idle: set[TopicPartition] = set()

    def add(self, tp: TopicPartition, timestamp: int, item: Any) -> None:
        self._buffers.setdefault(tp, deque()).append((timestamp, item))
        self._idle.discard(tp)
        if timestamp > self._newest.get(tp, -1):
            self._newest[tp] = timestamp

    def at_end(self, tp: TopicPartition) -> None:
        self._idle.add(tp)

    def buffered(self, tp: TopicPartition) -> int:
        buffer = self._buffers.get(tp)
        return len(buffer) if buffer else 0

    def drop(self, tp: TopicPartition) -> None:
        """Forget `tp` (it moved to another instance): what waited of it is read there again."""
        self._buffers.pop(tp, None)
        self._newest.pop(tp, None)
        self._idle.discard(tp)

    def clear(self) -> None:
        self._buffers.clear()
        self._newest.clear()
        self._idle.clear()

    def release(self, reading: Iterable[TopicPartition]) -> list[tuple[TopicPartition, Any]]:
        """The items that may go now, oldest first, among the partitions still `reading` (O(p + n log p))."""
        reading = list(reading)
        limit = float("inf")  # the newest timestamp of the partitions with nothing buffered (the slowest)
        for q in reading:
            if q not in self._idle and not self._buffers.get(q):
                seen = self._newest.get(q)
                if seen is None:
                    return []  # not heard from yet: it may hold anything
                limit = min(limit, seen)
        heads = [(buf[0][0], tp) for tp in reading if (buf := self._buffers.get(tp))]
        heapq.heapify(heads)
        out: list[tuple[TopicPartition, Any]] = []
        while heads:
            timestamp, tp = heads[0]
            if timestamp > limit + self.max_skew:
                break
            buffer = self._buffers[tp]
            out.append((tp, buffer.popleft()[1]))
            if buffer:
                heapq.heapreplace(heads, (buffer[0][0], tp))
            else:  # now it has nothing buffered: its newest timestamp bounds the others
                heapq.heappop(heads)
                if tp not in self._idle:
                    limit = min(limit, self._newest[tp])
        return out
