"""ParkedStates: the state of a bolt SPU's expired PEs, kept until their key returns (never lost to expiry).

A key-grouped PE that stays idle for the bolt's pe_idle_timeout expires (its
on_expire() runs first) and its state parks here; the key's next tuple, a
move of its range, or the SPU's stop wakes it. at_least_once and none park in
the unit's state file (esault.state.store). exactly_once parks in memory
until the next checkpoint writes the state; from then on that checkpoint
holds it, where a restore finds it too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from esault.checkpoint.saveable import key_owner
from esault.checkpoint.backends import CheckpointStorage
from esault.checkpoint.store import bucket_of
from esault.datapath.context import log
from esault.keyhash import key_hash
from esault.state.store import StateStore
from esault.transport.codec import decode, encode


class ParkedStates:
    """One per bolt SPU; only its actor thread touches it. Not on the per-tuple path (a PE's creation is)."""

    def __init__(self, spu: Any, path: Path, exactly_once: bool, unit: str, who: str) -> None:
        """`spu`'s steps that take, encode and report lost a state are the one place states go through."""
        self.keys: set[Any] = set()  # keys whose PE expired; their state waits here
        self._state_of: Callable[[Any, Any], Any] = spu._state_of
        self._encode_state: Callable[[Any, Any], bytes] = spu._encode_state
        self._save_state: Callable[[Any, str], bytes | None] = spu.save_state
        self._save_key: Callable[[Any], bytes | None] = spu._save_key
        self._checkpoint_store: Callable[[], CheckpointStorage] = spu.checkpoint_store
        self._path = path
        self._store: StateStore | None = None
        self._exactly_once = exactly_once
        self._unit = unit
        self._who = who  # "topology 'x': bolt 'y'", for the log
        # exactly_once: parked states not yet in a completed checkpoint: key -> (state, epoch written or None)
        self.unsaved: dict[Any, tuple[Any, int | None]] = {}
        self._newest_completed: int | None = None
        """The newest checkpoint this SPU was told completed: it holds every parked state memory let go."""

    def _state_store(self) -> StateStore:
        if self._store is None:
            self._store = StateStore(self._path)
        return self._store

    def park(self, expired: list[tuple[Any, Any]]) -> None:
        """Keep the state of expired PEs (after their on_expire()), to restore on the key's return."""
        if self._exactly_once:
            for key, pe in expired:
                self.unsaved[key] = (self._state_of(key, pe), None)
                self.keys.add(key)
            return
        rows, keys = [], []
        for key, pe in expired:
            state = self._state_of(key, pe)
            if state:
                blob = self._save_state(state, key_owner(self._unit, key))
                key_blob = self._save_key(key) if blob is not None else None
                if key_blob is not None:
                    rows.append((key_hash(key), key_blob, blob))
                    keys.append(key)
        if not rows:
            return
        try:
            self._state_store().put_many(rows)
        except Exception as exc:
            log.error("%s cannot write %d idle keys' state to %s (%r); they restart empty",
                      self._who, len(rows), self._state_store().path, exc)
            return
        self.keys.update(keys)

    def unpark(self, key: Any, pe: Any) -> None:
        """The key's PE is made again: its parked state goes back into it."""
        self.keys.discard(key)
        if self._exactly_once:
            state = self.state(key)
            self.unsaved.pop(key, None)
        else:
            blob = self._state_store().take_many([encode(key)])[0]
            state = None if blob is None else decode(blob)
        if state is not None:
            pe.restore_state(dict(state))

    def take(self, lo: int, hi: int) -> list[tuple[Any, bytes]]:
        """(key, state) of the parked keys hashing into [lo, hi], removed from the store: they move away."""
        moving = [key for key in self.keys if lo <= key_hash(key) <= hi]
        if not moving:
            return []
        self.keys.difference_update(moving)
        if self._exactly_once:
            out = [(key, self.state(key)) for key in moving]
            for key in moving:
                self.unsaved.pop(key, None)
            return [(key, self._encode_state(key, state)) for key, state in out if state is not None]
        blobs = self._state_store().take_many([encode(key) for key in moving])
        return [(key, blob) for key, blob in zip(moving, blobs) if blob is not None]

    def state(self, key: Any) -> Any:
        """exactly_once: a parked key's state, from memory or else from its latest completed checkpoint."""
        unsaved = self.unsaved.get(key)
        if unsaved is not None:
            return unsaved[0]
        return self._checkpoint_store().read_key(self._unit, key, self._newest_completed)[1]

    def snapshot_into(self, buckets: dict[int, list], epoch: int) -> None:
        """exactly_once: the states parked since the last snapshot go into checkpoint `epoch`'s buckets."""
        unsaved = self.unsaved
        for key, (state, written) in unsaved.items():
            if written is None:
                buckets.setdefault(bucket_of(key_hash(key)), []).extend((key, state))
                unsaved[key] = (state, epoch)

    def completed(self, epoch: int) -> None:
        """Checkpoint `epoch` completed: the states it holds are durable there, memory lets them go."""
        if self._newest_completed is None or epoch > self._newest_completed:
            self._newest_completed = epoch
        if self.unsaved:
            done = [k for k, (_, written) in self.unsaved.items() if written is not None and written <= epoch]
            for key in done:
                del self.unsaved[key]

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
