"""Failpoints: how tests crash the sink's writer at a named step."""

from __future__ import annotations

import re

import pytest

from esault.errors import ConfigError
from spark_sink.failpoints import FAILPOINT_ENV, STEPS, InjectedCrash, StepFailpoint, from_env


def test_unset_means_no_failpoint():
    assert from_env({}) is None
    assert from_env({FAILPOINT_ENV: "  "}) is None


def test_a_spec_names_step_action_and_which_hit():
    fp = from_env({FAILPOINT_ENV: "published:raise:2"})
    assert (fp.step, fp.action, fp.nth) == ("published", "raise", 2)
    fp("staged", "b0")  # other steps pass
    fp("published", "b0")  # first hit passes
    with pytest.raises(InjectedCrash, match="injected crash at step 'published' of batch b1"):
        fp("published", "b1")
    fp("published", "b2")  # fires once only
    assert from_env({FAILPOINT_ENV: "staged"}).action == "raise"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("renamed", "unknown step 'renamed'; steps are " + ", ".join(STEPS)),
        ("staged:explode", "action must be 'kill' or 'raise'"),
        ("staged:kill:x", "nth must be a whole number"),
        ("staged:kill:0", "nth must be >= 1"),
        ("a:b:c:d", "write '<step>[:kill|raise[:<nth>]]'"),
    ],
)
def test_a_bad_spec_is_refused(spec, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        from_env({FAILPOINT_ENV: spec})


def test_steps_are_in_protocol_order():
    assert STEPS == ("before-stage", "staged", "begun", "published", "committed")
    with pytest.raises(ConfigError):
        StepFailpoint("nope")
