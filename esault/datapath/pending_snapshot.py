"""A keyed SPU's snapshot encoded in slices after its barrier left, so the barrier never waits for it.

Why: while an SPU encodes, no tuple moves; encoded at the barrier, ~45k
changed keys stopped a word count's SPU for 40-130 ms every checkpoint, which
was its whole p99 latency at 70% load (docs/PERFORMANCE.md).

At a barrier the SPU takes the PEs that changed in the epoch (its dirty list)
and forwards the barrier at once; the states are encoded a slice at a time,
one slice per Tick (every tick_interval), sized to finish within ~40% of the
checkpoint interval: the encoding takes a bounded share of the SPU's time,
between batches. The states must be those at the barrier, so every path that
can change a pending key's PE encodes that key first: a batch (a PE it meets
still stamped with the snapshot's period, or wakes from an older generation),
a tick (the ticking keys), an expiry (the expired PEs), and, for the
rarer ones (a hand-off, the end of input, the next barrier), the whole rest
at once. The snapshot goes to the SnapshotWriter when its last key is
encoded; a rollback drops it with the SPU.

Each key's entry is packed on its own (key, then state) into its bucket's
list; a row is one msgpack array header and the entries joined, the same
bytes `pack_entries` makes of the whole list.
"""

from __future__ import annotations

from typing import Any

from esault.checkpoint.snapshots import Snapshot
from esault.transport.codec import array_header


class PendingSnapshot:
    """One epoch's keyed snapshot being encoded: the PEs still to encode and the entries packed so far.

    Pure bookkeeping; the SPU encodes (it alone may read its PEs)."""

    __slots__ = ("snapshot", "dirty", "next", "slice", "entries", "stamp")

    def __init__(self, snapshot: Snapshot, dirty: list[Any], slice_keys: int, stamp: object) -> None:
        self.snapshot = snapshot
        self.dirty = dirty
        """The PEs stamped in the epoch, as listed (PeManager.end_period()): slices walk it from `next`. Which
        of them are still to encode is on them: the stamp (below)."""
        self.next = 0
        self.stamp = stamp
        """The dirty stamp of the epoch these PEs changed in (PeManager's period then). A PE still carrying
        it has neither run nor been encoded nor left since the barrier: it is pending. Encoding it clears the stamp
        (None), so no path encodes it twice, and building no set of the keys at the barrier keeps the seal
        short (a set of ~45k keys, built and filtered, took 16-37 ms of the SPU's thread)."""
        self.slice = slice_keys
        """PEs encoded per slice."""
        self.entries: dict[int, list[bytes]] = {}
        """bucket -> its packed entries, each one key's packed key and state (their msgpack bytes joined); the
        SPU's encoding loop appends to it directly."""

    def take_slice(self) -> list[Any]:
        """The next `slice` listed PEs (their stamps tell which are still pending)."""
        start = self.next
        self.next = start + self.slice
        return self.dirty[start:self.next]

    def take_rest(self) -> list[Any]:
        rest = self.dirty[self.next:]
        self.next = len(self.dirty)
        return rest

    @property
    def left(self) -> int:
        """Listed PEs that have not had their turn."""
        return max(0, len(self.dirty) - self.next)

    def add(self, bucket: int, entry: bytes) -> None:
        """One key's packed key and state (their msgpack bytes, concatenated) goes into `bucket`'s row."""
        entries = self.entries.get(bucket)
        if entries is None:
            self.entries[bucket] = [entry]
        else:
            entries.append(entry)

    def rows(self) -> list[tuple[int, bytes]]:
        """The bucket rows: each as pack_entries([key, state, ...]) of its entries, in the order added."""
        return [(bucket, array_header(2 * len(entries)) + b"".join(entries))
                for bucket, entries in self.entries.items()]
