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

Checkpoints need the keys whose PE ran since the last checkpoint (dirty keys).
An exactly_once SPU (`track_touched`) marks each batch's keys in a set
(`touch_all`, one C-level set update per batch) and a checkpoint takes that
set (`take_touched_keys()`); expiry and moves take their keys out of it. A
checkpoint leaves the generations as they are, so no key misses `active`
after it. (Rotating `active` at each checkpoint instead, as esault once did,
made every key of the epoch miss once and be moved back: ~2.5% of a word
count's GIL at 2 s checkpoints.)
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

from esault.keyhash import key_hash

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
        self.touched: set[Any] | None = set() if track_touched and per_key else None
        """Keys of the batches (touch_all), ticks and new PEs since the last take_touched_keys(), less those
        expired or moved away since. None: this SPU takes no checkpoints."""

    def __len__(self) -> int:
        if not self.per_key:
            return 1 if self._single is not None else 0
        return len(self.active) + sum(len(g.pes) for g in self._retired)

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

    def touch_all(self, keys: list[Any]) -> None:
        """A batch ran for these keys (touched mode): they are dirty. One C-level set update per batch."""
        try:
            self.touched.update(keys)  # type: ignore[union-attr]
        except TypeError:  # an unhashable key has no PE: mark the others
            for key in keys:
                try:
                    self.touched.add(key)  # type: ignore[union-attr]
                except TypeError:
                    pass

    def touch(self, key: Any) -> None:
        """`key`'s PE ran outside a batch (a tick, the end of input): it is dirty."""
        if self.touched is not None:
            self.touched.add(key)

    def wake_or_create(self, key: Any) -> Any:
        """The PE of a key missing from `active`: moved back from an older generation, or created."""
        for gen in reversed(self._retired):
            pe = gen.pes.pop(key, None)
            if pe is not None:
                self.active[key] = pe
                self.touch(key)
                return pe
        return self.create(key)

    def create(self, key: Any) -> Any:
        self.touch(key)
        pe = self._make_pe(key)
        self.active[key] = pe
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
                out.extend(gen.pes.items())
                if self.touched:  # expired: its state is parked, not taken from the PE
                    self.touched.difference_update(gen.pes)
            elif gen.pes:
                keep.append(gen)
        self._retired = keep
        return out

    def _rotate(self) -> None:
        if self.active:
            self._retired.append(_Generation(self.active, self._active_used))
            self.active = {}

    def take_touched_keys(self) -> set[Any]:
        """The keys touched since the last take; a fresh set marks the next ones. Look each PE up: a key
        whose PE could not be made (its open() raised) is among them. Not in touched mode: an empty set."""
        if self.touched is None:
            return set()
        touched, self.touched = self.touched, set()
        return touched

    def take_range(self, lo: int, hi: int) -> list[tuple[Any, Any]]:
        """Remove and return the PEs whose key hash lies in [lo, hi] (they move away). O(PEs)."""
        out = []
        for pes in [self.active] + [g.pes for g in self._retired]:
            moved = [k for k in pes if lo <= key_hash(k) <= hi]
            for key in moved:
                out.append((key, pes.pop(key)))
                if self.touched is not None:  # its state moves with it: the receiver checkpoints it
                    self.touched.discard(key)
        return out

    def items(self) -> Iterator[tuple[Any, Any]]:
        if self.per_key:
            yield from list(self.active.items())
            for gen in list(self._retired):
                yield from list(gen.pes.items())
        elif self._single is not None:
            yield None, self._single

    def clear(self) -> None:
        self.active.clear()
        self._retired.clear()
        if self.touched is not None:
            self.touched.clear()
        self._single = None
