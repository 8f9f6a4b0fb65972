"""Elasticity: probe-based load detection and split/merge planning (PAPER_NOTES sections 4-5)."""

from esault.elasticity.detector import Load, LoadDetector, ProbeSample, Verdict
from esault.elasticity.planner import HashSampler, choose_merge_target, choose_split_point

__all__ = [
    "HashSampler", "Load", "LoadDetector", "ProbeSample", "Verdict",
    "choose_merge_target", "choose_split_point",
]
