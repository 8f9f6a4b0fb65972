"""TagPartitioner: which SPU gets each tuple under TAG grouping (or Partial Key Grouping).

TAG (time-aware grouping, PAPER_NOTES section 7), for a unit whose aggregate can
be combined downstream, so a key may be processed on several SPUs:

- heavy keys are found per window with the Space-Saving sketch (1/epsilon counters): a
  key whose count reaches heavy_share of the window (after `warmup` tuples) is heavy
  from then on, and the window's end re-decides for the next one;
- a heavy key is cut into segments, ceil(2 x its share x SPUs) of them (at least 2),
  each placed on SPU i with probability proportional to 1/t_i (t_i: that SPU's
  measured mean completion time per tuple), without replacement, so its
  candidates are distinct SPUs and a slow SPU is rarely among them;
- each tuple of a heavy key goes to the least loaded of its candidates, load
  t_i x (queued_i + 1);
- a light key picks the less loaded of two hash choices (as PKG does).

mode="pkg" is Partial Key Grouping alone (two hash choices for every key, load
= tuples this sender sent in the window, t_i ignored): the baseline TAG is
measured against.

Pure and deterministic: no clock (the owner calls end_window()), a seeded RNG
per (seed, window, key), esault.keyhash for hashes; loads come in by report().
"""

from __future__ import annotations

import math
import random
from typing import Any, Iterable

from esault.keyhash import key_hash
from esault.routing.space_saving import SpaceSaving

MODES = ("tag", "pkg")
_CHOICE_CACHE_LIMIT = 1 << 16
TIME_SMOOTHING = 0.3
"""Weight of a new completion-time reading in t_i's moving average."""


