"""OutputLedger, the Kafka sink's end-of-run count, and StageHoles, its publisher's rule never to publish past a
lost stage file: against a model of a sink instance's whole life (barriers, stage writes that fail, completions,
publishes that fail, crashes restored from the newest checkpoint, a lost stage directory), the ledger's
`missing` must be exactly the records the committed checkpoints sent the sink that no committed transaction
holds. Without the rule a lost file the marker passed hides after a crash, and the property fails."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from hypothesis import given, settings
from hypothesis import strategies as st

from esault.connectors.output_ledger import OutputLedger
from esault.connectors.stage_holes import StageHoles


@dataclass
class SinkLife:
    """The disk, the broker and the checkpoints around one sink instance at a time (the publisher's rules)."""

    staged: dict[int, int] = field(default_factory=dict)  # stage files: epoch -> records
    marker: int = 0  # the broker's published-epoch marker
    committed: int = 0  # records in committed transactions (the truth)
    checkpoints: dict[int, tuple[dict, int]] = field(default_factory=dict)  # completed: (sink state, accepted)
    epoch: int = 0
    accepted: int = 0  # the model's own count since the restored checkpoint
    carry: int = 0
    open_barrier: tuple[int, dict, bool] | None = None  # epoch, state taken, staged fine
    ledger: OutputLedger = field(default_factory=lambda: OutputLedger(None))
    opened_marker: int = 0
    published_by_instance: int = 0
    holes: StageHoles = field(default_factory=StageHoles)  # the publisher's rule (the code under test)

    def open(self, restored: int | None) -> None:
        if restored is None:
            self.marker, self.accepted, self.carry = 0, 0, 0
            self.staged.clear()
        else:
            state, self.accepted = self.checkpoints[restored]
            self.carry = 0
            self.staged = {e: n for e, n in self.staged.items() if self.marker < e <= restored}
        self.ledger = OutputLedger(restored)
        self.holes = StageHoles()
        self.opened_marker, self.published_by_instance = self.marker, 0
        if restored is not None:
            self.ledger.restore(self.checkpoints[restored][0])
            self.holes.restored(self.ledger.restored_staged, self.marker, restored)
            self.publish_through(restored, fail_at=None)
        self.open_barrier = None

    def barrier(self, records: int, staging_fails: bool) -> None:
        self.epoch += 1
        state = self.ledger.state(records, self.marker)
        self.ledger.barrier(self.epoch, records)
        self.accepted += records
        if staging_fails:
            self.carry += records
        elif self.carry + records:
            self.staged[self.epoch] = self.carry + records
            self.holes.wrote(self.epoch, self.carry + records)
            self.carry = 0
        self.open_barrier = (self.epoch, state, not staging_fails)

    def complete(self, fail_at: int | None) -> None:
        if self.open_barrier is None or not self.open_barrier[2]:
            return
        epoch, state, _ = self.open_barrier
        self.checkpoints[epoch] = (state, self.accepted)
        self.ledger.complete(epoch, self.marker)
        self.publish_through(epoch, fail_at)
        self.open_barrier = None

    def publish_through(self, epoch: int, fail_at: int | None) -> None:
        for e in sorted(self.staged):
            if e > epoch or e == fail_at:
                return
            if e > self.marker:
                if not self.holes.may_publish(e, self.staged[e], self.marker):
                    return
                self.committed += self.staged[e]
                self.published_by_instance += self.staged[e]
                self.marker = e
                self.holes.published(e)
            del self.staged[e]

    def crash(self) -> None:
        self.open(max(self.checkpoints) if self.checkpoints else None)


step = st.one_of(
    st.tuples(st.just("barrier"), st.integers(0, 5), st.booleans()),
    st.tuples(st.just("complete"), st.booleans()),
    st.tuples(st.just("crash")),
    st.tuples(st.just("lose_disk")),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(step, max_size=30), st.integers(0, 5), st.booleans())
def test_missing_is_what_the_committed_checkpoints_sent_and_no_committed_transaction_holds(steps, last, last_fails):
    life = SinkLife()
    lost = False
    for s in steps:
        if s[0] == "barrier":
            life.barrier(s[1], s[2])
        elif s[0] == "complete":
            life.complete(fail_at=life.open_barrier[0] if s[1] and life.open_barrier else None)
        elif s[0] == "crash":
            life.crash()
        else:
            lost = lost or bool(life.staged)
            life.staged.clear()
    life.barrier(last, staging_fails=False)  # the final checkpoint
    final = life.epoch
    life.complete(fail_at=final if last_fails else None)
    truth = life.accepted - life.committed
    got = life.ledger.missing(life.opened_marker, life.published_by_instance)
    assert got == truth, (got, truth, life)
    if not lost and not last_fails and life.open_barrier is None and not life.staged:
        assert truth == 0


def test_a_fresh_instance_that_published_everything_misses_nothing():
    ledger = OutputLedger(None)
    ledger.barrier(1, 3)
    ledger.complete(1, marker=0)
    assert ledger.missing(opened_marker=0, published=3) == 0
    assert ledger.missing(opened_marker=0, published=1) == 2


def test_a_restored_instance_owes_the_staged_epochs_after_the_broker_marker():
    first = OutputLedger(None)
    first.barrier(1, 4)
    first.complete(1, marker=0)
    state = first.state(buffered=2, marker=0)  # taken at barrier 2, before its on_checkpoint
    assert state == {"rows_accepted": 6, "staged": [[1, 4]], "staged_now": 2}
    # Checkpoint 2 completed; epoch 1 was published (marker 1) and epoch 2 was not before the crash.
    again = OutputLedger(2)
    again.restore(state)
    assert again.missing(opened_marker=1, published=2) == 0  # it published epoch 2's two records
    assert again.missing(opened_marker=1, published=0) == 2  # epoch 2's stage file was lost
    assert again.missing(opened_marker=0, published=6) == 0  # neither was published before the crash


def test_nothing_is_compared_when_the_baseline_or_the_last_completion_is_unknown():
    older = OutputLedger(3)
    older.restore({})  # a checkpoint of an esault that kept no counts
    older.barrier(4, 2)
    older.complete(4, marker=3)
    assert older.missing(opened_marker=3, published=0) is None
    unfinished = OutputLedger(None)
    unfinished.barrier(1, 2)  # a stop without its final checkpoint: epoch 1 never completed
    assert unfinished.missing(opened_marker=0, published=0) is None
    for bad in ({"rows_accepted": -1, "staged": [], "staged_now": 0},
                {"rows_accepted": 1, "staged": [["x", 1]], "staged_now": 0},
                {"rows_accepted": 1, "staged": "no", "staged_now": 0}):
        ledger = OutputLedger(1)
        ledger.restore(bad)
        assert ledger.accepted is None


def test_a_lost_stage_file_the_marker_would_pass_is_still_missing_after_a_crash():
    life = SinkLife()
    life.barrier(1, staging_fails=False)
    life.staged.clear()  # the stage directory loses epoch 1's file
    life.barrier(1, staging_fails=False)
    life.complete(fail_at=None)  # checkpoint 2 completes: epoch 2 would move the marker past epoch 1
    assert life.marker == 0 and life.holes.hole == (1, 1)
    life.crash()
    life.barrier(0, staging_fails=False)
    life.complete(fail_at=None)
    assert life.ledger.missing(life.opened_marker, life.published_by_instance) == life.accepted - life.committed == 2


def test_records_carried_by_a_failed_stage_write_are_found_in_the_next_file():
    holes = StageHoles()
    holes.restored({3: 2, 4: 1, 6: 5}, marker=2, restored_epoch=5)  # epoch 3's write failed: its 2 records in 4's
    assert holes.may_publish(4, records=3, marker=2)
    holes.published(4)
    assert holes.may_publish(5, records=0, marker=4)  # nothing owed in (4, 5]; epoch 6 is after the restored one
    holes.wrote(7, 4)
    holes.wrote(8, 1)
    assert not holes.may_publish(8, records=1, marker=4)  # epoch 7's file is gone: 8 would pass it
    assert holes.hole == (7, 4)
    assert not holes.may_publish(9, records=0, marker=4)  # and nothing after, ever


def test_epochs_nobody_said_anything_about_are_published():
    holes = StageHoles()
    holes.restored({}, marker=0, restored_epoch=3)  # a checkpoint of an esault that kept no counts
    assert holes.may_publish(2, records=7, marker=0)
    holes.wrote(4, 2)
    assert not holes.may_publish(4, records=1, marker=2)  # its own file lost a record: not published
