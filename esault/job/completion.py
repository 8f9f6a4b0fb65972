"""Whether a job read as complete from its workers' counts is complete: two waves of fresh counts.

A job whose trees are not all tracked (a join chain's SPUs, an untracked
spout) is complete when every tuple emitted was processed and no SPU holds
work (in flight, queued). Workers report their counts with heartbeats, each
at its own moment, so the sums mix counts of different moments: a tuple sent
after one worker reported and another received before the next one did can
cancel one still in transit, and the sums balance while tuples still move
(most likely how a join benchmark's job once ended with 83.5% of its pairs: its chain SPUs track no trees). Mattern's
four-counter method closes that: take a wave of counts every worker made
after the wave began, then a second one; if both say complete and their sums
are equal, nothing moved between them, so at the moment between the waves
every tuple sent had been received (counts only grow: the second wave saw at
least what was sent then, the first at most what was received), and the job
was done.
"""

from __future__ import annotations

from typing import Callable, Hashable

__all__ = ["confirmed_by_two_waves"]


def confirmed_by_two_waves(wave: Callable[[], Hashable | None]) -> bool:
    """True when two waves in a row say complete with equal sums.

    `wave()` takes one wave (every worker's counts made after the call began) and answers its sums, or
    None when that wave does not say complete (or did not finish). The counts must only grow between
    rollbacks; a rollback changes which SPUs count, so its waves differ and the check fails safe."""
    first = wave()
    if first is None:
        return False
    return wave() == first
