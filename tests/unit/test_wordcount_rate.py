"""examples/wordcount.py takes its pace from $WORDCOUNT_RATE (the compose stack sets it)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import wordcount  # noqa: E402


def spout_rate(**kwargs) -> float | None:
    return wordcount.build_topology(sink=None, **kwargs).unit("sentences").params["rate"]


def test_without_the_variable_the_word_count_runs_at_full_speed(monkeypatch):
    monkeypatch.delenv(wordcount.RATE_ENV, raising=False)
    assert spout_rate() is None


def test_the_variable_paces_the_sentence_spout(monkeypatch):
    monkeypatch.setenv(wordcount.RATE_ENV, "500")
    assert spout_rate() == 500.0


def test_an_explicit_rate_wins_over_the_variable(monkeypatch):
    monkeypatch.setenv(wordcount.RATE_ENV, "500")
    assert spout_rate(rate=20.0) == 20.0


@pytest.mark.parametrize("value", ["fast", "0", "-3", "nan"])
def test_a_rate_that_is_not_a_positive_number_is_refused_naming_the_variable_and_the_fix(monkeypatch, value):
    monkeypatch.setenv(wordcount.RATE_ENV, value)
    with pytest.raises(ValueError, match=rf"WORDCOUNT_RATE='{value}' is not a positive number.*e\.g\. 500"):
        wordcount.build_topology(sink=None)
