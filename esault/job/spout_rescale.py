"""Rescaling a spout on a running job: under exactly_once a rollback to a fresh checkpoint, relaunched with
another count; under at_least_once a live move of shares between the instances at their acked watermarks.

A spout's instances own disjoint shares of its input (KafkaSource: partitions) and record one position
each. A class with an `esault_merge_positions` hook can merge them into one, from which any count of
instances restores its own share. So a rescale is Flink's stop-with-savepoint and restart, inside one
process: take a checkpoint (epoch e), tell the unit its new count, and roll every unit back to e; the
spout's n new instances each take their share of the merged position. Every unit restarts from the
same e and exactly-once sinks published only up to e: nothing is read twice or skipped. A kill -9 at
any step rolls back again, to e or to the first checkpoint with n instances, through the same merge.

Under at_least_once there is no checkpoint to move the positions through: the shares move live
(LiveSpoutRescale). Every instance is told the new count n and stops reading what it will not own (an
instance numbered n or more: everything), the rest keeps flowing. Each answers, once its tuples of the given-up
share in flight were acked or failed (message_timeout at most), with a position at its acked watermark: the
lowest offset per partition not known to be acked (esault.connectors.partitions.AckedOffsets). The merge of
those is what the takers seek to: instances below n that run take their new partitions from it, missing
instances start from it, and those numbered n or more stop. Records at or after a handed offset may be read
twice, none is skipped. A giver lost with its worker before it answered hands over nothing: its partitions
are taken from the group's committed offsets (acked watermarks too, only older), so more is read twice,
nothing lost. No rollback: the job's other partitions and units never stop.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from esault.checkpoint.instance_states import stranded_refusal, stranded_stage_states
from esault.config import MAX_SPUS, ElasticityConfig
from esault.dsl.spout import MERGE_HOOK, merge_hook
from esault.dsl.topology import UnitSpec
from esault.errors import ScalingError, WorkerLost
from esault.datapath.context import log
from esault.job.share_move import AdoptSpouts, EndShareMove, GiveUpWaiting, ReleaseShares, TakeShares
from esault.job.unit_messages import ResizeSpout
from esault.messages.control import GetRoutes, GetSpus, ScaleResult
from esault.metrics import registry as metrics

STEPS = ("checkpoint", "abandoned", "relaunched")
"""Where Job.rescale_step is called during a spout rescale under exactly_once (tests cut the rescale there)."""

LIVE_STEPS = ("releasing", "released", "taken")
"""Where Job.rescale_step is called during a live spout rescale (at_least_once): the givers were told to stop
reading and have not answered yet; every giver answered (or was lost) and nothing was taken yet; every taker
seeked (or was lost)."""


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
    if guarantee == "at_least_once" and not spec.cls.moves_shares_live():
        return (f"rescale of spout {name!r} ({spec.cls.__name__}) under guarantee='at_least_once': its instances "
                "cannot hand their shares over live; give the class release_share(), released_position() and "
                "take_share() (KafkaSource has them), run the job with guarantee='exactly_once', or restart it "
                "with another parallelism")
    if guarantee not in ("exactly_once", "at_least_once"):
        return (f"rescale of spout {name!r}: its partitions move at the offsets acked or checkpointed, and "
                f"guarantee={guarantee!r} tracks neither; run the job with guarantee='at_least_once' or "
                "guarantee='exactly_once', or stop it and start it again with the new parallelism")
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
        if job.stopped or job.checkpoints.ended:
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


RELEASE_MARGIN = 10.0
"""Seconds past message_timeout the control thread waits for the givers' answers before it takes their
partitions from the group's committed offsets (each giver answers at message_timeout at the latest)."""
TAKE_TIMEOUT = 30.0
"""Seconds the control thread waits for every taker to say it seeked (a lost one is replaced anyway)."""


