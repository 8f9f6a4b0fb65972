"""AckedOffsets as the hand-off point of a live at_least_once rescale: the offset handed over for a partition is
at or below every record of it not acked (nothing skipped), and every record below it was acked (what is read
again is only what may not have been processed), whatever order batches are acked, failed or dropped in."""

from __future__ import annotations

from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from esault.connectors.partitions import AckedOffsets

TPS = [("t", 0), ("t", 1), ("u", 0)]


class HandOffMachine(RuleBasedStateMachine):
    """Random emits (each batch a run of records of some partitions, with gaps as transaction markers leave),
    acks, fails, drops and releases, against a naive model: the set of records emitted and not yet acked."""

    def __init__(self) -> None:
        super().__init__()
        self.acked = AckedOffsets()
        self.next = {tp: 0 for tp in TPS}  # the next offset to read, per partition
        self.batches: dict[int, dict[tuple, list[int]]] = {}  # batch -> tp -> its record offsets
        self.open: set[int] = set()  # batches not settled
        self.failed: set[int] = set()
        self.unacked: dict[tuple, set[int]] = {tp: set() for tp in TPS}
        self.seq = 0
        self.start_at = {tp: 0 for tp in TPS}
        for tp in TPS:
            self.acked.start(tp, 0)

    @rule(parts=st.dictionaries(st.sampled_from(TPS), st.tuples(st.integers(0, 2), st.integers(1, 4)),
                                min_size=1, max_size=3))
    def emit(self, parts):
        self.seq += 1
        nexts, records = {}, {}
        for tp, (gap, count) in parts.items():
            first = self.next[tp] + gap  # a gap: offsets that hold no record (nothing to read there)
            records[tp] = list(range(first, first + count))
            self.next[tp] = nexts[tp] = first + count
            self.unacked[tp].update(records[tp])
        self.batches[self.seq] = records
        self.open.add(self.seq)
        self.acked.emitted(self.seq, nexts)

    @precondition(lambda self: self.open)
    @rule(data=st.data(), how=st.sampled_from(["ack", "drop", "fail"]))
    def decide(self, data, how):
        batch = data.draw(st.sampled_from(sorted(self.open)))
        if how == "fail":
            self.failed.add(batch)
            self.acked.failed(batch)
            return
        self.open.discard(batch)
        self.failed.discard(batch)
        for tp, offsets in self.batches[batch].items():
            self.unacked[tp].difference_update(offsets)
        self.acked.settled(batch)

    @rule(tp=st.sampled_from(TPS))
    def release_and_take_back(self, tp):
        """The partition moves away at its watermark and (for the model's sake) starts again from it: the
        taker reads every record at or past it again."""
        handed = self.acked.release([tp])[tp]
        self.check_handed(tp, handed)
        for records in self.batches.values():
            records.pop(tp, None)  # read again by the taker: no longer this batch's
        self.unacked[tp] = set()
        self.next[tp] = self.start_at[tp] = handed
        self.acked.start(tp, handed)

    def check_handed(self, tp, handed):
        assert handed is not None
        assert all(handed <= offset for offset in self.unacked[tp]), (tp, handed, sorted(self.unacked[tp]))
        assert handed <= self.next[tp]

    @invariant()
    def nothing_skipped_and_only_the_unacked_read_again(self):
        self.acked.check_invariants()
        for tp in TPS:
            mark = self.acked.watermark(tp)
            self.check_handed(tp, mark)  # no unacked record below it: every record below it was acked
            waiting = any(tp in self.batches[b] for b in self.open)
            if not waiting:  # everything emitted was acked: nothing needlessly read again
                assert mark == max([self.start_at[tp], *self._ends(tp)]), (tp, mark)
            elif not self.acked.in_flight(tp):  # only failed batches wait: the mark is the first one's start
                assert mark <= min(self.unacked[tp])

    def _ends(self, tp):
        return [max(b[tp]) + 1 for b in self.batches.values() if b.get(tp)]


HandOffMachine.TestCase.settings = settings(max_examples=300, stateful_step_count=40, deadline=None)
test_a_handed_over_offset_skips_nothing_and_is_below_only_acked_records = HandOffMachine.TestCase


def test_a_partition_with_batches_only_failed_has_nothing_in_flight_and_stays_at_the_failed_batch():
    acked = AckedOffsets()
    acked.start(("t", 0), 10)
    acked.emitted(1, {("t", 0): 15, ("t", 1): 3})
    acked.emitted(2, {("t", 0): 20})
    acked.settled(2)
    assert acked.in_flight(("t", 0))
    acked.failed(1)
    assert not acked.in_flight(("t", 0)) and acked.watermark(("t", 0)) == 10
    assert acked.release([("t", 0)]) == {("t", 0): 10}
    acked.settled(1)  # its replay was acked after the hand-off: ("t", 1) moves, the released one is gone
    assert acked.watermark(("t", 0)) is None and acked.take() == {("t", 1): 3}
    acked.check_invariants()


def test_release_forgets_what_was_not_committed_yet_so_the_giver_never_commits_a_moved_partition():
    acked = AckedOffsets()
    acked.start(("t", 0), 0)
    acked.emitted(1, {("t", 0): 5, ("t", 1): 4})
    acked.settled(1)
    assert acked.release([("t", 0)]) == {("t", 0): 5}
    assert acked.take() == {("t", 1): 4}
