"""Rescaling a spout on a running job: a rollback to a fresh checkpoint, relaunched with another count.

A spout's instances own disjoint shares of its input (KafkaSource: partitions) and record one position
each. A class with an `esault_merge_positions` hook can merge them into one, from which any count of
instances restores its own share. So a rescale is Flink's stop-with-savepoint and restart, inside one
process: take a checkpoint (epoch e), tell the unit its new count, and roll every unit back to e; the
spout's n new instances each take their share of the merged position. Every unit restarts from the
same e and exactly-once sinks published only up to e: nothing is read twice or skipped. A kill -9 at
any step rolls back again, to e or to the first checkpoint with n instances, through the same merge.

Only under exactly_once: at_least_once has no checkpoint to move the positions through (its tuples in
flight would be replayed by instances that may no longer own their partitions), so it is refused.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from esault.checkpoint.instance_states import stranded_refusal, stranded_stage_states
from esault.config import MAX_SPUS, ElasticityConfig
from esault.dsl.spout import MERGE_HOOK, merge_hook
from esault.dsl.topology import UnitSpec
from esault.errors import ScalingError
from esault.datapath.context import log
from esault.job.unit import ResizeSpout
from esault.messages.control import GetSpus, ScaleResult
from esault.metrics import registry as metrics

STEPS = ("checkpoint", "abandoned", "relaunched")
"""Where Job.rescale_step is called during a spout rescale (tests cut the rescale there)."""


def spout_rescale_refusal(spec: UnitSpec, guarantee: str, spus: Any = 1, limit: int = 1) -> str | None:
    """Why spout `spec` cannot be rescaled to `spus` instances (at most `limit`, Job's spu_limit) on a running
    job of `guarantee`, or None."""
    name = spec.name
    if not isinstance(spus, int) or isinstance(spus, bool) or spus < 1:
        return f"rescale of {name!r} to {spus!r:.40} SPUs: give a whole number >= 1"
    if spus > limit:
        return (f"rescale of {name!r} to {spus} SPUs: it runs at most {limit} (its max_spus: the default "
                f"{ElasticityConfig().max_spus}, or its declared parallelism if larger; declare the spout with a "
                f"larger parallelism, up to MAX_SPUS={MAX_SPUS})")
    if merge_hook(spec.cls) is None:
        return (f"spout {name!r} ({spec.cls.__name__}) cannot be rescaled: its instances' positions cannot be "
                f"merged. Give the class a static {MERGE_HOOK}(positions) that returns one position every "
                "instance of any count restores its own share from (KafkaSource has it), or restart the job with "
                "another parallelism")
    if guarantee != "exactly_once":
        return (f"rescale of spout {name!r}: its partitions and offsets move through a checkpoint, which "
                f"guarantee={guarantee!r} does not take; run the job with guarantee='exactly_once', or stop it "
                "and start it again with the new parallelism (a KafkaSource with start='committed' resumes from "
                "the offsets its group committed)")
    return None


class SpoutRescale:
    """One spout rescale, run on the job's control thread (so no checkpoint or reconfiguration interleaves)."""

    def __init__(self, job: Any, unit: str, spus: int, reason: str, step: Callable[[str, str], None]) -> None:
        self.job = job
        self.unit = unit
        self.spus = spus
        self.reason = reason
        self.step = step

    def run(self) -> ScaleResult:
        job, unit = self.job, self.unit
        if job._stopped or job.checkpoints.ended:
            raise ScalingError(f"rescale of spout {unit!r}: the job is stopping (its spouts ended at a final "
                               "checkpoint); nothing changed")
        actor = job.units[unit]
        before = tuple(sorted(actor.ask(GetSpus())))
        if len(before) == self.spus:
            raise ScalingError(f"spout {unit!r} runs {self.spus} instances already; nothing to do")
        started = time.monotonic()
        self.step(unit, "checkpoint")
        epoch = job.checkpoints.checkpoint()
        if epoch is None:  # still correct from the last completed one, only more is read again
            log.warning("topology %r: rescale of spout %r: the checkpoint before it failed; rolling back to the "
                        "last completed one", job.name, unit)
        point = job.checkpoints.store.latest()
        if point is not None and self.spus < len(before):
            recorded = point.positions.get(unit, {})
            stages = [s.name for s in job.topology.unit(unit).stages]
            stranded = stranded_stage_states(job.checkpoints.store, stages, point.epoch, recorded, self.spus)
            if stranded:
                raise ScalingError(f"rescale of {stranded_refusal(unit, self.spus, stranded, point.epoch)}; "
                                   "nothing changed")
        actor.ask(ResizeSpout(self.spus))
        job.roll_back_now(frozenset(), f"rescale of spout {unit!r} to {self.spus} instances",
                          lambda: self.step(unit, "abandoned"))
        after = tuple(sorted(actor.ask(GetSpus())))
        self.step(unit, "relaunched")
        job.checkpoints.checkpoint()  # the first with n instances (a failure: the next periodic one)
        result = ScaleResult("rescale", unit, -1, -1, None, None, 0, 0.0, time.monotonic() - started, self.reason,
                             started=after, retired=before)
        job.coordinator.record_result(result)
        metrics.record_scaling_event(job.name, unit, "rescale", self.reason)
        log.info("topology %r: spout %r rescaled from %d to %d instances through checkpoint %s in %.0f ms",
                 job.name, unit, len(before), self.spus, epoch, result.seconds * 1000)
        return result
