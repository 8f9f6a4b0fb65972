"""HeadWatch: when the driver declares the Ray head lost, from its probes (pure: the clock is given)."""

from __future__ import annotations

import socket

import pytest
from hypothesis import given
from hypothesis import strategies as st

from esault.cluster.providers.ray_head import HeadWatch, probe_gcs


def test_the_head_is_lost_once_no_probe_answered_for_the_timeout_and_said_only_once():
    watch = HeadWatch(30.0, started=100.0)
    assert not watch.probed(110.0, True)
    assert not watch.probed(120.0, False) and not watch.probed(139.9, False)
    assert watch.probed(140.0, False)  # 30 s after the last answer
    assert watch.silent_for == pytest.approx(30.0)
    assert not watch.probed(142.0, False) and not watch.probed(150.0, True)  # said once, lost for good
    assert watch.lost_at == 140.0


def test_an_answer_before_the_timeout_starts_the_silence_again():
    watch = HeadWatch(10.0, started=0.0)
    assert not watch.probed(9.0, False)
    assert not watch.probed(9.5, True)
    assert not watch.probed(19.0, False)
    assert watch.probed(19.5, False)


@given(st.lists(st.tuples(st.floats(0.0, 5.0), st.booleans()), max_size=60), st.floats(0.5, 20.0))
def test_lost_exactly_when_some_probe_came_a_timeout_after_the_last_answer(probes, timeout):
    watch, now, last, expected, said = HeadWatch(timeout, started=0.0), 0.0, 0.0, None, 0
    for step, answered in probes:
        now += step
        said += watch.probed(now, answered)
        if expected is None:
            if answered:
                last = now
            elif now - last >= timeout:
                expected = now
    assert watch.lost_at == expected and said == (expected is not None)


def test_a_timeout_that_is_no_positive_number_of_seconds_is_refused():
    with pytest.raises(ValueError, match="head_timeout must be seconds > 0"):
        HeadWatch(0.0, started=0.0)


def test_the_probe_answers_where_something_listens_and_not_where_nothing_does():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        address = f"127.0.0.1:{server.getsockname()[1]}"
        assert probe_gcs(address)
    assert not probe_gcs(address)  # closed: refused
    assert not probe_gcs("not an address")
