"""RetireWait: a retiring non-keyed SPU is done exactly when every downstream SPU it still sends to answered."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from esault.migration.retirement import RetireWait


def test_done_only_once_every_downstream_spu_answered_this_reconfiguration():
    wait = RetireWait(7, {1, 2, 3})
    wait.seen(7, 1)
    wait.seen(6, 2)  # an answer to another reconfiguration's marker
    wait.seen(7, 9)  # from an SPU it never waited for
    assert not wait.done and wait.waiting == {2, 3}
    wait.seen(7, 2)
    wait.seen(7, 3)
    assert wait.done


def test_no_downstream_is_done_at_once():
    assert RetireWait(1, ()).done


def test_an_spu_that_left_the_routes_is_not_waited_for_and_one_that_joined_owes_nothing():
    wait = RetireWait(4, {1, 2})
    wait.seen(4, 1)
    wait.downstream_changed({1, 5})  # 2 was replaced by 5
    assert wait.done


events = st.lists(st.one_of(
    st.tuples(st.just("seen"), st.integers(0, 2), st.integers(0, 6)),
    st.tuples(st.just("routes"), st.frozensets(st.integers(0, 6))),
), max_size=30)


@given(st.frozensets(st.integers(0, 6)), events)
def test_done_exactly_when_each_spu_still_downstream_since_the_marker_answered(downstream, steps):
    wait = RetireWait(1, downstream)
    owed = set(downstream)
    for step in steps:
        if step[0] == "seen":
            _, rid, sender = step
            wait.seen(rid, sender)
            if rid == 1:
                owed.discard(sender)
        else:
            owed &= step[1]
            wait.downstream_changed(step[1])
        assert wait.done == (not owed)
        assert wait.waiting == owed
