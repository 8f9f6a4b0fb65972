"""The unit's side of a live spout rescale (at_least_once): whom it waits for, and what they answered.

The control thread (esault.job.spout_rescale) asks the unit to ReleaseShares, then to TakeShares; each ask
returns a Future that the unit resolves once every SPU of that phase answered (ShareReleased, ShareTaken) or
was lost with its worker (SpusLost). A lost giver's answer is None: its partitions are taken from the
group's committed offsets. Plain Python, no actors: the unit calls it on its own thread.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any, Iterable


class ReleaseShares:
    """control thread -> unit (ask), in this process only: tell every SPU to stop reading what it does not own
    at `instances` instances; the answer is a Future of {spu: position or None}. `lost`: SPUs known dead."""

    def __init__(self, rescale_id: int, instances: int, lost: frozenset[int]) -> None:
        self.rescale_id = rescale_id
        self.instances = instances
        self.lost = lost


class TakeShares:
    """control thread -> unit (ask), in this process only: run `instances` instances from now on. Instances
    below it that run take their share of `position`, the others stop. The answer is (a Future of
    {spu: error}, the (spec, SpuConfig) of each new instance for the control thread to start, SPUs retired):
    started from the unit's thread, a new SPU's start would wait behind a worker's death the driver is
    handling, which asks the unit for its SPUs."""

    def __init__(self, rescale_id: int, instances: int, position: Any, downstream: tuple[Any, ...],
                 lost: frozenset[int]) -> None:
        self.rescale_id = rescale_id
        self.instances = instances
        self.position = position
        self.downstream = downstream
        self.lost = lost


class AdoptSpouts:
    """control thread -> unit (ask), in this process only: the new spout SPUs it started ({spu: mailbox}); the
    answer: those already lost with their worker, which it starts again."""

    def __init__(self, spus: dict[int, Any]) -> None:
        self.spus = spus


class EndShareMove:
    """control thread -> unit (ask), in this process only: the rescale is over (done or given up); answers
    that still come are ignored. The answer: the SPUs that never answered the current phase."""

    def __init__(self, rescale_id: int) -> None:
        self.rescale_id = rescale_id


class GiveUpWaiting:
    """control thread -> unit (ask), in this process only: the SPUs the current phase still waits for count as
    lost (they did not answer in time); the answer: those SPUs."""

    def __init__(self, rescale_id: int) -> None:
        self.rescale_id = rescale_id


class ShareMove:
    """One phase at a time: the SPUs asked, their answers, a Future resolved once none is awaited."""

    def __init__(self, rescale_id: int) -> None:
        self.rescale_id = rescale_id
        self.answers: dict[int, Any] = {}
        self.waiting: set[int] = set()
        self.future: Future = Future()

    def phase(self, spus: Iterable[int], lost: Iterable[int] = ()) -> Future:
        """A new phase asking `spus` (those in `lost` count as answered None)."""
        self.answers, self.waiting, self.future = {}, set(spus), Future()
        self.lost(lost)
        self._check()
        return self.future

    def answered(self, rescale_id: int, spu: int, value: Any) -> None:
        if rescale_id != self.rescale_id or spu not in self.waiting:
            return  # another rescale's, or a second answer
        self.waiting.discard(spu)
        self.answers[spu] = value
        self._check()

    def lost(self, spus: Iterable[int]) -> None:
        for spu in set(spus) & self.waiting:
            self.waiting.discard(spu)
            self.answers[spu] = None
        self._check()

    def _check(self) -> None:
        if not self.waiting and not self.future.done():
            self.future.set_result(dict(self.answers))
