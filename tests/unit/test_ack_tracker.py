"""AckTracker: XOR tuple trees complete exactly when every edge is acked, in any order."""

from __future__ import annotations

import random
from dataclasses import FrozenInstanceError
from functools import reduce
from operator import xor

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from esault.clock import ManualClock
from esault.errors import ConfigError
from esault.reliability import AckTracker, TreeOutcome


# ------------------------------------------------------------ tree builder
def tree_messages(rng: random.Random, parents: list[list[int]]) -> tuple[int, list[tuple[str, int]]]:
    """The ack messages of one tuple tree, as spout and bolts would send them.

    Node 0 is the spout's root tuple; node i > 0 is anchored to parents[i-1]
    (node indices < i, so the graph is a DAG). Each anchoring is one edge with
    a random 64-bit id. The start message carries the XOR of the root's out
    edges; node i's ack carries XOR(in edges) ^ XOR(out edges). Returns the
    start xor and the per-node update messages.
    """
    n = len(parents) + 1
    in_edges: list[list[int]] = [[] for _ in range(n)]
    out_edges: list[list[int]] = [[] for _ in range(n)]
    for child, anchors in enumerate(parents, start=1):
        for parent in anchors:
            edge = rng.getrandbits(64)
            in_edges[child].append(edge)
            out_edges[parent].append(edge)
    start = reduce(xor, out_edges[0], 0)
    updates = [("update", reduce(xor, in_edges[i] + out_edges[i], 0)) for i in range(1, n)]
    return start, updates


@st.composite
def dags(draw: st.DrawFn) -> list[list[int]]:
    """parents[i-1] = the distinct anchors (earlier nodes) of node i; 1..12 nodes."""
    size = draw(st.integers(1, 12))
    parents = []
    for i in range(1, size + 1):
        anchors = draw(st.lists(st.integers(0, i - 1), min_size=1, max_size=3, unique=True))
        parents.append(anchors)
    return parents


@settings(max_examples=150, deadline=None)
@given(parents=dags(), seed=st.integers(0, 2**32), order=st.randoms(use_true_random=False), data=st.data())
def test_a_tree_completes_exactly_when_its_last_edge_is_acked(parents, seed, order, data) -> None:
    rng = random.Random(seed)
    root = rng.getrandbits(64)
    start_xor, updates = tree_messages(rng, parents)
    messages = [("start", start_xor)] + updates
    order.shuffle(messages)  # updates may arrive before the start
    clock = ManualClock()
    tracker = AckTracker(clock, timeout=30.0)
    started = False
    for i, (kind, value) in enumerate(messages):
        clock.advance(data.draw(st.sampled_from([0.0, 0.5, 1.0]), label="gap"))
        if kind == "start":
            outcome = tracker.start(root, "spout-0", value)
            started = True
        else:
            outcome = tracker.update(root, value)
        last = i == len(messages) - 1
        if last:
            assert outcome is not None, "every edge was acked but the tree did not complete"
            assert outcome.ok and outcome.root == root and outcome.owner == "spout-0"
            assert outcome.reason is None
        else:
            assert outcome is None, f"completed early after {i + 1} of {len(messages)} messages"
            assert tracker.pending == (1 if started else 0)
        assert tracker.expire() == []
    assert tracker.pending == 0 and len(tracker) == 0
    assert tracker.completed == 1


@settings(max_examples=50, deadline=None)
@given(parents=dags(), seed=st.integers(0, 2**32), drop=st.data())
def test_a_tree_with_a_missing_ack_never_completes_and_times_out(parents, seed, drop) -> None:
    rng = random.Random(seed)
    start_xor, updates = tree_messages(rng, parents)
    missing = drop.draw(st.integers(0, len(updates) - 1), label="missing ack")
    clock = ManualClock()
    tracker = AckTracker(clock, timeout=10.0)
    assert tracker.start(7, "s", start_xor) is None
    for i, (_, value) in enumerate(updates):
        if i != missing:
            assert tracker.update(7, value) is None
    clock.advance(9.999)
    assert tracker.expire() == []
    clock.advance(0.001)
    [outcome] = tracker.expire()
    assert not outcome.ok and outcome.owner == "s"
    assert tracker.timed_out == 1 and tracker.pending == 0


