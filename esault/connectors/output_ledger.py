"""What the checkpoints sent one exactly-once KafkaSink instance, and what it published: the end-of-run audit.

The published count must survive restarts, yet the broker keeps no count for us (Tansu drops the metadata of an
offset commit, so the published-epoch marker carries only its epoch). The ledger therefore derives it from what
the checkpoint already keeps: the rows accepted through each barrier, and the epochs staged but not known to be
published. Restored from checkpoint R, with the broker's marker at M, the records of the staged epochs in
(M, R] are this instance's to publish, and everything else R accepted was published by an earlier instance:

    published_before = accepted(R) - sum(staged[e] for M < e <= R)

At the end, once every completed epoch should have been published, accepted(last barrier) must equal
published_before + what this instance committed; a difference is output missing (a staged epoch lost with a
disk, a publish that failed for good, a broker that did not answer before close_timeout). Sums, not epochs, are
compared: a stage write that failed carries its records into the next epoch's file.
"""

from __future__ import annotations

from typing import Any

__all__ = ["OutputLedger"]


class OutputLedger:
    """The accepted record counts of one sink instance, and the audit against what its publisher committed; every
    method runs on the SPU's thread."""

    def __init__(self, restored_epoch: int | None) -> None:
        self.restored_epoch = restored_epoch
        self.accepted: int | None = 0 if restored_epoch is None else None
        """Records the checkpoints up to the last barrier sent this instance since the job's start (None: not
        known, a checkpoint of an esault that did not record it; then nothing is compared)."""
        self._staged: dict[int, int] = {}  # epoch -> records staged at its barrier, not yet known published
        self._restored_staged: dict[int, int] = {}
        self._accepted_at_restore = 0
        self.last_barrier: int | None = None
        self.completed = -1  # the newest epoch whose publish was asked for

    # -- checkpoints -----------------------------------------------------------------------

    def state(self, buffered: int, marker: int) -> dict[str, Any]:
        """The checkpoint's part (taken before the barrier's on_checkpoint): the count through this barrier and
        the epochs staged after the broker's marker; this barrier's own records are `staged_now`."""
        if self.accepted is None:
            return {}
        staged = [[e, n] for e, n in sorted(self._staged.items()) if e > marker]
        return {"rows_accepted": self.accepted + buffered, "staged": staged, "staged_now": buffered}

    def restore(self, state: dict[str, Any]) -> None:
        """The state of checkpoint `restored_epoch` (its staged_now is that epoch's own records)."""
        accepted, staged, now = state.get("rows_accepted"), state.get("staged"), state.get("staged_now")
        if type(accepted) is not int or accepted < 0 or not isinstance(staged, list) or type(now) is not int:
            return  # an older esault's state, or none: the baseline stays unknown
        pending: dict[int, int] = {}
        for entry in staged:
            if not (isinstance(entry, list) and len(entry) == 2 and all(type(x) is int for x in entry)):
                return
            pending[entry[0]] = entry[1]
        if self.restored_epoch is not None and now:
            pending[self.restored_epoch] = pending.get(self.restored_epoch, 0) + now
        self.accepted = self._accepted_at_restore = accepted
        self._restored_staged = pending
        self._staged = dict(pending)

    @property
    def restored_staged(self) -> dict[int, int]:
        """Epoch -> records the restored checkpoint says were staged and not known published (counted per
        barrier: a stage write that failed carried its records into the next epoch's file)."""
        return dict(self._restored_staged)

    def barrier(self, epoch: int, records: int) -> None:
        if self.accepted is not None:
            self.accepted += records
        if records:
            self._staged[epoch] = self._staged.get(epoch, 0) + records
        self.last_barrier = epoch

    def complete(self, epoch: int, marker: int) -> None:
        self.completed = max(self.completed, epoch)
        for e in [e for e in self._staged if e <= marker]:
            del self._staged[e]

    # -- the audit ------------------------------------------------------------------------

    def missing(self, opened_marker: int, published: int) -> int | None:
        """Records the committed checkpoints sent this instance that are not in its committed transactions
        (negative: too many), or None when nothing can be compared: the baseline is unknown, no barrier came,
        or the last barrier's checkpoint did not complete (a stop without its final checkpoint).
        `opened_marker`: the broker's marker when this instance's publisher opened; `published`: the records of
        the transactions it committed since."""
        if self.accepted is None or self.last_barrier is None and self.restored_epoch is None:
            return None
        if self.last_barrier is not None and self.last_barrier > self.completed:
            return None
        restored = self.restored_epoch if self.restored_epoch is not None else -1
        left_to_me = sum(n for e, n in self._restored_staged.items() if opened_marker < e <= restored)
        published_before = self._accepted_at_restore - left_to_me
        return self.accepted - (published_before + published)