def second_hash(h: int) -> int:
    """An independent-looking second hash of a key hash (splitmix64 finaliser), for the second choice."""
    z = (h + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return z ^ (z >> 31)


class TagPartitioner:
    """Per-sender routing state for one TAG (or PKG) grouped downstream unit. Not thread-safe."""

    def __init__(self, spus: Iterable[int], mode: str = "tag", epsilon: float = 0.001,
                 heavy_share: float | None = None, seed: int = 0, warmup: int = 1000) -> None:
        if mode not in MODES:
            raise ValueError(f"TagPartitioner mode must be one of {MODES}, got {mode!r}")
        if heavy_share is not None and not 0 < heavy_share <= 1:
            raise ValueError(f"heavy_share must be in (0, 1], got {heavy_share!r}")
        self.mode = mode
        self.seed = seed
        self.heavy_share = heavy_share
        self.warmup = warmup
        """Tuples a window must have seen before a key can turn heavy inside it (too few say nothing)."""
        self.sketch = SpaceSaving(epsilon) if mode == "tag" else None
        self.window = 0
        self.spus: list[int] = []
        self.time: dict[int, float] = {}
        self.queued: dict[int, float] = {}
        self.heavy: dict[Any, list[int]] = {}  # heavy key -> its candidate SPUs (distinct)
        self.segments: dict[Any, int] = {}  # heavy key -> how many segments it is cut into
        self._choices: dict[Any, tuple[int, int]] = {}
        self._measured: set[int] = set()  # SPUs whose time is measured, not a default
        self.set_spus(spus)

    # --- the per-tuple decision ------------------------------------------------

    def choose(self, key: Any) -> int:
        """The SPU for one tuple of `key`; counts it as queued there."""
        sketch = self.sketch
        candidates = None
        if sketch is not None:
            try:
                count = sketch.add(key)
                candidates = self.heavy.get(key)
                total = sketch.total
                if candidates is None and total >= self.warmup and count >= self._heavy_at * total:
                    candidates = self._promote(key, count, total)
            except TypeError:  # unhashable: not tracked as heavy
                candidates = None
        if candidates is None:
            try:
                candidates = self._choices[key]
            except KeyError:
                candidates = self._two_choices(key)
            except TypeError:
                candidates = self._two_choices(key, cache=False)
        time, queued = self.time, self.queued
        best = candidates[0]
        best_load = time[best] * (queued[best] + 1)
        for spu in candidates[1:]:
            load = time[spu] * (queued[spu] + 1)
            if load < best_load:
                best, best_load = spu, load
        queued[best] += 1
        return best

    def _promote(self, key: Any, count: int, total: int) -> list[int] | None:
        """A key turned heavy inside the window (no need to wait for its end): place its segments now."""
        if len(self.spus) < 2:
            return None
        self.segments[key] = max(2, math.ceil(2 * count / total * len(self.spus)))
        candidates = self.heavy[key] = self._segment_spus(key, min(len(self.spus), self.segments[key]))
        return candidates

    def load(self, spu: int) -> float:
        return self.time[spu] * (self.queued[spu] + 1)

    def _two_choices(self, key: Any, cache: bool = True) -> tuple[int, int]:
        spus = self.spus
        n = len(spus)
        h = key_hash(key)
        first = h % n
        second = second_hash(h) % n
        if second == first and n > 1:
            second = (first + 1) % n
        pair = (spus[first], spus[second])
        if cache:
            if len(self._choices) >= _CHOICE_CACHE_LIMIT:
                self._choices.clear()
            self._choices[key] = pair
        return pair

    # --- what the owner feeds in -------------------------------------------------

    def report(self, spu: int, mean_time: float | None, queued: float) -> None:
        """SPU `spu`'s measured mean completion time per tuple (None: unknown, keep the last) and queue, in tuples.

        PKG ignores reports (it balances what this sender sent). Unknown SPUs are ignored.
        """
        if spu not in self.time or self.mode == "pkg":
            return
        if mean_time is not None and mean_time > 0:
            if spu in self._measured:  # an EWMA: one short interval's reading is noisy
                self.time[spu] += TIME_SMOOTHING * (float(mean_time) - self.time[spu])
            else:
                self.time[spu] = float(mean_time)
                self._measured.add(spu)
        self.queued[spu] = max(0.0, float(queued))

    def end_window(self) -> None:
        """Close the window: the heavy keys it found get candidate SPUs for the next one."""
        self.window += 1
        if self.mode == "pkg":
            for spu in self.queued:  # PKG's local estimate: tuples sent in the current window
                self.queued[spu] = 0.0
            return
        self._place_heavy(self.sketch.heavy(self._share()), self.sketch.total)
        self.sketch.clear()

    def _share(self) -> float:
        return self.heavy_share if self.heavy_share is not None else 1.0 / (2 * len(self.spus))

    def _place_heavy(self, counts: dict[Any, int], total: int) -> None:
        n = len(self.spus)
        self.segments = {key: max(2, math.ceil(2 * count / total * n)) for key, count in counts.items()}
        self._place_segments()

    def _place_segments(self) -> None:
        n = len(self.spus)
        self.heavy = {key: self._segment_spus(key, min(n, segments))
                      for key, segments in self.segments.items()} if n > 1 else {}

    def _segment_spus(self, key: Any, segments: int) -> list[int]:
        """`segments` distinct SPUs drawn with probability proportional to 1/t_i (Efraimidis-Spirakis)."""
        rng = random.Random(f"{self.seed}:{self.window}:{key_hash(key)}")
        ranked = sorted(self.spus, key=lambda spu: rng.random() ** self.time[spu])  # u^(1/w), w = 1/t
        return ranked[-segments:][::-1]

    def set_spus(self, spus: Iterable[int]) -> None:
        """The unit's SPU set changed (split, merge, rescale): re-place heavy keys, recompute the choices.

        A new SPU starts at the mean time of the others and the least queue (it is empty, but only
        its real queue will tell how fast it drains).
        """
        new = sorted(set(spus))
        if not new:
            raise ValueError("a TAG/PKG route needs at least one SPU")
        known = [self.time[s] for s in new if s in self.time]
        mean_time = sum(known) / len(known) if known else 1.0
        least = min((self.queued[s] for s in new if s in self.queued), default=0.0)
        self.time = {s: self.time.get(s, mean_time) for s in new}
        self.queued = {s: self.queued.get(s, least) for s in new}
        self.spus = new
        self._heavy_at = self._share()
        self._measured &= set(new)
        self._choices.clear()
        self._place_segments()  # the same heavy keys and segment counts, placed over the new set

    def check_invariants(self) -> None:
        assert self.spus == sorted(set(self.spus)) and self.spus
        assert set(self.time) == set(self.queued) == set(self.spus)
        assert all(t > 0 for t in self.time.values()) and all(q >= 0 for q in self.queued.values())
        for key, candidates in self.heavy.items():
            assert candidates and len(set(candidates)) == len(candidates), (key, candidates)
            assert set(candidates) <= set(self.spus), (key, candidates, self.spus)
        for pair in self._choices.values():
            assert set(pair) <= set(self.spus)
