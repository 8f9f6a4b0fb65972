"""A join probe looks only at stored tuples whose event time can join: a scan index (arbitrary predicates) cuts
its probe to the window by bisection, so a chain worker still holding stale tuples does not test them."""

import math

from hypothesis import given, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from esault.joins.queries import JoinQuery, ScanIndex
from esault.joins.worker import ChainWorker, time_span, within

calls = {"n": 0}


def counted_sum_is_even(r: dict, s: dict) -> bool:
    """The predicate under test, counting its calls (the work a probe does)."""
    calls["n"] += 1
    return (r["k"] + s["k"]) % 2 == 0


class ScanIndexAgainstAList(RuleBasedStateMachine):
    """Random adds (mostly in time order, some late, some nan), removals (oldest or any) and range probes against
    a plain list: a probe returns every in-range match, and nothing the predicate rejects."""

    def __init__(self) -> None:
        super().__init__()
        self.index = ScanIndex(lambda stored, probe: (stored + probe) % 3 == 0, stored_is_left=True)
        self.model: list[tuple] = []
        self.seq = 0
        self.clock = 0.0
        self.nan_added = False

    @rule(step=st.sampled_from([0.0, 0.0, 0.5, 1.0, 3.0, -2.0]), value=st.integers(0, 8))
    def add(self, step: float, value: int) -> None:
        self.clock += step
        self.seq += 1
        tup = (self.seq, self.clock, value)
        self.index.add(tup)
        self.model.append(tup)

    @rule(value=st.integers(0, 8))
    def add_nan(self, value: int) -> None:
        self.seq += 1
        tup = (self.seq, math.nan, value)
        self.index.add(tup)
        self.model.append(tup)
        self.nan_added = True

    @precondition(lambda self: self.model)
    @rule()
    def remove_first_added(self) -> None:  # what expiry and forwarding do: the oldest goes first
        self.index.remove(self.model.pop(0))

    @precondition(lambda self: self.model)
    @rule(pick=st.integers(0, 10**6))
    def remove_any(self, pick: int) -> None:
        tup = self.model[pick % len(self.model)]
        self.index.remove(tup)
        self.model.remove(tup)

    @rule(value=st.integers(0, 8), centre=st.floats(-10, 40), width=st.floats(0, 20), unbounded=st.booleans())
    def probe(self, value: int, centre: float, width: float, unbounded: bool) -> None:
        lo, hi = (-math.inf, math.inf) if unbounded else (centre - width, centre + width)
        got = sorted(t[0] for t in self.index.probe(value, lo, hi))
        matching = [t for t in self.model if (t[2] + value) % 3 == 0]
        in_range = sorted(t[0] for t in matching if lo <= t[1] <= hi)
        if self.nan_added:  # no order to bisect: a full scan, still only matches
            assert set(in_range) <= set(got) <= {t[0] for t in matching}
        else:
            assert got == in_range

    @invariant()
    def same_size(self) -> None:
        assert len(self.index) == len(self.model)


TestScanIndexAgainstAList = ScanIndexAgainstAList.TestCase
TestScanIndexAgainstAList.settings = settings(max_examples=60, stateful_step_count=60, deadline=None)


@settings(max_examples=300, deadline=None)
@given(a=st.floats(-1e12, 1e12), b=st.floats(-1e12, 1e12), window=st.floats(0, 1e9))
def test_the_time_span_of_a_tuple_holds_every_time_within_the_window_of_it(a, b, window):
    lo, hi = time_span(a, window)
    if within(window, (0, a), (0, b)):
        assert lo <= b <= hi


def test_a_time_span_that_is_not_finite_is_the_whole_line():
    assert time_span(math.inf, 5) == (-math.inf, math.inf)
    assert time_span(-math.inf, 5) == (-math.inf, math.inf)
    assert time_span(1.0, math.inf) == (-math.inf, math.inf)


def test_a_chain_worker_holding_stale_tuples_tests_its_predicate_only_on_those_in_the_window():
    """A worker whose other side's clock lags (a chain worker far from that side's entry) still stores tuples
    no new arrival can join; probing them all made a lagging 2-SPU chain do 10x the comparisons of one SPU."""
    query = JoinQuery("q", f"{__name__}:counted_sum_is_even")
    worker = ChainWorker([query], window=10, zeta=20)
    for ts in range(1000):  # S tuples 0..999, no R newer than them yet: none expires
        worker.enter("S", (ts + 1, float(ts), {"k": ts}, None))
    calls["n"] = 0
    pairs = [e for e in worker.enter("R", (1, 500.0, {"k": 0}, None)) if type(e).__name__ == "Joined"]
    assert calls["n"] == 21  # ts 490..510, not 1000
    assert sorted(p.s[1] for p in pairs) == [float(t) for t in range(490, 511) if t % 2 == 0]
