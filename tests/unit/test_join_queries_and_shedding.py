"""Join indexes find exactly what a scan finds; the shedding policy grows, shrinks and sheds as S2J says."""

import pytest
from hypothesis import given, settings, strategies as st

from esault import TopologyBuilder
from esault.errors import TopologyError
from esault.joins import JoinQuery, ShedPolicy
from esault.joins.queries import extractor

QUERIES = [JoinQuery("e", "equi", extractor("a", "on"), extractor("b", "on")),
           JoinQuery("b", "band", extractor("a", "on"), extractor("b", "on"), band=3),
           JoinQuery("p", lambda r, s: r["a"] < s["b"])]
rows = st.lists(st.fixed_dictionaries({"a": st.integers(-10, 10), "b": st.integers(-10, 10)}), max_size=30)


@settings(max_examples=30, deadline=None)
@given(stored=rows, probes=rows, removed=st.sets(st.integers(0, 29)))
def test_every_index_finds_exactly_the_stored_tuples_the_predicate_accepts(stored, probes, removed):
    for query in QUERIES:
        for side in ("R", "S"):
            index = query.index(side)
            tuples = [(i, 0, v) for i, v in enumerate(stored)]
            for t in tuples:
                index.add(t)
            for i in removed & set(range(len(tuples))):
                index.remove(tuples[i])
            live = [t for t in tuples if t[0] not in removed]
            assert len(index) == len(live)
            for p in probes:
                want = sorted(t[0] for t in live if (query.matches(t[2], p) if side == "R" else query.matches(p, t[2])))
                assert sorted(t[0] for t in index.probe(p)) == want


def test_bad_queries_say_what_to_pass():
    with pytest.raises(TopologyError, match="band >= 0"):
        JoinQuery("q", "band", band=-1)
    with pytest.raises(TopologyError, match="'equi', 'band', a predicate"):
        JoinQuery("q", "theta")
    with pytest.raises(TopologyError, match="cannot import predicate"):
        JoinQuery("q", "no_such_module:f")
    with pytest.raises(TopologyError, match="has no field 'k'"):
        extractor("k", "on")({"j": 1})


NOT_CALLABLE = 7
"""What "module:NAME" must never resolve to: a predicate that is not a function."""

BAD_JOINS = [
    ({"window": float("nan")}, r"window must be a finite number > 0 .*got nan"),
    ({"window": float("inf")}, r"window must be a finite number > 0 .*got inf"),
    ({"window": 0}, r"window must be a finite number > 0 .*got 0"),
    ({"window": -1.5}, r"window must be a finite number > 0 .*got -1.5"),
    ({"window": "60"}, r"window must be a finite number > 0 .*got '60'"),
    ({"window": True}, r"window must be a finite number > 0 .*got True"),
    ({"zeta": 2.5}, r"zeta must be a whole number >= 1, got 2.5"),
    ({"zeta": 0}, r"zeta must be a whole number >= 1, got 0"),
    ({"workers": float("nan")}, r"workers must be a whole number >= 1, got nan"),
    ({"flush_interval": float("nan")}, r"flush_interval must be a finite number of seconds > 0, or None, got nan"),
    ({"flush_interval": 0}, r"flush_interval must be a finite number of seconds > 0"),
    ({"shed": {"tau1": float("inf")}}, r"shed\['tau1'\] must be a finite number >= 0, got inf"),
    ({"shed": {"period": float("nan")}}, r"shed\['period'\] must be a finite number >= 0, got nan"),
    ({"kind": "band", "band": float("nan")}, r"a band join needs a finite band >= 0 .*got nan"),
    ({"kind": "band", "band": float("inf")}, r"a band join needs a finite band >= 0 .*got inf"),
    ({"kind": f"{__name__}:NOT_CALLABLE"}, r"predicate '.*:NOT_CALLABLE' is int 7, not a function \(r, s\) -> bool"),
    ({"kind": f"{__name__}:BAD_JOINS"}, r"predicate '.*:BAD_JOINS' is list .*, not a function"),
    ({"kind": "__main__:no_such_function"}, r"cannot import predicate '__main__:no_such_function' .*a function of the "
                                            r"driver's __main__ is not there in a worker process"),
]