@settings(max_examples=40, deadline=None)
@given(trees=st.lists(dags(), min_size=2, max_size=6), seed=st.integers(0, 2**32), order=st.randoms(use_true_random=False))
def test_interleaved_trees_complete_independently(trees, seed, order) -> None:
    rng = random.Random(seed)
    messages = []
    roots = []
    for t, parents in enumerate(trees):
        root = rng.getrandbits(64)
        roots.append(root)
        start_xor, updates = tree_messages(rng, parents)
        messages.append((root, "start", start_xor, t))
        messages.extend((root, "update", v, t) for _, v in updates)
    order.shuffle(messages)
    remaining = {root: sum(1 for m in messages if m[0] == root) for root in roots}
    tracker = AckTracker(ManualClock(), timeout=30.0)
    done = []
    for root, kind, value, t in messages:
        remaining[root] -= 1
        outcome = tracker.start(root, t, value) if kind == "start" else tracker.update(root, value)
        if outcome is not None:
            assert outcome.ok and outcome.owner == t
            assert remaining[root] == 0, "a tree completed before all of its acks arrived"
            done.append(root)
    assert sorted(done) == sorted(roots)
    assert tracker.pending == 0


# ------------------------------------------------------------- ordering
def test_start_with_xor_zero_completes_at_once() -> None:
    tracker = AckTracker(ManualClock(), timeout=5.0)
    assert tracker.start(1, "s", 0) == TreeOutcome(1, "s", True, None, 0.0)
    assert tracker.pending == 0 and len(tracker) == 0


def test_acks_before_start_complete_the_tree_when_the_start_arrives() -> None:
    tracker = AckTracker(ManualClock(), timeout=5.0)
    assert tracker.update(1, 0xA ^ 0xB) is None  # child a acked, emitting b
    assert tracker.update(1, 0xB) is None
    assert tracker.pending == 0  # not started: nothing pending yet
    outcome = tracker.start(1, "s", 0xA)
    assert outcome is not None and outcome.ok and outcome.latency == 0.0


def test_latency_is_measured_from_the_start() -> None:
    clock = ManualClock(100.0)
    tracker = AckTracker(clock, timeout=5.0)
    tracker.update(1, 0xB)  # an ack before the start does not start the clock
    clock.advance(1.0)
    tracker.start(1, "s", 0xA ^ 0xB)
    clock.advance(2.5)
    outcome = tracker.update(1, 0xA)
    assert outcome is not None and outcome.latency == pytest.approx(2.5)


def test_update_many_returns_only_the_completed_trees() -> None:
    tracker = AckTracker(ManualClock(), timeout=5.0)
    tracker.start(1, "s", 0x1)
    tracker.start(2, "s", 0x2 ^ 0x3)
    outcomes = tracker.update_many([(1, 0x1), (2, 0x2), (3, 0x9)])
    assert [o.root for o in outcomes] == [1]
    assert tracker.update_many([(2, 0x3)])[0].root == 2
    assert tracker.pending == 0


# ------------------------------------------------------------- timeouts
def test_a_started_tree_times_out_exactly_at_its_deadline() -> None:
    clock = ManualClock()
    tracker = AckTracker(clock, timeout=30.0)
    tracker.start(1, "spout", 0x5)
    clock.advance(10.0)
    tracker.start(2, "spout", 0x6)
    clock.advance(19.9)
    assert tracker.expire() == []
    clock.advance(0.1)
    [outcome] = tracker.expire()
    assert outcome.root == 1 and outcome.owner == "spout" and not outcome.ok
    assert outcome.reason == "timed out after 30.0s (message_timeout)"
    assert outcome.latency == pytest.approx(30.0)
    assert tracker.pending == 1
    clock.advance(10.0)
    assert [o.root for o in tracker.expire()] == [2]
    assert tracker.timed_out == 2 and tracker.pending == 0 and len(tracker) == 0


def test_a_completed_tree_does_not_time_out() -> None:
    clock = ManualClock()
    tracker = AckTracker(clock, timeout=1.0)
    tracker.start(1, "s", 0x5)
    tracker.update(1, 0x5)
    clock.advance(5.0)
    assert tracker.expire() == []
    assert tracker.timed_out == 0


def test_expire_pops_only_the_due_deadlines() -> None:
    clock = ManualClock()
    tracker = AckTracker(clock, timeout=1000.0)
    for root in range(1, 101):  # root r starts at t = r - 1
        tracker.start(root, "s", root)
        clock.advance(1.0)
    tracker.update(2, 2)  # completed: its deadline is stale and skipped
    clock.advance(900.5)  # now 1000.5: only root 1 is due
    assert [o.root for o in tracker.expire()] == [1]
    assert len(tracker._deadlines) == 99  # nothing past the first due entry was touched
    clock.advance(10.0)  # now 1010.5: roots started at t <= 10.5 are due
    assert [o.root for o in tracker.expire()] == list(range(3, 12))
    assert len(tracker._deadlines) == 89 and tracker.pending == 89


