"""The input router and PE manager of one SPU: key -> PE, created on demand.

For key-grouped bolts every key gets its own Bolt instance (a processing
element) whose attributes are that key's state. Lookup, insert and delete are
O(1) dict operations.

Idle expiry costs nothing per tuple. PEs live in generations: `active` holds
the PEs used since the last rotation, older generations those used only
before. Each generation remembers when its latest batch ran (`used()` once per
batch). Every `idle_timeout / 4` the active generation retires; a retired
generation whose latest use is at least idle_timeout old expires whole. A PE
used again leaves its old generation on its first tuple (a dict pop). So a PE
expires after between idle_timeout and 1.25 x idle_timeout without a tuple,
never earlier.

Checkpoints need the PEs that ran since the last checkpoint (dirty PEs).
An exactly_once SPU (`track_touched`) has a `period` token, new at every
checkpoint: a PE that runs (a batch, a tick, finish()) or is made is stamped
with it the first time in the period, and listed in `marked` then (`mark()`;
the batch loop does the same inline). A checkpoint takes the list as it is
and starts a new period (`end_period()`); a listed PE that still carries the
ended period's stamp (`last_period`) holds that period's change (the snapshot
clears it once encoded). A PE that leaves in its period (expires, moves
away) has its stamp cleared as it leaves: its change is in its parked state,
or the receiver's to save. The list holds the PEs, not their keys, so the
snapshot's encoding finds each without a lookup in a table of 100k keys
(~20% of a slice's time, bench/snapshot_encode.py). Why stamps: a set update per tuple
cost a word count ~60 ns a word in cache misses on a 100k-key set (8% of
the workers' GIL); a stamp check on the PE the loop holds anyway costs ~5.
A checkpoint leaves the generations as they are, so no key misses `active`
after it. (Rotating `active` at each checkpoint instead, as esault once did,
made every key of the epoch miss once and be moved back: ~2.5% of a word
count's GIL at 2 s checkpoints.)

Keys that arrive in a hand-off may come as encoded states (`arrived`), their PEs
made on first use or by `settle()`: the receiver's held tuples then wait for
the bytes, not for thousands of constructors and restore_state() calls, which
run between batches instead (docs/PROTOCOLS.md, step 4). Every method that
walks the PEs or takes the dirty keys settles them first, and a hand-off of
this SPU's own passes them on as they came (`take_arrived`).

A key's PE carries its checkpoint bucket (`_esault_bucket`, set as it is made), and the manager keeps
bucket -> keys, so a hand-off takes its ranges' PEs in time proportional to the keys it moves, not to the
keys the SPU holds (`take_range`; ~0.7 us a moved key), for ~13 bytes a key, paid once per key made.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

from esault.checkpoint.store import bucket_of
from esault.datapath.pe_class import bucket_of_key
from esault.keyhash import KEY_SPACE_MAX, key_hash

_GENERATIONS_PER_TIMEOUT = 4


class _Generation:
    __slots__ = ("pes", "last_used")

    def __init__(self, pes: dict[Any, Any], last_used: float) -> None:
        self.pes = pes
        self.last_used = last_used


class PeManager:
    """Owns the PEs of one SPU. Not thread-safe: only its SPU actor touches it."""

    def __init__(self, make_pe: Callable[[Any], Any], per_key: bool, idle_timeout: float | None,
                 now: float = 0.0, track_touched: bool = False) -> None:
        self._make_pe = make_pe
        self.per_key = per_key
        self.idle_timeout = idle_timeout if per_key else None
        self.active: dict[Any, Any] = {}
        """PEs used since the last rotation; the hot path looks keys up here first."""
        self._active_since = now
        self._active_used = float("-inf")
        self._retired: list[_Generation] = []  # oldest first
        self._single: Any = None
        self._in_bucket: dict[int, list[Any]] = {}
        """Checkpoint bucket -> the keys that have a PE here (any generation): a hand-off finds its keys
        without reading every PE (take_range). Lists: a set per bucket cost 87 bytes a key, a list ~13."""
        self.period: object | None = object() if track_touched and per_key else None
        """The stamp of PEs run since the last end_period() (`_esault_mark`); None: this SPU takes no
        checkpoints, and no PE is ever stamped."""
        self.marked: list[Any] = []
        """The PEs stamped with `period`, each once; the batch loop appends to it."""
        self.last_period: object | None = None
        """The period the last end_period() ended: the stamp its PEs carry until they run again or are encoded."""
        self.arrived: dict[Any, Any] = {}
        """Moved-in keys whose PE is not made yet: key -> its encoded state (`install` makes the PE)."""
        self.install: Callable[[Any, Any], Any] | None = None
        """Makes the PE of an arrived key from its encoded state (the keyed processing part's); returns None,
        never raises, when it could not make it."""

    def __len__(self) -> int:
        if not self.per_key:
            return 1 if self._single is not None else 0
        return len(self.active) + sum(len(g.pes) for g in self._retired) + len(self.arrived)

    def single(self) -> Any:
        """The one instance of a bolt that is not key-grouped."""
        if self._single is None:
            self._single = self._make_pe(None)
        return self._single

    def get(self, key: Any) -> Any:
        """The key's PE, or None. Does not count as use."""
        pe = self.active.get(key)
        if pe is None:
            for gen in reversed(self._retired):  # newest first: recently used keys are likelier
                pe = gen.pes.get(key)
                if pe is not None:
                    break
        return pe

    def mark(self, pe: Any) -> None:
        """`pe` ran or was made: it is dirty. The batch loop does this inline (keyed.py)."""
        if pe._esault_mark is not self.period:
            pe._esault_mark = self.period
            self.marked.append(pe)

    def wake_or_create(self, key: Any) -> Any:
        """The PE of a key missing from `active`: moved back from an older generation, or created."""
        for gen in reversed(self._retired):
            pe = gen.pes.pop(key, None)
            if pe is not None:
                self.active[key] = pe
                self.mark(pe)
                return pe
        if self.arrived and key in self.arrived:
            pe = self.install(key, self.arrived.pop(key))  # type: ignore[misc]
            if pe is not None:
                return pe  # else it could not be made (logged): made fresh, or its error raised, below
        return self.create(key)

    def settle(self, limit: int | None = None) -> int:
        """Make the PEs of up to `limit` arrived keys (all if None); how many are left."""
        arrived = self.arrived
        install = self.install
        for _ in range(len(arrived) if limit is None else min(limit, len(arrived))):
            key, state = arrived.popitem()
            install(key, state)  # type: ignore[misc]
        return len(arrived)

    def create(self, key: Any) -> Any:
        pe = self._make_pe(key)
        pe._esault_mark = None  # in no period yet
        self.mark(pe)  # new: dirty (a moved-in key's state is the receiver's to save)
        self.active[key] = pe
        if self.per_key:
            pe._esault_bucket = bucket = bucket_of_key(key)  # the checkpoint's and the hand-off's
            keys = self._in_bucket.get(bucket)
            if keys is None:
                self._in_bucket[bucket] = [key]
            else:
                keys.append(key)
        return pe

    def used(self, now: float) -> None:
        """The active generation's PEs were used up to `now`: call once per batch."""
        self._active_used = now

    def idle(self, now: float) -> list[tuple[Any, Any]]:
        """Retire the active generation when due; remove and return PEs idle for idle_timeout.

        O(1) per rotation plus O(expired PEs).
        """
        timeout = self.idle_timeout
        if timeout is None:
            return []
        if now - self._active_since >= timeout / _GENERATIONS_PER_TIMEOUT:
            self._rotate()
            self._active_since = now
        out: list[tuple[Any, Any]] = []
        cutoff = now - timeout
        keep = []
        for gen in self._retired:
            if gen.last_used <= cutoff:
                out.extend(gen.pes.items())  # expired: its state is parked, not taken from the PE
            elif gen.pes:
                keep.append(gen)
        self._retired = keep
        self._unindex(out)
        self._leave(out)
        return out

    def _unindex(self, gone: list[tuple[Any, Any]]) -> None:
        """Drop expired keys from the bucket index (unless a PE of the key is still here): each bucket they
        were in is rebuilt once, O(the keys of those buckets)."""
        by_bucket: dict[int, set[Any]] = {}
        for key, pe in gone:
            if self.get(key) is None:
                by_bucket.setdefault(pe._esault_bucket, set()).add(key)
        index = self._in_bucket
        for bucket, keys in by_bucket.items():
            left = [key for key in index.get(bucket, ()) if key not in keys]
            if left:
                index[bucket] = left
            else:
                index.pop(bucket, None)

    def _leave(self, pes: list[tuple[Any, Any]]) -> None:
        """These PEs left the table: a change of this period leaves with them (parked, or moved to its receiver),
        so no checkpoint takes it from them. One changed in the ended period keeps its stamp: the pending
        snapshot still encodes its state at the barrier (the keyed part does, before it parks or moves it)."""
        period = self.period
        if period is None:
            return
        for _, pe in pes:
            if pe._esault_mark is period:
                pe._esault_mark = None

    def _rotate(self) -> None:
        if self.active:
            self._retired.append(_Generation(self.active, self._active_used))
            self.active = {}

    def end_period(self) -> list[Any]:
        """The PEs stamped in the period that ends now, as listed (a key made again after it expired is there
        twice, as two PEs): the stamp (`last_period`) says which still hold that period's change. A new period
        starts. O(1): a checkpoint's barrier builds no set of its keys."""
        if self.arrived:  # the receiver's to save: made now, so dirty
            self.settle()
        keys, self.marked = self.marked, []
        self.last_period = self.period
        self.period = object()
        return keys

    def take_range(self, lo: int, hi: int) -> list[tuple[Any, Any]]:
        """Remove and return the PEs whose key hash lies in [lo, hi] (they move away). Arrived keys are not
        among them: take_arrived() gives theirs as they came.

        O(moved keys + buckets in the range), through the bucket index: a bucket inside the range moves
        whole, and only the keys of the (at most two) buckets the range cuts are hashed. The moved keys wait
        for this: reading every PE to hash its key took a 10% range of 100k PEs 22 ms (~200 ns a PE)."""
        first, last = bucket_of(max(lo, 0)), bucket_of(min(hi, KEY_SPACE_MAX))
        index = self._in_bucket
        generations = self._generations()
        out = []
        # Walk the range's buckets, or only the listed ones when they are fewer (a small table, a wide range).
        buckets = (range(first, last + 1) if len(index) > last - first
                   else sorted(b for b in index if first <= b <= last))
        for bucket in buckets:
            keys = index.get(bucket)
            if not keys:
                continue
            if first < bucket < last:
                moving = list(keys)
                del index[bucket]
            else:  # a bucket the range cuts: its keys in [lo, hi] only
                moving, staying = [], []
                for key in keys:
                    (moving if lo <= key_hash(key) <= hi else staying).append(key)
                if staying:
                    index[bucket] = staying
                else:
                    del index[bucket]
            for key in moving:
                for pes in generations:  # normally in one; a key made again while an old PE lingered: both
                    pe = pes.pop(key, None)
                    if pe is not None:
                        out.append((key, pe))  # its state moves with it: the receiver checkpoints it
        self._leave(out)
        return out

    def _generations(self) -> list[dict[Any, Any]]:
        """The PE tables, newest (`active`) first."""
        return [self.active] + [g.pes for g in reversed(self._retired)]

    def check_invariants(self) -> None:
        """AssertionError unless every PE carries its key's bucket and the bucket index lists exactly the keys
        that have a PE here. O(PEs): for tests."""
        generations = self._generations()
        keys = set().union(*generations)
        for pes in generations:
            for key, pe in pes.items():
                assert pe._esault_bucket == bucket_of_key(key), f"PE of {key!r} carries a wrong bucket"
        indexed = [(bucket, key) for bucket, listed in self._in_bucket.items() for key in listed]
        assert len(indexed) == len({key for _, key in indexed}), "a key listed twice in the bucket index"
        assert {key for _, key in indexed} == keys, "the bucket index and the PE table disagree"
        assert all(bucket == bucket_of_key(key) for bucket, key in indexed), "a key listed under another bucket"

    def take_arrived(self, lo: int, hi: int) -> list[tuple[Any, Any]]:
        """Remove and return the (key, encoded state) of arrived keys whose hash lies in [lo, hi]: they move on
        as they came, no PE made for them. O(arrived keys)."""
        arrived = self.arrived
        moving = [key for key in arrived if lo <= key_hash(key) <= hi]
        return [(key, arrived.pop(key)) for key in moving]

    def items(self) -> Iterator[tuple[Any, Any]]:
        if self.arrived:
            self.settle()
        if self.per_key:
            yield from list(self.active.items())
            for gen in list(self._retired):
                yield from list(gen.pes.items())
        elif self._single is not None:
            yield None, self._single

    def clear(self) -> None:
        self.arrived.clear()
        self.active.clear()
        self._retired.clear()
        if self.period is not None:
            self.marked = []
            self.period = object()
        self._single = None
