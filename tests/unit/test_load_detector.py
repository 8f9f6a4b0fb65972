"""LoadDetector: the paper's overload and underload rules, boundary by boundary."""

from __future__ import annotations

from dataclasses import FrozenInstanceError

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from esault.config import ElasticityConfig
from esault.elasticity import Load, LoadDetector, ProbeSample, Verdict

OK = 0.01  # a probe latency well under max_latency
CFG = ElasticityConfig(
    max_latency=0.1,
    overload_reaction_time=4,
    overload_reaction_factor=0.5,
    low_watermark=0.5,
    underload_reaction_time=5,
    underload_reaction_factor=0.6,
    peak_reset_factor=2.0,
)


def feed(detector: LoadDetector, samples: list[tuple[float | None, int]]) -> list[Verdict]:
    """Feed (latency, processed) pairs, one probe period apart."""
    return [
        detector.observe(ProbeSample(sent_at=float(i), latency=lat, processed=n))
        for i, (lat, n) in enumerate(samples)
    ]


def kinds(verdicts: list[Verdict]) -> list[Load]:
    return [v.kind for v in verdicts]


N, O, U = Load.NORMAL, Load.OVERLOAD, Load.UNDERLOAD


# ------------------------------------------------------------------ overload
def test_overload_needs_a_timed_out_fraction_strictly_above_the_factor() -> None:
    # 2 of 4 = 0.5 == overload_reaction_factor: not enough.
    d = LoadDetector(CFG)
    assert kinds(feed(d, [(OK, 100), (None, 100), (OK, 100), (None, 100)])) == [N, N, N, N]
    # 3 of 4 = 0.75 > 0.5: overload.
    d = LoadDetector(CFG)
    verdicts = feed(d, [(OK, 100), (None, 100), (0.5, 100), (None, 100)])
    assert kinds(verdicts) == [N, N, N, O]
    last = verdicts[-1]
    assert (last.timeouts, last.overload_samples, last.timeout_fraction) == (3, 4, 0.75)
    assert "3 of the last 4 probes timed out (latency > max_latency 0.1s)" in last.evidence
    assert "fraction 0.75 > overload_reaction_factor 0.5" in last.evidence


def test_an_unfull_overload_window_never_decides() -> None:
    d = LoadDetector(CFG)
    verdicts = feed(d, [(None, 0)] * 3)
    assert kinds(verdicts) == [N, N, N]
    assert "[window not full: 3/4]" in verdicts[-1].evidence
    assert d.observe(ProbeSample(3.0, None, 0)).kind is O


def test_latency_equal_to_max_latency_is_not_a_timeout_but_none_is() -> None:
    d = LoadDetector(CFG)
    assert kinds(feed(d, [(0.1, 1)] * 4)) == [N] * 4
    assert d.observe(ProbeSample(4.0, 0.1000001, 1)).timeouts == 1
    assert d.observe(ProbeSample(5.0, None, 1)).timeouts == 2


def test_old_timeouts_slide_out_of_the_overload_window() -> None:
    d = LoadDetector(CFG)
    verdicts = feed(d, [(None, 1), (None, 1), (None, 1), (None, 1), (OK, 1), (OK, 1), (OK, 1)])
    assert kinds(verdicts) == [N, N, N, O, O, N, N]
    assert [v.timeouts for v in verdicts] == [1, 2, 3, 4, 3, 2, 1]


# ----------------------------------------------------------------- underload
def test_underload_needs_a_light_fraction_strictly_above_the_factor() -> None:
    # Peak 100, watermark 0.5 x 100 = 50. 3 of 5 light = 0.6 == factor: not enough.
    d = LoadDetector(CFG)
    verdicts = feed(d, [(OK, 100), (OK, 40), (OK, 40), (OK, 40), (OK, 60)])
    assert kinds(verdicts) == [N] * 5
    assert verdicts[-1].light == 3 and verdicts[-1].light_fraction == 0.6
    # 4 of 5 light = 0.8 > 0.6: underload.
    d = LoadDetector(CFG)
    verdicts = feed(d, [(OK, 100), (OK, 40), (OK, 40), (OK, 40), (OK, 40)])
    assert kinds(verdicts) == [N, N, N, N, U]
    last = verdicts[-1]
    assert (last.light, last.underload_samples, last.peak) == (4, 5, 100)
    assert "4 of the last 5 samples were light (processed < low_watermark 0.5 x peak 100 = 50)" in last.evidence
    assert "fraction 0.8 > underload_reaction_factor 0.6, and 0 of the last 4 probes timed out" in last.evidence


