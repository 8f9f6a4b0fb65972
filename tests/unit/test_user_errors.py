"""UserErrorLog: user exceptions reach the log with their traceback and file:line, a flood only as counts."""

from __future__ import annotations

import logging

import pytest

from esault.user_errors import UserErrorLog, user_frame


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def user_code(i: int) -> None:
    raise ValueError(f"bad input {i}")


def raised(i: int) -> ValueError:
    try:
        user_code(i)
    except ValueError as exc:
        return exc
    raise AssertionError("user_code did not raise")


@pytest.fixture
def log(caplog):
    caplog.set_level(logging.ERROR, logger="esault")
    return caplog


def test_user_frame_names_the_file_and_line_of_the_user_code():
    at = user_frame(raised(1))
    assert at.startswith(f" at {__file__}:") and int(at.rsplit(":", 1)[1]) == user_code.__code__.co_firstlineno + 1


def test_the_first_errors_carry_their_traceback_then_one_count_line_per_period(log):
    records = log.records
    clock = Clock()
    errors = UserErrorLog(first=3, every=10.0, now=clock)
    for i in range(3):
        errors("bolt %r process() raised %s", "count", raised(i), exc=raised(i))
    assert [r.exc_info[1].args[0] for r in records] == ["bad input 0", "bad input 1", "bad input 2"]
    assert "later ones are counted, one line every 10 s" in records[-1].getMessage()
    for i in range(3, 50):  # a flood within one period: nothing more is logged
        clock.t += 0.1
        errors("bolt %r process() raised %s", "count", raised(i), exc=raised(i))
    assert len(records) == 3
    clock.t += 10.0
    errors("bolt %r process() raised %s", "count", raised(50), exc=raised(50))
    assert len(records) == 4 and records[-1].exc_info is None
    assert records[-1].getMessage().endswith("[51 so far, 48 since the last report]")
    errors("bolt %r process() raised %s", "count", raised(51), exc=raised(51))
    errors.close("bolt 'count' process()")
    assert records[-1].getMessage() == "bolt 'count' process(): 52 error(s) in total, 1 not logged since the last report"


def test_close_says_nothing_when_every_error_was_logged(log):
    errors = UserErrorLog(first=5, now=Clock())
    errors("x %s", 1, exc=raised(1))
    errors.close("bolt 'b'")
    assert len(log.records) == 1
