"""A running job's status as one dict (Job.status(), `esault status`, the REST API and the web page read it).

Its own module because the view grows with what users must see (partitions, waits, capacity) while the job's
control code does not: a new row lands here, not in job.py. It only reads: the units' layouts, the SPUs'
counters, the spouts' progress, the checkpoints' stats. docs/OBSERVABILITY.md lists the fields.
"""

from __future__ import annotations

from typing import Any

from esault.messages.control import GetLayout
from esault.metrics.forwarded import units_waiting, waiting_since
from esault.metrics.partition_status import as_dicts

Job = Any
"""An esault.job.job.Job (not imported: job.py imports this view)."""

TOTALS = ("emitted", "processed", "acked", "failed", "replayed", "user_errors", "dead_letters", "shed",
          "snapshot_us")
"""Counts summed over a unit's SPUs, retired ones included (a merged-away SPU's counts still happened)."""
GAUGES = ("pes", "inflight", "trees")
"""Summed over live SPUs only."""


def job_status(job: Job) -> dict[str, Any]:
    """The whole view: per unit its SPUs (interval, host, counters, partitions, waits) and totals; the job's
    trees in flight, failures, capacity and checkpoints."""
    units = unit_rows(job)
    note_waits(job.name, units)
    checkpoints = job.checkpoints.stats
    return {
        "topology": job.name,
        "units": units,
        "pending_trees": pending_trees(job, units),
        "spouts_finished": job.spouts_finished(),
        "scaling_events": len(job.coordinator.history),
        "spout_errors": job.spout_errors(),
        "failures": list(job.failures),
        "dead_letters": job.dead_letters,
        "lost_spus": sorted(job.lost_spus),
        "unaccounted": job.unaccounted,
        "guarantee": job.config.guarantee,
        "capacity": job.capacity(),
        "checkpoints": {"completed": checkpoints.completed, "failed": checkpoints.failed,
                        "failed_in_a_row": checkpoints.failed_in_a_row,
                        "last_failure": checkpoints.last_failure, "last_epoch": checkpoints.last_epoch,
                        "recoveries": len(checkpoints.recoveries)},
    }


def unit_rows(job: Job) -> dict[str, Any]:
    """Each unit's row: its live SPUs (one ask of its layout) with their counters, and its totals."""
    all_stats = job.spu_counters()
    stats = {(s.unit, s.spu): s for s in all_stats}
    topology = job.topology
    units: dict[str, Any] = {}
    for spec in topology.units:
        layout = job.units[topology.host_of(spec.name)].ask(GetLayout())
        spus = {}
        for spu_id, owned in layout.items():
            st = stats.get((spec.name, spu_id))
            span = (owned[0][0], owned[-1][1]) if owned else None  # its one interval, or the span of several
            spus[spu_id] = {"interval": span, "intervals": list(owned) if owned else None,
                            **job.process_of(spu_id), **(st.as_dict() if st else {})}
            if st is not None and st.partitions is not None:  # a source that reads partitions (Kafka)
                spus[spu_id]["partitions"] = as_dicts(st.partitions)
        mine = [s.as_dict() for s in all_stats if s.unit == spec.name]
        totals = {k: sum(s.get(k, 0) for s in mine) for k in TOTALS}
        totals.update({k: sum(s.get(k, 0) for s in spus.values()) for k in GAUGES})
        units[spec.name] = {"kind": "spout" if spec.is_spout else "bolt", "spus": spus, **totals,
                            "reconfiguring": job.reconfiguring(spec.name)}
        if topology.chained(spec.name):
            units[spec.name]["chained_into"] = topology.host_of(spec.name)
        if any("partitions" in row for row in spus.values()):
            units[spec.name]["partitions"] = sorted(
                ({**part, "spu": spu_id} for spu_id, row in spus.items() for part in row.get("partitions", ())),
                key=lambda part: (part["topic"], part["partition"], part["spu"]))
    return units


def note_waits(topology: str, units: dict[str, Any]) -> None:
    """A source or sink stalled outside esault (a broker, a store): its SPU's row and its unit say for what and
    since when, from the waiting-since series (this process's, and the workers' from their heartbeats)."""
    for unit, spu_id, what, since in units_waiting(topology):
        if unit in units and spu_id in units[unit]["spus"]:
            text = f"waiting for {what} since {waiting_since(since)}"
            units[unit]["spus"][spu_id]["waiting"] = text
            units[unit].setdefault("waiting", []).append(text)


def pending_trees(job: Job, units: dict[str, Any]) -> int:
    """Trees in flight, as each spout SPU tracking them last said (a worker's in its heartbeat); none for one
    that reported itself finished and drained."""
    total = 0
    for spec in job.topology.units:
        if spec.is_spout:
            for spu_id, row in units[spec.name]["spus"].items():
                progress = job.ctx.spout_progress.get(spu_id)
                if progress is None or not progress.drained:
                    total += row.get("trees", 0)
    return total