def test_a_count_equal_to_the_watermark_is_not_light() -> None:
    d = LoadDetector(CFG)
    verdicts = feed(d, [(OK, 100), (OK, 50), (OK, 50), (OK, 50), (OK, 50)])
    assert kinds(verdicts) == [N] * 5 and verdicts[-1].light == 0
    assert d.observe(ProbeSample(5.0, OK, 49)).light == 1


def test_an_unfull_underload_window_never_decides() -> None:
    d = LoadDetector(CFG)
    verdicts = feed(d, [(OK, 100), (OK, 0), (OK, 0), (OK, 0)])
    assert verdicts[-1].light == 3 and verdicts[-1].kind is N
    assert "[window not full: 4/5]" in verdicts[-1].evidence


def test_one_timeout_within_the_overload_reaction_time_blocks_a_merge() -> None:
    cfg = ElasticityConfig(
        max_latency=0.1, overload_reaction_time=6, overload_reaction_factor=0.5, low_watermark=0.5,
        underload_reaction_time=5, underload_reaction_factor=0.6, peak_reset_factor=2.0,
    )
    d = LoadDetector(cfg)
    # The timeout resets the peak to its own count (100) and restarts the underload window.
    verdicts = feed(d, [(OK, 100), (None, 100), (OK, 40), (OK, 40), (OK, 40), (OK, 40), (OK, 40), (OK, 40)])
    assert verdicts[1].peak_reset
    # Samples 2..6: the underload window [100, 40, 40, 40, 40] is 4/5 light, but the timeout
    # is among the last 6 probes; sample 7 pushes it out and the merge is allowed.
    assert verdicts[5].light_fraction == 0.8 and verdicts[5].timeouts == 1
    assert "1 of the last 6 probes timed out" in verdicts[5].evidence
    assert kinds(verdicts) == [N, N, N, N, N, N, N, U]
    assert verdicts[7].timeouts == 0


def test_underload_waits_for_a_full_overload_window_too() -> None:
    cfg = ElasticityConfig(
        overload_reaction_time=6, underload_reaction_time=5, low_watermark=0.5,
        underload_reaction_factor=0.6, peak_reset_factor=2.0,
    )
    d = LoadDetector(cfg)
    verdicts = feed(d, [(0.0, 100), (0.0, 10), (0.0, 10), (0.0, 10), (0.0, 10), (0.0, 10)])
    assert verdicts[4].light_fraction == 0.8 and verdicts[4].kind is N  # only 5 of 6 probes seen
    assert verdicts[5].kind is U


def test_an_spu_with_no_traffic_at_all_is_underloaded_even_without_a_peak() -> None:
    d = LoadDetector(CFG)
    verdicts = feed(d, [(OK, 0)] * 10)
    assert verdicts[-1].peak == 0 and verdicts[-1].light == verdicts[-1].underload_samples
    assert kinds(verdicts)[-1] == U


# ---------------------------------------------------------------- peak reset
def test_a_new_high_load_phase_resets_the_peak_and_the_underload_window() -> None:
    d = LoadDetector(CFG)
    verdicts = feed(d, [(OK, 100), (OK, 40), (OK, 40), (OK, 300)])
    # mean(100, 40, 40) = 60; 300 > 2.0 x 60: a new phase.
    assert verdicts[-1].peak_reset and verdicts[-1].peak == 300
    assert verdicts[-1].underload_samples == 1
    assert "peak reset by this sample" in verdicts[-1].evidence
    # 100 is now light (100 < 150): the new peak moved the watermark up.
    verdicts = feed(d, [(OK, 100)] * 4)
    assert [v.light for v in verdicts] == [1, 2, 3, 4]
    assert kinds(verdicts) == [N, N, N, U]


def test_a_rise_within_the_reset_factor_only_raises_the_peak() -> None:
    d = LoadDetector(CFG)
    verdicts = feed(d, [(OK, 100), (OK, 60), (OK, 60), (OK, 130)])
    # mean(100, 60, 60) = 73.3; 130 <= 146.7: no reset, but peak 130 makes 60 light (60 < 65).
    last = verdicts[-1]
    assert not last.peak_reset and last.peak == 130 and last.underload_samples == 4
    assert last.light == 2
    assert verdicts[-2].light == 0  # against the old peak (50) they were not light


