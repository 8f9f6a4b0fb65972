"""The built-in LatencyController on hand-made snapshots: the paper's rules, unchanged, as a controller."""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from esault.config import ElasticityConfig
from esault.control import Change, LatencyController, Merge, ProbeRecord, SnapshotBuilder, Split
from esault.elasticity.detector import Load, LoadDetector, ProbeSample
from esault.keyhash import KEY_SPACE_MAX
from esault.messages.control import ScaleResult

CFG = ElasticityConfig(max_latency=0.1, probe_period=1.0, overload_reaction_time=3, overload_reaction_factor=0.5,
                       low_watermark=0.3, underload_reaction_time=4, underload_reaction_factor=0.6, cooldown=5.0,
                       min_spus=1, max_spus=4)
UNITS = [("src", "spout", False, ()), ("count", "bolt", True, ("src",))]
HALF = KEY_SPACE_MAX // 2


def layout(*owned: tuple[int, tuple[tuple[int, int], ...]]) -> dict:
    return {"src": {1: None}, "count": dict(owned)}


TWO = layout((2, ((0, HALF),)), (3, ((HALF + 1, KEY_SPACE_MAX),)))


class Feed:
    """Builds successive snapshots for one controller: the layout now and the events since the last one."""

    def __init__(self, controller: LatencyController, spus: dict = TWO) -> None:
        self.controller = controller
        self.builder = SnapshotBuilder()
        self.layout = spus
        self.now = 0.0

    def step(self, *events, advance: float = 1.0) -> list:
        self.now += advance
        snap = self.builder.update(self.now, [], UNITS, self.layout, events=events)
        return list(self.controller.decide(snap))


def probe(spu: int, sent_at: float, latency: float | None, processed: int = 100, hashes=()) -> ProbeRecord:
    return ProbeRecord("count", spu, ProbeSample(sent_at, latency, processed), tuple(hashes))


def split_result(giver: int, receiver: int, at: int) -> ScaleResult:
    return ScaleResult("split", "count", giver, receiver, at, HALF, 10, 0.01, 0.02, "overload")


def test_probes_timing_out_split_the_spu_at_the_median_of_its_sampled_hashes():
    controller = LatencyController("count", CFG)
    feed = Feed(controller)
    hashes = [10, 20, 30, 1000, 2000, 3000]
    assert feed.step(probe(2, 0.0, 0.01, hashes=hashes)) == []
    assert feed.step(probe(2, 1.0, None)) == []
    ops = feed.step(probe(2, 2.0, None), probe(3, 2.0, 0.01))
    assert len(ops) == 1 and isinstance(ops[0], Split)
    split = ops[0]
    assert (split.unit, split.spu, split.reason) == ("count", 2, "overload")
    assert 30 < split.at <= 1000, "the cut halves the sampled keys, not the hash range"
    assert "timed out" in controller.decisions[0][2]
    # While the split runs, more overload decides nothing (one change at a time).
    assert feed.step(probe(2, 3.0, None), probe(2, 4.0, None)) == []


def test_an_spu_that_stays_light_merges_into_its_less_loaded_neighbour_and_min_spus_holds():
    three = layout((2, ((0, 99),)), (3, ((100, 199),)), (4, ((200, KEY_SPACE_MAX),)))
    controller = LatencyController("count", CFG)
    feed = Feed(controller, three)
    # SPU 3 had a peak of 1000 and then nearly nothing; neighbour 4 is lighter than neighbour 2.
    events = [probe(2, 0.0, 0.01, 900), probe(4, 0.0, 0.01, 50), probe(3, 0.0, 0.01, 1000)]
    events += [probe(3, float(t), 0.01, 5) for t in range(1, 5)]
    ops = feed.step(*events)
    assert ops == [Merge("count", 3, 4, reason="underload")]
    single = LatencyController("count", CFG)
    one = Feed(single, layout((2, ((0, KEY_SPACE_MAX),))))
    assert one.step(*[probe(2, float(t), 0.01, 0) for t in range(8)]) == [], "min_spus 1: nothing to merge into"


def test_a_split_restarts_only_the_touched_spus_and_probes_sent_before_it_are_ignored():
    controller = LatencyController("count", CFG)
    feed = Feed(controller)
    feed.step(probe(2, 0.0, 0.01), probe(3, 0.0, 0.01))
    kept = controller.detectors[3]
    split_at = HALF // 2
    feed.layout = layout((2, ((0, split_at - 1),)), (5, ((split_at, HALF),)), (3, ((HALF + 1, KEY_SPACE_MAX),)))
    change = Change(10.0, split_result(2, 5, split_at))
    # Two probes of the giver sent before the split finished time out: they measured the old layout.
    ops = feed.step(change, probe(2, 9.0, None), probe(2, 9.5, None), probe(2, 9.8, None))
    assert ops == []
    assert controller.detectors[3] is kept
    assert set(controller.detectors) == {2, 3, 5}
    # A fresh window: after the cooldown, it takes three timeouts of its own to split the giver again.
    assert feed.step(probe(2, 16.0, None), probe(2, 17.0, None), advance=14.0) == []
    assert [op.spu for op in feed.step(probe(2, 18.0, None))] == [2]


def test_after_a_change_the_cooldown_holds_every_decision():
    controller = LatencyController("count", CFG)
    feed = Feed(controller)
    feed.step(Change(0.5, split_result(3, 7, HALF + 10)))
    feed.layout = layout((2, ((0, HALF),)), (3, ((HALF + 1, HALF + 9),)), (7, ((HALF + 10, KEY_SPACE_MAX),)))
    timeouts = [probe(2, 1.0 + t, None) for t in range(3)]
    assert feed.step(*timeouts) == [], "within cooldown (5 s after the change finished at 0.5)"
    later = [probe(2, 6.0 + t, None) for t in range(3)]
    assert [type(op) for op in feed.step(*later, advance=6.0)] == [Split]


def test_a_refused_operation_lets_the_controller_try_again_after_the_cooldown():
    controller = LatencyController("count", CFG)
    feed = Feed(controller)
    ops = feed.step(*[probe(2, float(t), None) for t in range(3)])
    controller.applied(ops[0], None, RuntimeError("refused"))
    assert not controller.changing
    assert feed.step(probe(2, 3.5, None)) == [], "still cooling down"
    assert [type(op) for op in feed.step(probe(2, 9.0, None), advance=6.0)] == [Split]


samples = st.lists(st.one_of(st.none(), st.floats(0.0, 0.3)).flatmap(
    lambda latency: st.tuples(st.just(latency), st.integers(0, 2000))), min_size=1, max_size=40)


@settings(max_examples=200, deadline=None)
@given(samples)
def test_it_decides_exactly_where_the_papers_detector_first_says_split_or_merge(sequence):
    """Unchanged behaviour: on one SPU's probes, the first operation comes with the detector's first
    non-normal verdict, of the matching kind (the other SPU stays normal)."""
    controller = LatencyController("count", CFG)
    feed = Feed(controller)
    detector = LoadDetector(CFG)
    expected = None
    for i, (latency, processed) in enumerate(sequence):
        verdict = detector.observe(ProbeSample(float(i), latency, processed))
        if verdict.kind is not Load.NORMAL:
            expected = (i, Split if verdict.kind is Load.OVERLOAD else Merge)
            break
    got = None
    for i, (latency, processed) in enumerate(sequence):
        ops = feed.step(probe(2, float(i), latency, processed))
        if ops:
            got = (i, type(ops[0]))
            break
    assert got == expected
