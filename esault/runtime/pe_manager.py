"""The input router and PE manager of one SPU: key -> PE, created on demand.

For key-grouped bolts every key gets its own Bolt instance (a processing
element) whose attributes are that key's state. Lookup, insert and delete are
O(1) dict operations. PEs idle for pe_idle_timeout expire; use is recorded
once per batch (C-level dict updates), not per tuple.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

from esault.keyhash import key_hash


class PeManager:
    """Owns the PEs of one SPU. Not thread-safe: only its SPU actor touches it."""

    def __init__(self, make_pe: Callable[[Any], Any], per_key: bool, idle_timeout: float | None) -> None:
        self._make_pe = make_pe
        self.per_key = per_key
        self.idle_timeout = idle_timeout if per_key else None
        self.pes: dict[Any, Any] = {}
        self.last_used: dict[Any, float] = {}
        self._single: Any = None

    def __len__(self) -> int:
        return len(self.pes) if self.per_key else (1 if self._single is not None else 0)

    def single(self) -> Any:
        """The one instance of a bolt that is not key-grouped."""
        if self._single is None:
            self._single = self._make_pe(None)
        return self._single

    def create(self, key: Any) -> Any:
        pe = self._make_pe(key)
        self.pes[key] = pe
        return pe

    def touch(self, keys: list[Any], now: float) -> None:
        """These keys were used at `now` (once per batch). O(len(keys)), in C."""
        if self.idle_timeout is None:
            return
        try:
            self.last_used.update(dict.fromkeys(keys, now))
        except TypeError:  # an unhashable key in the batch: it has no PE, the others do
            for key in keys:
                try:
                    self.last_used[key] = now
                except TypeError:
                    pass

    def idle(self, now: float) -> list[tuple[Any, Any]]:
        """Remove and return PEs unused for idle_timeout. O(number of PEs)."""
        if self.idle_timeout is None:
            return []
        cutoff = now - self.idle_timeout
        expired = [k for k, t in self.last_used.items() if t <= cutoff]
        out = []
        for key in expired:
            del self.last_used[key]
            pe = self.pes.pop(key, None)
            if pe is not None:
                out.append((key, pe))
        return out

    def take_range(self, lo: int, hi: int) -> list[tuple[Any, Any]]:
        """Remove and return the PEs whose key hash lies in [lo, hi] (they move away)."""
        moved = [k for k in self.pes if lo <= key_hash(k) <= hi]
        out = []
        for key in moved:
            self.last_used.pop(key, None)
            out.append((key, self.pes.pop(key)))
        return out

    def items(self) -> Iterator[tuple[Any, Any]]:
        if self.per_key:
            yield from list(self.pes.items())
        elif self._single is not None:
            yield None, self._single

    def clear(self) -> None:
        self.pes.clear()
        self.last_used.clear()
        self._single = None
