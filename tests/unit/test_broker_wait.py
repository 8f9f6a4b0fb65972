"""BrokerWait: when a sink's broker step counts as a wait, and what it says."""

from esault.connectors.broker_wait import BrokerWait
from esault.testing import ManualClock


def _wait() -> tuple[BrokerWait, ManualClock]:
    clock = ManualClock()
    return BrokerWait("b:9092", after=2.0, clock=clock.now), clock


def test_no_step_is_no_wait():
    wait, _ = _wait()
    assert wait.waiting_for() is None


def test_a_step_shorter_than_the_threshold_is_no_wait_and_a_longer_one_is():
    wait, clock = _wait()
    wait.begin("publishing epoch 5")
    clock.advance(1.9)
    assert wait.waiting_for() is None
    clock.advance(0.2)
    assert wait.waiting_for() == "broker b:9092 (publishing epoch 5)"


def test_a_retriable_failure_is_a_wait_at_once_and_the_end_clears_it():
    wait, _ = _wait()
    wait.begin("publishing epoch 5")
    wait.retrying()
    assert wait.waiting_for() == "broker b:9092 (publishing epoch 5)"
    wait.end()
    assert wait.waiting_for() is None


def test_the_next_step_starts_its_own_clock_and_forgets_the_retry():
    wait, clock = _wait()
    wait.begin("publishing epoch 5")
    wait.retrying()
    wait.end()
    wait.begin("publishing epoch 6")
    clock.advance(1.0)
    assert wait.waiting_for() is None