def test_updates_whose_start_never_arrives_are_discarded_as_orphans() -> None:
    clock = ManualClock()
    tracker = AckTracker(clock, timeout=5.0)
    tracker.update(1, 0x1)
    tracker.update(1, 0x2)
    tracker.fail(2, "boom")  # a fail before any start: also an orphan if no start comes
    clock.advance(5.0)
    assert tracker.expire() == []  # nobody to tell
    assert tracker.orphans_expired == 2 and len(tracker) == 0


def test_a_start_just_before_the_orphan_deadline_gets_a_full_timeout() -> None:
    clock = ManualClock()
    tracker = AckTracker(clock, timeout=5.0)
    tracker.update(1, 0x1)
    clock.advance(4.0)
    tracker.start(1, "s", 0x1 ^ 0x2)
    clock.advance(1.0)  # the un-started entry's deadline passes: it was replaced, not expired
    assert tracker.expire() == [] and tracker.pending == 1 and tracker.orphans_expired == 0
    assert tracker.update(1, 0x2).ok  # type: ignore[union-attr]


# -------------------------------------------------------------- failures
def test_a_failure_is_reported_once_and_later_acks_are_ignored() -> None:
    clock = ManualClock()
    tracker = AckTracker(clock, timeout=5.0)
    tracker.start(1, "s", 0x1 ^ 0x2)
    clock.advance(1.0)
    outcome = tracker.fail(1, "ValueError in bolt 'count'")
    assert outcome == TreeOutcome(1, "s", False, "ValueError in bolt 'count'", 1.0)
    assert tracker.pending == 0 and tracker.failed == 1
    assert tracker.fail(1, "again") is None
    assert tracker.update(1, 0x1) is None
    assert tracker.update(1, 0x2) is None  # would have completed the tree
    assert tracker.ignored == 3
    clock.advance(10.0)
    assert tracker.expire() == []  # no timeout report after the failure
    assert len(tracker) == 0 and tracker.timed_out == 0


def test_a_fail_before_the_start_is_reported_when_the_start_arrives() -> None:
    tracker = AckTracker(ManualClock(), timeout=5.0)
    tracker.update(1, 0x2)
    assert tracker.fail(1, "boom") is None  # owner unknown yet
    outcome = tracker.start(1, "spout-3", 0x1)
    assert outcome == TreeOutcome(1, "spout-3", False, "boom", 0.0)
    assert tracker.update(1, 0x1 ^ 0x2) is None
    assert tracker.pending == 0 and tracker.failed == 1


def test_a_second_start_for_a_root_is_ignored() -> None:
    tracker = AckTracker(ManualClock(), timeout=5.0)
    tracker.start(1, "s", 0x1)
    assert tracker.start(1, "s", 0x7) is None
    assert tracker.ignored == 1 and tracker.pending == 1
    assert tracker.update(1, 0x1).ok  # type: ignore[union-attr]


def test_timeout_must_be_positive() -> None:
    for bad in (0, -1, "30", True):
        with pytest.raises(ConfigError, match=r"AckTracker timeout must be seconds > 0 \(message_timeout\)"):
            AckTracker(ManualClock(), timeout=bad)  # type: ignore[arg-type]


def test_tree_outcome_is_frozen_and_slotted() -> None:
    outcome = TreeOutcome(1, "s", True, None, 0.5)
    with pytest.raises(FrozenInstanceError):
        outcome.ok = False  # type: ignore[misc]
    assert not hasattr(outcome, "__dict__")


def test_completed_trees_do_not_pile_up_in_the_deadline_queue() -> None:
    from esault.clock import ManualClock
    from esault.reliability.ack_tracker import AckTracker

    clock = ManualClock()
    tracker = AckTracker(clock, timeout=120.0)
    for root in range(1, 50_001):
        tracker.start(root, "spout", 7)
        tracker.update(root, 7)  # completes at once
        if root % 1000 == 0:
            clock.advance(0.01)
            tracker.expire()
    assert tracker.pending == 0
    assert len(tracker._deadlines) < 10_000, "the queue holds only what might still expire"


def test_fail_all_fails_every_started_tree_once_and_nothing_else():
    clock = ManualClock(start=0.0)
    tracker = AckTracker(clock, timeout=300.0)
    assert tracker.start(1, "s", 0b101) is None
    assert tracker.start(2, "s", 0b011) is None
    done = tracker.update(2, 0b011)  # completed before the failure
    assert done is not None and done.ok
    tracker.fail(3, "early")  # failed before start: reported when it starts, not by fail_all
    outcomes = tracker.fail_all("worker died")
    assert [(o.root, o.ok, o.reason) for o in outcomes] == [(1, False, "worker died")]
    assert tracker.pending == 0
    assert tracker.fail_all("again") == [] and tracker.update(1, 0b101) is None  # late acks are ignored