class LiveSpoutRescale(SpoutRescale):
    """One spout rescale under at_least_once, on the job's control thread: shares move, nothing rolls back."""

    def __init__(self, job: Any, unit: str, spus: int, reason: str, step: Callable[[str, str], None]) -> None:
        super().__init__(job, unit, spus, reason, step)
        self.rescale_id = -1

    def run(self) -> ScaleResult:
        job, unit, n = self.job, self.unit, self.spus
        if job.stopped:
            raise ScalingError(f"rescale of spout {unit!r}: the job is stopping; nothing changed")
        actor = job.units[unit]
        before = tuple(sorted(actor.ask(GetSpus())))
        if len(before) == n:
            raise ScalingError(f"spout {unit!r} runs {n} instances already; nothing to do")
        started = time.monotonic()
        rescale_id = self.rescale_id = job.ctx.next_id()
        try:
            released = actor.ask(ReleaseShares(rescale_id, n, frozenset(job.lost_spus)))
            self.step(unit, "releasing")
            positions = self._wait(released, job.config.message_timeout + RELEASE_MARGIN, "release", actor)
            self.step(unit, "released")
            merged = merge_hook(job.topology.unit(unit).cls)([p for p in positions.values() if p is not None])
            topology = job.topology
            downstream = tuple(job.units[d.name].ask(GetRoutes(g.value))
                               for d, g in topology.downstream(topology.output_unit(unit)))
            answer = actor.ask(TakeShares(rescale_id, n, merged, downstream, frozenset(job.lost_spus)))
            if isinstance(answer, Exception):
                job.fail(f"rescale of spout {unit!r} to {n} instances left part of its input unread: {answer}")
                raise answer
            taken, configs, retired = answer
            new = self._start(actor, configs)
            errors = self._wait(taken, TAKE_TIMEOUT, "take", actor)
            self.step(unit, "taken")
        finally:
            actor.ask(EndShareMove(rescale_id))
        given_up = sorted(spu for spu, p in positions.items() if p is None)
        failed = {spu: e for spu, e in errors.items() if e}
        if failed:
            job.fail(f"rescale of spout {unit!r}: SPUs could not take their share: {failed}")
        after = tuple(sorted(actor.ask(GetSpus())))
        result = ScaleResult("rescale", unit, -1, -1, None, None, 0, 0.0, time.monotonic() - started, self.reason,
                             started=new, retired=retired)
        job.coordinator.record_result(result)
        metrics.record_scaling_event(job.name, unit, "rescale", self.reason)
        log.info("topology %r: spout %r rescaled live from %d to %d instances (SPUs %s) in %.0f ms%s", job.name, unit,
                 len(before), n, list(after), result.seconds * 1000,
                 f"; SPUs {given_up} handed nothing over (lost): their partitions resume from the group's "
                 "committed offsets" if given_up else "")
        return result

    def _wait(self, future: Any, timeout: float, what: str, actor: Any) -> dict[int, Any]:
        """The phase's answers; past `timeout`, the SPUs still silent count as lost (None)."""
        try:
            return future.result(timeout=timeout)
        except TimeoutError:
            silent = actor.ask(GiveUpWaiting(self.rescale_id))
            log.warning("topology %r: rescale of spout %r: no %s answer within %.0f s from SPUs %s; going on as "
                        "if they were lost", self.job.name, self.unit, what, timeout, sorted(silent))
            return future.result(timeout=10)

    def _start(self, actor: Any, configs: list[tuple[Any, Any]]) -> tuple[int, ...]:
        """Start the new instances here, not on the unit's thread (see TakeShares), and have the unit list
        them; one whose worker died (as it started, or before the unit listed it) starts again elsewhere."""
        job = self.job
        todo = list(configs)
        for _ in range(5):
            started: dict[int, Any] = {}
            for spec, cfg in todo:
                try:
                    started[cfg.spu_id] = job.launcher.start_spu(spec, cfg, job.ctx)
                except WorkerLost as exc:
                    log.warning("topology %r: starting spout SPU %d of %r: %s; trying another worker", job.name,
                                cfg.spu_id, self.unit, exc)
            dead = set(actor.ask(AdoptSpouts(started)))
            todo = [(spec, cfg) for spec, cfg in todo if cfg.spu_id in dead or cfg.spu_id not in started]
            if not todo:
                return tuple(cfg.spu_id for _, cfg in configs)
        job.fail(f"rescale of spout {self.unit!r}: no worker could start SPUs {[c.spu_id for _, c in todo]}, so "
                 "the partitions they were to read are not read; start workers and rescale the spout again")
        raise ScalingError(f"rescale of spout {self.unit!r}: SPUs {[c.spu_id for _, c in todo]} could not start")