def test_a_rise_just_at_the_reset_factor_does_not_reset() -> None:
    d = LoadDetector(CFG)
    feed(d, [(OK, 100), (OK, 100)])
    assert not d.observe(ProbeSample(2.0, OK, 200)).peak_reset  # 200 == 2.0 x mean 100
    d = LoadDetector(CFG)
    feed(d, [(OK, 100), (OK, 100)])
    assert d.observe(ProbeSample(2.0, OK, 201)).peak_reset


def test_a_timeout_resets_the_peak_to_its_own_count() -> None:
    d = LoadDetector(CFG)
    feed(d, [(OK, 1000), (OK, 900)])
    v = d.observe(ProbeSample(2.0, None, 20))
    assert v.peak_reset and v.peak == 20 and v.underload_samples == 1
    assert d.peak == 20


def test_reset_forgets_every_window_and_the_peak() -> None:
    d = LoadDetector(CFG)
    assert kinds(feed(d, [(None, 100)] * 4))[-1] is O
    d.reset()
    assert d.peak == 0
    verdicts = feed(d, [(None, 100)] * 3)
    assert kinds(verdicts) == [N, N, N] and verdicts[-1].overload_samples == 3


def test_verdict_and_sample_are_frozen() -> None:
    sample = ProbeSample(0.0, None, 3)
    with pytest.raises(FrozenInstanceError):
        sample.processed = 4  # type: ignore[misc]
    verdict = LoadDetector(CFG).observe(sample)
    with pytest.raises(FrozenInstanceError):
        verdict.kind = O  # type: ignore[misc]
    assert LoadDetector(CFG).config is CFG


# ------------------------------------------------- differential (hypothesis)
def reference_verdicts(cfg: ElasticityConfig, samples: list[tuple[float | None, int]]) -> list[tuple[Load, int, bool]]:
    """The rules of PAPER_NOTES section 5 over the full history, recomputed from scratch each step."""
    out = []
    history: list[tuple[bool, int]] = []
    phase_start = 0  # index of the last peak reset
    peak = 0
    for latency, processed in samples:
        k = len(history)
        timed_out = latency is None or latency > cfg.max_latency
        before = [p for _, p in history[max(phase_start, k - cfg.underload_reaction_time):]]
        reset = timed_out or (len(before) > 0 and processed > cfg.peak_reset_factor * (sum(before) / len(before)))
        if reset:
            phase_start, peak = k, processed
        else:
            peak = max([peak, processed])
        history.append((timed_out, processed))
        over = [t for t, _ in history[-cfg.overload_reaction_time:]]
        under = [p for _, p in history[max(phase_start, len(history) - cfg.underload_reaction_time):]]
        light = [p < cfg.low_watermark * peak or p == 0 for p in under]
        if len(over) == cfg.overload_reaction_time and sum(over) / len(over) > cfg.overload_reaction_factor:
            kind = Load.OVERLOAD
        elif (
            len(under) == cfg.underload_reaction_time
            and len(over) == cfg.overload_reaction_time
            and not any(over)
            and sum(light) / len(light) > cfg.underload_reaction_factor
        ):
            kind = Load.UNDERLOAD
        else:
            kind = Load.NORMAL
        out.append((kind, peak, reset))
    return out


configs = st.builds(
    ElasticityConfig,
    max_latency=st.just(0.1),
    overload_reaction_time=st.integers(1, 6),
    overload_reaction_factor=st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0]),
    low_watermark=st.sampled_from([0.0, 0.3, 0.5, 1.0]),
    underload_reaction_time=st.integers(1, 8),
    underload_reaction_factor=st.sampled_from([0.0, 0.5, 0.8, 1.0]),
    peak_reset_factor=st.sampled_from([1.0, 1.5, 3.0]),
)
sample_lists = st.lists(
    st.tuples(st.sampled_from([None, 0.0, 0.1, 0.2]), st.integers(0, 50)),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(cfg=configs, samples=sample_lists)
def test_the_detector_matches_a_from_scratch_reading_of_the_rules(cfg, samples) -> None:
    d = LoadDetector(cfg)
    got = [(v.kind, v.peak, v.peak_reset) for v in feed(d, samples)]
    assert got == reference_verdicts(cfg, samples)
