"""LoadDetector: the paper's overload and underload detectors for one SPU (PAPER_NOTES section 5).

The latency monitor turns each probe of an SPU into a ProbeSample and feeds it
here; the verdict says whether to split (OVERLOAD), merge (UNDERLOAD) or do
nothing. Pure and deterministic: the caller decides what a missing probe is
and when to call reset().

Rules (all windows count probe samples, newest last):
- a probe times out when latency is None or latency > max_latency;
- OVERLOAD: the last overload_reaction_time samples (a full window) have a
  timed-out fraction strictly greater than overload_reaction_factor;
- a sample is light when processed < low_watermark * peak; UNDERLOAD: the last
  underload_reaction_time samples (a full window) have a light fraction
  strictly greater than underload_reaction_factor, and none of the last
  overload_reaction_time samples (also a full window) timed out;
- peak = the largest processed count since the last peak reset. A peak reset
  (peak := this sample's count, underload window cleared) happens when a probe
  times out, or when processed > peak_reset_factor * the mean processed count
  of the underload window: a new high-load phase.
Light samples are counted against the current peak, so decisions always use
the newest peak. A sample with nothing processed is always light, also before
any peak: an SPU that gets no traffic at all is the clearest underload (the
paper's rule alone would never merge it, since 0 < watermark x 0 is false).
"""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass

from esault.config import ElasticityConfig

__all__ = ["Load", "LoadDetector", "ProbeSample", "Verdict"]


class Load(enum.Enum):
    """What the detector concluded about an SPU."""

    NORMAL = "normal"
    OVERLOAD = "overload"  # split it
    UNDERLOAD = "underload"  # merge it into a neighbour


@dataclass(frozen=True, slots=True)
class ProbeSample:
    """One probe of one SPU, as the latency monitor saw it."""

    sent_at: float
    """Clock reading when the probe was sent."""
    latency: float | None
    """Seconds until it returned; None: it did not return within max_latency."""
    processed: int
    """Messages the SPU's input router processed since the previous probe."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """The detector's decision after one sample, with the numbers behind it."""

    kind: Load
    evidence: str
    """Human-readable: windows, fractions and thresholds that led to kind."""
    timeouts: int
    """Timed-out probes in the overload window."""
    overload_samples: int
    """Samples in the overload window (full at overload_reaction_time)."""
    light: int
    """Light samples in the underload window."""
    underload_samples: int
    """Samples in the underload window (full at underload_reaction_time)."""
    peak: int
    """The current peak processed count."""
    peak_reset: bool
    """Whether this sample reset the peak."""

    @property
    def timeout_fraction(self) -> float:
        return self.timeouts / self.overload_samples if self.overload_samples else 0.0

    @property
    def light_fraction(self) -> float:
        return self.light / self.underload_samples if self.underload_samples else 0.0


class LoadDetector:
    """Overload and underload detection for one SPU; O(underload_reaction_time) per sample."""

    def __init__(self, cfg: ElasticityConfig) -> None:
        self._cfg = cfg
        self._timeouts: deque[bool] = deque(maxlen=cfg.overload_reaction_time)
        self._processed: deque[int] = deque(maxlen=cfg.underload_reaction_time)
        self._peak = 0

    @property
    def config(self) -> ElasticityConfig:
        return self._cfg

    @property
    def peak(self) -> int:
        """The largest processed count since the last peak reset."""
        return self._peak

    def reset(self) -> None:
        """Forget every sample and the peak: call after this SPU split or merged."""
        self._timeouts.clear()
        self._processed.clear()
        self._peak = 0

    def observe(self, sample: ProbeSample) -> Verdict:
        """Add one probe sample and decide. O(underload_reaction_time)."""
        cfg = self._cfg
        timed_out = sample.latency is None or sample.latency > cfg.max_latency
        processed = sample.processed
        window = self._processed

        peak_reset = timed_out or bool(window) and processed > cfg.peak_reset_factor * (sum(window) / len(window))
        if peak_reset:
            self._peak = processed
            window.clear()
        elif processed > self._peak:
            self._peak = processed
        self._timeouts.append(timed_out)
        window.append(processed)

        peak = self._peak
        threshold = cfg.low_watermark * peak
        timeouts = sum(self._timeouts)
        n_over = len(self._timeouts)
        light = sum(1 for p in window if p < threshold or p == 0)
        n_under = len(window)
        over_full = n_over == cfg.overload_reaction_time
        under_full = n_under == cfg.underload_reaction_time

        over_text = (
            f"{timeouts} of the last {n_over} probes timed out (latency > max_latency {cfg.max_latency}s)"
            + ("" if over_full else f" [window not full: {n_over}/{cfg.overload_reaction_time}]")
        )
        under_text = (
            f"{light} of the last {n_under} samples were light "
            f"(processed < low_watermark {cfg.low_watermark} x peak {peak} = {threshold:g})"
            + ("" if under_full else f" [window not full: {n_under}/{cfg.underload_reaction_time}]")
        )
        reset_text = "; peak reset by this sample" if peak_reset else ""

        kind = Load.NORMAL
        if over_full and timeouts / n_over > cfg.overload_reaction_factor:
            kind = Load.OVERLOAD
            evidence = (
                f"overload: {over_text}: fraction {timeouts / n_over:.3g} > "
                f"overload_reaction_factor {cfg.overload_reaction_factor}"
            )
        elif under_full and over_full and timeouts == 0 and light / n_under > cfg.underload_reaction_factor:
            kind = Load.UNDERLOAD
            evidence = (
                f"underload: {under_text}: fraction {light / n_under:.3g} > "
                f"underload_reaction_factor {cfg.underload_reaction_factor}, and {over_text}"
            )
        else:
            evidence = (
                f"normal: {over_text} (needs fraction > {cfg.overload_reaction_factor} of a full window); "
                f"{under_text} (needs fraction > {cfg.underload_reaction_factor} of a full window "
                f"and no timeout)"
            )
        return Verdict(
            kind=kind,
            evidence=evidence + reset_text,
            timeouts=timeouts,
            overload_samples=n_over,
            light=light,
            underload_samples=n_under,
            peak=peak,
            peak_reset=peak_reset,
        )
