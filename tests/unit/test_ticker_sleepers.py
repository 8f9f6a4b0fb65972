"""The ticker lets a subscriber sleep until a deadline or a wake(): an idle SPU is not woken every tick."""

from __future__ import annotations

import threading

from esault.clock import ManualClock
from esault.datapath.ticker import Ticker
from esault.testing import wait_until


class Counter:
    def __init__(self) -> None:
        self.ticks = 0
        self.event = threading.Event()

    def tell(self, message) -> None:
        self.ticks += 1
        self.event.set()


def test_a_sleeper_gets_no_tick_until_its_deadline_then_ticks_again():
    clock = ManualClock(100.0)
    ticker = Ticker(clock, 0.005)
    sleeper, awake = Counter(), Counter()
    ticker.subscribe(sleeper)
    ticker.subscribe(awake)
    ticker.sleep_until(sleeper, 105.0)
    ticker.start()
    try:
        wait_until(lambda: awake.ticks >= 20, 10, message="the awake subscriber ticking")
        assert sleeper.ticks == 0 and ticker.awake == 1
        clock.advance(5.0)  # its deadline passes (a job clock that jumps: seen within DORMANT_CHECK)
        wait_until(lambda: sleeper.ticks >= 3, 10, message="the sleeper ticking after its deadline")
        assert ticker.awake == 2
    finally:
        ticker.stop()


def test_a_sleeper_without_deadline_waits_for_wake_and_nothing_else():
    clock = ManualClock(0.0)
    ticker = Ticker(clock, 0.005)
    sleeper = Counter()
    ticker.subscribe(sleeper)
    ticker.sleep_until(sleeper, None)
    ticker.start()
    try:
        clock.advance(1e9)
        assert not sleeper.event.wait(0.3)  # far past any deadline: still asleep
        ticker.wake(sleeper)
        assert sleeper.event.wait(5), "no tick after wake()"
    finally:
        ticker.stop()


def test_sleep_and_wake_of_a_mailbox_that_is_not_subscribed_change_nothing():
    ticker = Ticker(ManualClock(0.0), 0.005)
    stranger = Counter()
    ticker.sleep_until(stranger, 1.0)
    ticker.wake(stranger)
    assert ticker.awake == 0
    subscribed = Counter()
    ticker.subscribe(subscribed)
    ticker.sleep_until(subscribed, 1.0)
    ticker.unsubscribe(subscribed)
    ticker.wake(subscribed)  # unsubscribed while asleep: it does not come back
    assert ticker.awake == 0
