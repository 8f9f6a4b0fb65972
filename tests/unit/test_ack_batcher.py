"""AckBatcher: a worker's acks go in one frame once its every SPU acked, never held past the linger."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from esault.checkpoint.ack_batcher import AckBatcher
from esault.messages.checkpoints import CheckpointAck, CheckpointAcks


class Sent:
    def __init__(self) -> None:
        self.frames: list[CheckpointAcks] = []

    def tell(self, message: CheckpointAcks) -> None:
        assert type(message) is CheckpointAcks
        self.frames.append(message)

    def acks(self) -> list[CheckpointAck]:
        return [a for f in self.frames for a in f.acks]


class ManualTimers:
    """schedule() for tests: timers fire only when the test says."""

    def __init__(self) -> None:
        self.pending: list[list] = []

    def __call__(self, delay: float, action):
        entry = [delay, action, False]
        self.pending.append(entry)

        class Handle:
            def cancel(self_inner) -> None:
                entry[2] = True
        return Handle()

    def live(self) -> list[list]:
        return [e for e in self.pending if not e[2]]

    def fire(self) -> None:
        for entry in self.live():
            entry[2] = True
            entry[1]()


def ack(epoch: int, spu: int, **kw) -> CheckpointAck:
    return CheckpointAck(epoch, spu, "count", 0, **kw)


def test_the_acks_go_in_one_frame_the_moment_the_last_spu_of_the_worker_acked():
    sent, timers = Sent(), ManualTimers()
    batcher = AckBatcher(sent, lambda: 3, schedule=timers)
    batcher.tell(ack(5, 1))
    batcher.tell(ack(5, 2))
    assert not sent.frames and len(timers.live()) == 1, "held, with one timer for the window"
    batcher.tell(ack(5, 3))
    assert [[a.spu_id for a in f.acks] for f in sent.frames] == [[1, 2, 3]]
    assert not timers.live(), "the window's timer is cancelled once it was sent"


def test_a_slow_spu_holds_the_others_only_until_the_linger_is_over_and_its_own_ack_follows_alone():
    sent, timers = Sent(), ManualTimers()
    batcher = AckBatcher(sent, lambda: 3, schedule=timers)
    batcher.tell(ack(5, 1))
    batcher.tell(ack(5, 2))
    timers.fire()
    assert [[a.spu_id for a in f.acks] for f in sent.frames] == [[1, 2]]
    batcher.tell(ack(5, 3))  # the epoch's last SPU here: sent at once, not held for another linger
    assert [[a.spu_id for a in f.acks] for f in sent.frames] == [[1, 2], [3]]
    assert not timers.live()


def test_an_ack_that_fails_the_checkpoint_goes_at_once_with_every_ack_held():
    for failing in (ack(5, 2, error="disk full"), ack(5, 2, fatal=True, error="lost"), ack(-1, 2, fatal=True)):
        sent, timers = Sent(), ManualTimers()
        batcher = AckBatcher(sent, lambda: 4, schedule=timers)
        batcher.tell(ack(5, 1))
        batcher.tell(failing)
        assert sent.acks() == [ack(5, 1), failing]
        assert not timers.live()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 4), st.integers(0, 5), st.booleans()), max_size=40),
       st.integers(1, 6))
def test_every_ack_is_sent_exactly_once_in_order_and_none_is_held_once_the_timer_fired(steps, spus):
    """Whatever the epochs, SPU counts and timer firings: nothing lost, nothing twice, order kept."""
    sent, timers = Sent(), ManualTimers()
    batcher = AckBatcher(sent, lambda: spus, schedule=timers)
    told = []
    for epoch, spu, fire in steps:
        a = ack(epoch, spu)
        told.append(a)
        batcher.tell(a)
        if fire:
            timers.fire()
    assert len(timers.live()) <= 1, "at most one timer runs"
    timers.fire()
    assert sent.acks() == told
    assert all(f.acks for f in sent.frames), "no empty frame"


def test_the_real_timer_sends_what_is_held_after_the_linger():
    import threading

    arrived = threading.Event()

    class Target:
        def tell(self, message) -> None:
            arrived.set()

    AckBatcher(Target(), lambda: 2, linger=0.05).tell(ack(1, 1))
    assert arrived.wait(5), "the held ack was never sent"
