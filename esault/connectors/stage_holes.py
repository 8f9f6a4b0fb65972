"""Which staged records an exactly-once Kafka sink still owes, so it never publishes past a lost stage file.

The broker's marker says which epoch was published last. Publishing epoch e moves it to e, so it also claims every
epoch before e: if one of their stage files was lost (a disk or a store that dropped it), the lost records would
from then on look published, and after a crash nothing could tell them from published ones. So before an epoch is
published, every record staged for the epochs after the marker up to it must be in its file:

- this instance's own stage writes are counted per file (records a failed write carried are counted where they
  were written);
- a restored instance adds what its checkpoint says its predecessors staged, counted per barrier (OutputLedger):
  a barrier whose stage write failed shows as an epoch with no file, its records in the next file written.

Carries only move records forward into the next file, so at each file the sums agree unless a file is gone.
"""

from __future__ import annotations

__all__ = ["StageHoles"]


class StageHoles:
    """The records owed per staged epoch after the marker, and the check before a publish; pure (no I/O)."""

    def __init__(self) -> None:
        self._owed: dict[int, int] = {}
        self.hole: tuple[int, int] | None = None
        """(first epoch, records gone): found once, then nothing past it may be published."""

    def restored(self, staged: dict[int, int], marker: int, restored_epoch: int) -> None:
        """The restored checkpoint's staged epochs (per barrier); only those in (marker, restored] are owed."""
        for epoch, records in staged.items():
            if marker < epoch <= restored_epoch and records > 0:
                self._owed[epoch] = records

    def wrote(self, epoch: int, records: int) -> None:
        """This instance staged `records` (carried ones included) in epoch `epoch`'s file."""
        if records > 0:
            self._owed[epoch] = records

    def published(self, epoch: int) -> None:
        """The marker moved to `epoch`: nothing up to it is owed any more."""
        for done in [e for e in self._owed if e <= epoch]:
            del self._owed[done]

    def may_publish(self, epoch: int, records: int, marker: int) -> bool:
        """May epoch `epoch`, whose file holds `records`, be published with the marker at `marker`? False (and
        `hole` set) when the records owed in (marker, epoch] are not all in it; epochs owed nothing (an older
        checkpoint that did not say) pass."""
        if self.hole is not None:
            return False
        owed = [(e, n) for e, n in sorted(self._owed.items()) if marker < e <= epoch]
        total = sum(n for _, n in owed)
        if not owed or total == records:
            return True
        self.hole = (owed[0][0], total - records)
        return False
