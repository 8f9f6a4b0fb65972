"""What a job does when SPUs die with their worker (Job.replace_lost, called by the cluster's pulse).

Its own module because a loss is handled one way per guarantee, and each way
touches many parts of the job: exactly_once aborts the checkpoint and any
reconfiguration in flight and queues a rollback to the last checkpoint;
at_least_once and none tell every unit (an operation in flight is called off
or goes on without the dead), queue a replacement per lost SPU, and once all
are in place fail the trees in flight (acking) so the spouts replay them at
once. The job keeps the bookkeeping others read (`lost_spus`, `_recovering`);
the steps of a loss live here.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Any

from esault.job.coordinator import ScaleRequest
from esault.job.unit_messages import AbortReconfiguration, SpusLost
from esault.messages.acking import FailPending
from esault.messages.control import GetSpus

__all__ = ["queue_rollback", "replace_lost"]

Job = Any
"""An esault.job.job.Job (not imported: job.py imports this module)."""


def replace_lost(job: Job, lost_spus: set[int]) -> list[Future]:
    """Job.replace_lost: exactly_once rolls the job back to its last checkpoint; otherwise each lost SPU's
    interval goes to a fresh SPU (no state moves) and trees in flight fail. Never blocks on the control
    thread: the caller is the cluster actor, whose pulse keeps the workers alive. The futures: one per
    queued rollback or replacement."""
    job.probes.refresh(set(lost_spus))
    if job.ctx.exactly_once:
        return [queue_rollback(job, set(lost_spus), "a worker died")] if lost_spus else []
    job.lost_spus |= set(lost_spus)
    for unit in job.units.values():  # its operation is called off, or goes on without them (unit.py)
        unit.tell(SpusLost(frozenset(lost_spus)))
    futures = []
    for spec in job.topology.units:
        for spu in sorted(set(job.units[spec.name].ask(GetSpus())) & set(lost_spus)):
            futures.append(job.coordinator.submit(
                ScaleRequest("replace", spec.name, spu, None, None, "worker lost")))
    if futures and job.config.acking:
        _fail_trees_once_replaced(job, futures, lost_spus)
    return futures


def _fail_trees_once_replaced(job: Job, futures: list[Future], lost_spus: set[int]) -> None:
    """Once every lost SPU has its replacement (routes switched), fail the trees in flight: some died with
    the worker, and waiting message_timeout for them would stall every spout slot. A replacement that
    failed fails the job (its keys have no SPU)."""
    remaining = [len(futures)]
    lock = threading.Lock()

    def replaced(future: Future) -> None:
        error = future.exception()
        if error is not None:
            job.fail(f"an SPU lost with its worker could not be replaced: {error}")
        with lock:
            remaining[0] -= 1
            if remaining[0]:
                return
        try:
            job.ctx.acker.tell(FailPending(f"a worker died holding SPUs {sorted(lost_spus)}"))
        except Exception:  # noqa: BLE001 - the job is stopping
            pass

    for future in futures:
        future.add_done_callback(replaced)


def queue_rollback(job: Job, lost: set[int], reason: str) -> Future:
    """Roll every SPU back to the last completed checkpoint (control thread, before queued scaling).

    Never blocks the caller (the cluster actor, whose pulse keeps the workers alive): it aborts the
    checkpoint and any split or merge in flight and queues the rollback, which first checks that
    the lost SPUs were this job's. The job is not complete from this call until the rollback ran."""
    with job._recovery_lock:
        job._recovering += 1
    job.checkpoints.collector.abort(reason)
    for unit in job.units.values():
        unit.tell(AbortReconfiguration(reason))

    def recover() -> Any:
        try:
            # This job's SPUs among the lost: any it placed there, also a merge's retiring giver or a
            # split's new receiver that no unit lists as its SPU yet (or any more).
            placed = getattr(job.launcher, "worker_of", None)
            mine = {s for s in lost if placed is not None and placed(s) is not None}
            if not mine:
                return None
            job.wait_for_room(len(mine), f"the replacement of SPUs {sorted(mine)} ({reason})")
            return job._roll_back(frozenset(mine), f"{reason} holding SPUs {sorted(mine)}")
        finally:
            with job._recovery_lock:
                job._recovering -= 1

    return job.coordinator.run_task(recover, job.coordinator.URGENT)
