"""ReceiverHandoff.peers_lost: without exactly_once, a receiver stops waiting for SPUs lost with their worker;
and what a lost giver sends after the receiver is done is dropped as late (EarlyMessages)."""

from __future__ import annotations

from esault.migration.handoff import EarlyMessages, HeldBatch, ReceiverHandoff


def hash_of(key: int) -> int:
    return key


def receiving() -> ReceiverHandoff:
    """Keys 0-99 come from giver 1, 100-199 from giver 2; downstream SPUs 8 and 9 answer their markers."""
    r = ReceiverHandoff(5, [(0, 99, 1), (100, 199, 2)], downstream=[8, 9])
    r.buffer(HeldBatch("src", [10, 150], ["a", "b"], [1], [1]), 0.0)
    return r


def test_a_lost_giver_is_released_without_its_state_or_marker_and_only_its_keys_run():
    r = receiving()
    r.peers_lost({1})
    assert r.ready_givers() == [1]
    [held] = r.release(1, 1.0, hash_of, lambda: 7)
    assert held.keys == [10] and r.pending_givers == {2} and not r.done
    assert r.ready_givers() == []  # giver 2 still owes its state and its answers


def test_a_lost_downstream_spu_owes_no_answer_but_the_state_is_still_waited_for():
    r = receiving()
    r.marker_seen(2, 8)
    r.peers_lost({9})
    assert r.ready_givers() == []  # giver 2's state is not in yet
    r.state_done(2)
    assert r.ready_givers() == [2]
    r.marker_seen(1, 8)
    r.state_done(1)
    assert r.ready_givers() == [1, 2]


def test_lost_spus_that_take_no_part_change_nothing():
    r = receiving()
    r.peers_lost({42})
    r.state_done(1)
    r.marker_seen(1, 8)
    assert r.ready_givers() == [] and r.downstream == {8, 9}
    r.marker_seen(1, 9)
    assert r.ready_givers() == [1]


class Chunk:
    def __init__(self, reconfig_id: int) -> None:
        self.reconfig_id = reconfig_id


def test_messages_for_a_finished_reconfiguration_are_late_and_not_kept_while_early_ones_are():
    early = EarlyMessages()
    assert early.keep_handoff(Chunk(3)) and early.keep_seen(3, 1, 8)  # before their PrepareReceive: kept
    early.forget(3)  # this SPU's side of reconfiguration 3 is over (or it was called off)
    assert early.handoffs == {} and early.seen == {}
    assert not early.keep_handoff(Chunk(3)) and not early.keep_seen(3, 1, 8)  # a lost giver's, late
    assert early.handoffs == {} and early.seen == {}
    assert early.keep_handoff(Chunk(4))  # another reconfiguration's, early
    for rid in range(100, 100 + EarlyMessages.FINISHED_KEPT):
        early.forget(rid)
    assert early.keep_handoff(Chunk(3)), "only the newest finished ids are remembered"
