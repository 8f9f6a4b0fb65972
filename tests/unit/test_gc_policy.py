"""GcFreezer: a worker freezes what survived every freeze_every seconds and thaws it every thaw_every."""

from __future__ import annotations

import gc

import pytest
from hypothesis import given
from hypothesis import strategies as st

from esault.job.gc_policy import GcFreezer


class Recorder:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def collect(self, generation: int) -> None:
        self.calls.append(f"collect{generation}")

    def freeze(self) -> None:
        self.calls.append("freeze")

    def unfreeze(self) -> None:
        self.calls.append("unfreeze")


def test_it_collects_the_young_generations_then_freezes_once_per_period() -> None:
    rec = Recorder()
    policy = GcFreezer(0.0, freeze_every=1.0, thaw_every=10.0, collector=rec)
    assert [policy.step(t) for t in (0.2, 0.9, 1.0, 1.5, 2.1)] == [None, None, "freeze", None, "freeze"]
    assert rec.calls == ["collect1", "freeze", "collect1", "freeze"]


@given(st.lists(st.floats(min_value=0.01, max_value=3.0), min_size=1, max_size=200))
def test_frozen_objects_are_thawed_within_one_thaw_period_whatever_the_step_timing(gaps: list[float]) -> None:
    rec = Recorder()
    policy = GcFreezer(0.0, freeze_every=1.0, thaw_every=10.0, collector=rec)
    now, last_thaw, last_freeze = 0.0, 0.0, 0.0
    for gap in gaps:
        now += gap
        did = policy.step(now)
        if did == "thaw":
            last_thaw = last_freeze = now
        elif did == "freeze":
            assert now - last_freeze >= 1.0
            last_freeze = now
        assert now - last_thaw < 10.0 + gap  # never longer frozen than one period and one step late
        assert now - last_freeze < 1.0 + gap


def test_with_the_real_collector_objects_are_frozen_and_thawed() -> None:
    gc.unfreeze()
    policy = GcFreezer(0.0, freeze_every=1.0, thaw_every=5.0)
    try:
        assert policy.step(1.0) == "freeze"
        assert gc.get_freeze_count() > 0
        assert policy.step(5.0) == "thaw"
        assert gc.get_freeze_count() == 0
    finally:
        gc.unfreeze()


def test_periods_that_cannot_work_are_refused() -> None:
    with pytest.raises(ValueError, match="freeze_every"):
        GcFreezer(0.0, freeze_every=5.0, thaw_every=5.0)


def test_a_release_asked_from_another_thread_thaws_and_collects_in_full_at_the_next_step() -> None:
    rec = Recorder()
    policy = GcFreezer(0.0, freeze_every=1.0, thaw_every=300.0, collector=rec)
    assert policy.step(1.0) == "freeze"
    policy.release_soon()
    policy.release_soon()  # SPUs stopping together: one release
    assert policy.step(1.2) == "release"
    assert rec.calls == ["collect1", "freeze", "unfreeze", "collect2"]
    assert policy.step(1.4) is None and policy.step(2.2) == "freeze"  # frozen again a period later