@pytest.mark.parametrize("mode", ["keyed", "chain"])
@pytest.mark.parametrize("declared, says", BAD_JOINS, ids=[str(d) for d, _ in BAD_JOINS])
def test_a_join_declaration_with_a_bad_number_or_predicate_is_refused_naming_it_in_both_modes(mode, declared, says):
    b = TopologyBuilder("t")
    with pytest.raises(TopologyError, match=rf"join 'j': {says}"):
        b.join("j", "a", "b", mode=mode, **declared)


def test_a_predicate_may_be_named_by_module_and_function():
    assert JoinQuery("q", "operator:lt").matches(1, 2) is True


def test_the_chain_grows_only_after_tau_stays_above_tau2_and_shrinks_below_tau0():
    policy = ShedPolicy(tau0=0.2, tau1=0.95, tau2=0.8, sustain=3, max_workers=3)
    assert [policy.observe(0.9, 1) for _ in range(3)] == [None, None, "add"]
    assert [policy.observe(t, 2) for t in (0.9, 0.5, 0.9, 0.9)] == [None, None, None, None]  # reset by a dip
    assert [policy.observe(0.1, 2) for _ in range(3)] == [None, None, "remove"]
    assert [policy.observe(0.1, 1) for _ in range(5)] == [None] * 5  # min_workers
    assert [policy.observe(0.9, 3) for _ in range(5)] == [None] * 5  # max_workers


def test_shedding_is_graded_above_tau1_and_every_shed_tuple_is_counted():
    policy = ShedPolicy(tau0=0.1, tau1=0.5, tau2=0.9, max_shed=1.0)
    policy.observe(0.5, 1)
    assert sum(policy.admit() for _ in range(100)) == 100 and policy.shed == 0
    policy.observe(1.0, 1)  # twice tau1: shed half, so the admitted load is tau1 again
    assert sum(policy.admit() for _ in range(100)) == 50
    policy.observe(4.0, 1)  # 1 - 0.5/4 = 87.5%
    assert sum(policy.admit() for _ in range(800)) == 100
    capped = ShedPolicy(tau0=0.1, tau1=0.5, tau2=0.9, max_shed=0.6)
    capped.observe(4.0, 1)
    assert capped.shed_fraction == 0.6
    assert (policy.admitted, policy.shed) == (250, 750)


def test_inconsistent_thresholds_are_refused():
    with pytest.raises(ValueError, match="tau0 < tau2"):
        ShedPolicy(tau0=0.9, tau2=0.5)


def join_snapshot(t: float, busy: list[float]):
    from esault.control.snapshot import MetricsSnapshot, SpuMetrics, UnitMetrics
    spus = {i: SpuMetrics(i, None, ((0, 1),), 10.0, 10.0, b, 100.0, 0, 1) for i, b in enumerate(busy)}
    return MetricsSnapshot(t, 1.0, {"j": UnitMetrics("j", "bolt", True, ("l", "r"), spus)})


def test_the_join_controller_adds_an_spu_after_sustained_high_utilisation_and_removes_one_when_idle():
    from esault.control import Rescale
    from esault.joins.controller import JoinController
    controller = JoinController(["j"], tau0=0.2, tau2=0.7, sustain=2, max_spus=3)
    assert controller.decide(join_snapshot(1, [0.9])) == []
    assert controller.decide(join_snapshot(2, [0.8])) == [Rescale("j", 2)] and controller.decisions[-1][1] == 0.8
    assert controller.decide(join_snapshot(3, [0.1, 0.2])) == []  # mean 0.15, once
    assert [op.spus for op in controller.decide(join_snapshot(4, [0.1, 0.1]))] == [1]
    assert controller.decide(join_snapshot(5, [])) == []  # no busy readings yet: no decision
