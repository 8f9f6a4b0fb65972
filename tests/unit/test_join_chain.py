"""The S2J chain joins every pair in the window exactly once, whatever the interleaving and chain changes."""

from collections import Counter

import pytest
from hypothesis import given, settings, strategies as st

from esault.joins import ChainChangeError, JoinChain, JoinQuery
from esault.joins.queries import extractor

EQUI = JoinQuery("equi", "equi", extractor("k", "on"), extractor("k", "on"))
BAND = JoinQuery("band", "band", extractor("x", "on"), extractor("x", "on"), band=2)
ODD_SUM = JoinQuery("odd", lambda r, s: (r["k"] + s["x"]) % 3 == 0)


def oracle(queries, window, rs, ss):
    """Nested loop over everything that entered: (query, r seq, s seq) for pairs in the window."""
    return Counter((q.name, i + 1, j + 1) for q in queries for i, (rt, rv) in enumerate(rs)
                   for j, (st_, sv) in enumerate(ss) if abs(rt - st_) <= window and q.matches(rv, sv))


def produced(pairs):
    return Counter((p.query, p.r[0], p.s[0]) for p in pairs)


values = st.fixed_dictionaries({"k": st.integers(0, 3), "x": st.integers(0, 10)})
# one step: ("R"|"S", ts increment, value) enters, ("deliver", link choice), ("add"|"remove", position),
# ("drain",) or ("checkpoint",): snapshot and restore
steps = st.lists(st.one_of(
    st.tuples(st.sampled_from(["R", "S"]), st.integers(0, 3), values),
    st.tuples(st.just("deliver"), st.integers(0, 1000)),
    st.tuples(st.sampled_from(["add", "remove"]), st.integers(0, 5)),
    st.tuples(st.sampled_from(["drain", "checkpoint"])),
), min_size=20, max_size=200)


@settings(max_examples=80, deadline=None)
@given(steps=steps, zeta=st.sampled_from([1, 2, 3, 20]), workers=st.integers(1, 4), window=st.integers(0, 12),
       inflight=st.integers(1, 3))
def test_every_pair_in_the_window_joins_exactly_once_under_any_interleaving_and_chain_changes(
        steps, zeta, workers, window, inflight):
    queries = [EQUI, BAND, ODD_SUM]
    chain = JoinChain(queries, window, zeta=zeta, workers=workers, max_inflight=inflight)
    rs, ss, out, clock = [], [], [], {"R": 0, "S": 0}
    for step in steps:
        if step[0] in ("R", "S"):
            side, dt, value = step
            clock[side] += dt
            (rs if side == "R" else ss).append((clock[side], value))
            out += chain.ingest(side, clock[side], value)
        elif step[0] == "deliver":
            busy = chain.busy_links()
            if busy:
                out += chain.deliver(busy[step[1] % len(busy)])
        elif step[0] == "drain":
            out += chain.drain()
        elif step[0] == "checkpoint":  # what a PE does: quiet, snapshot, and a restore from it
            out += chain.run()
            chain = JoinChain.restore(queries, window, chain.snapshot(), zeta=zeta, max_inflight=inflight)
        elif not chain.changing:
            if step[0] == "add" and chain.size < 6:
                out += chain.add_worker(step[1] % (chain.size + 1))
            elif step[0] == "remove" and chain.size > 1:
                out += chain.remove_worker(step[1] % chain.size)
    out += chain.run()
    out += chain.drain()
    assert produced(out) == oracle(queries, window, rs, ss)
    assert not chain.changing and not chain.busy_links()


@settings(max_examples=40, deadline=None)
@given(n=st.integers(0, 300), window=st.integers(0, 30))
def test_expiry_keeps_the_stored_window_bounded_while_results_stay_exact(n, window):
    chain = JoinChain([EQUI], window, zeta=4, workers=3)
    rs, ss, out = [], [], []
    for i in range(n):
        side = "R" if i % 2 else "S"
        value = {"k": i % 5, "x": 0}
        (rs if side == "R" else ss).append((i, value))
        out += chain.ingest(side, i, value)
        out += chain.run()
    out += chain.drain()
    assert produced(out) == oracle([EQUI], window, rs, ss)
    r, s = chain.stored()
    assert r + s <= window + 4 * 2 * 3 * 2 + 4  # the window, plus blocks not yet pushed to where they expire


def test_several_queries_share_one_chain_and_each_gets_its_own_pairs():
    chain = JoinChain([EQUI, BAND], 10, zeta=1, workers=2)
    out = chain.ingest("R", 0, {"k": 1, "x": 5}) + chain.ingest("S", 1, {"k": 1, "x": 9})
    out += chain.ingest("S", 2, {"k": 2, "x": 6}) + chain.run() + chain.drain()
    assert sorted((p.query, p.s[0]) for p in out) == [("band", 2), ("equi", 1)]


def test_pairs_outside_the_window_do_not_join():
    chain = JoinChain([EQUI], 5, workers=1)
    out = chain.ingest("R", 0, {"k": 1}) + chain.ingest("S", 5, {"k": 1}) + chain.ingest("S", 6, {"k": 1})
    assert [(p.r[0], p.s[0]) for p in out + chain.drain()] == [(1, 1)]


def test_a_late_tuple_takes_its_streams_latest_time_and_is_counted():
    chain = JoinChain([EQUI], 1, workers=1)
    chain.ingest("R", 10, {"k": 1})
    chain.ingest("R", 3, {"k": 1})
    out = chain.ingest("S", 11, {"k": 1})
    assert chain.late == 1 and len(out) == 2


def test_tuple_blocks_cut_messages_roughly_by_zeta():
    def messages(zeta):
        chain = JoinChain([EQUI], 1000, zeta=zeta, workers=4)
        for i in range(400):
            chain.ingest("R" if i % 2 else "S", i, {"k": i % 7})
            chain.run()
        chain.drain()
        return chain.messages
    assert messages(20) * 5 < messages(1)


def test_blocks_spread_the_stored_window_over_the_workers():
    chain = JoinChain([EQUI], 10_000, zeta=5, workers=4)
    for i in range(800):
        chain.ingest("R" if i % 2 else "S", i, {"k": i % 7})
        chain.run()
    assert all(r + s > 50 for r, s in chain.loads())


def test_a_chain_snapshot_restores_to_the_same_results():
    def feed(chain, lo, hi):
        out = []
        for i in range(lo, hi):
            out += chain.ingest("R" if i % 3 else "S", i, {"k": i % 4}) + chain.run()
        return out
    whole = JoinChain([EQUI], 20, zeta=3, workers=3)
    expected = produced(feed(whole, 0, 200) + whole.drain())
    first = JoinChain([EQUI], 20, zeta=3, workers=3)
    out = feed(first, 0, 100)
    again = JoinChain.restore([EQUI], 20, first.snapshot(), zeta=3)
    assert produced(out + feed(again, 100, 200) + again.drain()) == expected


def test_chain_changes_say_what_is_wrong():
    chain = JoinChain([EQUI], 1, workers=1)
    with pytest.raises(ChainChangeError, match="only worker"):
        chain.remove_worker()
    with pytest.raises(ChainChangeError, match="outside the chain"):
        chain.add_worker(5)
    chain = JoinChain([EQUI], 1, zeta=1, workers=2)
    for ts in range(3):
        chain.ingest("R", ts, {"k": 1})
    assert chain.busy_links()  # a block in flight: the change waits for it
    chain.add_worker(1)
    assert chain.changing
    with pytest.raises(ChainChangeError, match="one at a time"):
        chain.add_worker(0)
