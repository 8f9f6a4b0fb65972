"""HeartbeatMonitor: who has been silent too long, on a manual clock."""

from __future__ import annotations

import pytest

from esault.clock import ManualClock
from esault.errors import ConfigError
from esault.transport.heartbeat import HeartbeatMonitor


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(start=100.0)


def test_a_process_is_dead_only_after_more_than_interval_times_misses_of_silence(clock):
    monitor = HeartbeatMonitor(clock, interval=1.0, misses=3)
    monitor.beat("w1")
    clock.advance(3.0)
    assert monitor.dead() == []  # exactly interval * misses: still alive
    clock.advance(0.001)
    assert monitor.dead() == ["w1"]


def test_a_beat_restarts_the_count(clock):
    monitor = HeartbeatMonitor(clock, interval=0.5, misses=2)
    monitor.beat("w1")
    for _ in range(10):
        clock.advance(0.9)
        assert monitor.dead() == []
        monitor.beat("w1")
    clock.advance(1.01)
    assert monitor.dead() == ["w1"]
    monitor.beat("w1")  # a late beat revives it
    assert monitor.dead() == []


def test_dead_lists_only_the_silent_processes_sorted_and_keeps_reporting_them(clock):
    monitor = HeartbeatMonitor(clock, interval=1.0, misses=2)
    for name in ("w3", "w1", "w2"):
        monitor.beat(name)
    clock.advance(1.5)
    monitor.beat("w2")
    clock.advance(1.0)
    assert monitor.dead() == ["w1", "w3"]
    assert monitor.dead() == ["w1", "w3"]  # reporting does not forget
    assert monitor.silence("w1") == pytest.approx(2.5) and monitor.silence("w2") == pytest.approx(1.0)


def test_forget_stops_watching_and_ignores_unknown_names(clock):
    monitor = HeartbeatMonitor(clock, interval=1.0, misses=1)
    monitor.beat("w1")
    monitor.beat("w2")
    clock.advance(5.0)
    monitor.forget("w1")
    monitor.forget("never-seen")
    assert monitor.dead() == ["w2"]
    assert monitor.watched() == ["w2"]
    assert monitor.silence("w1") is None


def test_no_beats_no_deaths(clock):
    monitor = HeartbeatMonitor(clock, interval=1.0, misses=3)
    clock.advance(1000.0)
    assert monitor.dead() == [] and monitor.watched() == []
    assert monitor.timeout == 3.0


@pytest.mark.parametrize(("interval", "misses", "error"), [
    (0, 3, r"interval must be seconds > 0 \(the heartbeat period\), got 0"),
    (-1.0, 3, r"interval must be seconds > 0"),
    ("1", 3, r"interval must be seconds > 0 .*got '1'"),
    (True, 3, r"interval must be seconds > 0 .*got True"),
    (1.0, 0, r"misses must be an int >= 1 \(beats missed before a process is dead\), got 0"),
    (1.0, 2.5, r"misses must be an int >= 1 .*got 2.5"),
])
def test_bad_parameters_are_refused_with_what_to_pass(clock, interval, misses, error):
    with pytest.raises(ConfigError, match=error):
        HeartbeatMonitor(clock, interval=interval, misses=misses)
