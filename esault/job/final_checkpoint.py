"""How an exactly_once job ends: at a final checkpoint that, for a completed job, records the end of its input.

Its own module because ending is a protocol of its own with the control
thread: a rollback (a worker dying, a checkpoint timing out) can run before or
during the final checkpoint and restart the spouts, so the checkpoint is taken
only while the job is complete, checked on the control thread just before the
barriers leave, and tried again (FINAL_ATTEMPTS) when a rollback cut it short.
Job.stop() calls it once; its verdict (a failure, or None) joins Job.failures.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

__all__ = ["FINAL_ATTEMPTS", "end_at_final_checkpoint"]

log = logging.getLogger("esault")

Job = Any
"""An esault.job.job.Job (not imported: job.py imports this module)."""

FINAL_ATTEMPTS = 5
"""Final checkpoints stop() tries while rollbacks (workers dying) cut them short."""


def end_at_final_checkpoint(job: Job) -> str | None:
    """End the spouts at a last checkpoint; None when that went as it should, else why not (the run fails).

    A job that completed (wait() returned True, or a rollback found it complete) must end with its input:
    its final checkpoint is taken only while the job is complete, checked on the control thread just before
    the barriers leave, so a rollback that restarted the spouts (a worker died, a checkpoint timed out) is
    first replayed to the end; a final checkpoint that still does not record the end of the input fails the
    run (exit 2), never passes for a success. A job stopped while it runs ends wherever its spouts are.
    A rollback during the checkpoint aborts it: the attempt is repeated."""
    checkpoints = job.checkpoints
    timeout = job.config.checkpoint_timeout + 10
    why = "see the log above"
    poll = threading.Event()
    again = object()  # an attempt that found the job not complete (any more): wait, then try again
    for _ in range(FINAL_ATTEMPTS):
        deadline = time.monotonic() + timeout
        while job.recovering and time.monotonic() < deadline:  # a queued rollback first: did it find
            poll.wait(0.05)                                       # the job complete?
        must_end = job.completion.claimed or job._complete_at_rollback
        if must_end and not job.wait(timeout * 4):
            why = "it did not complete again after a rollback" if not job.failures else "the job failed"
            break
        recoveries = len(checkpoints.stats.recoveries)

        def final(recoveries: int = recoveries, must_end: bool = must_end) -> Any:
            # A rollback can run first (it is urgent; this task may queue behind a checkpoint that a dead
            # worker holds): the spouts then resume from the restored checkpoint, and ending them at once
            # would cut that replay short. So can a checkpoint's timeout, on this thread. Try again instead.
            if len(checkpoints.stats.recoveries) != recoveries:
                return again
            if must_end and (job.recovering or not job._input_done()):
                return again
            return checkpoints.checkpoint("final", final=True)

        try:
            epoch = job.coordinator.run_task(final).result(timeout)
        except Exception as exc:  # noqa: BLE001 - reported below
            epoch, why = None, repr(exc)
        if epoch is not None and epoch is not again:
            if must_end and not checkpoints.input_ended:
                return input_not_covered(job, epoch)
            return None
        deadline = time.monotonic() + timeout
        while job.recovering and time.monotonic() < deadline:
            poll.wait(0.05)
        if epoch is None and len(checkpoints.stats.recoveries) == recoveries:
            break  # it failed for another reason: retrying would fail the same way
        checkpoints.ended = False
    if job.failure is not None:  # the final checkpoint found the state the job cannot keep: its verdict
        return None
    last = checkpoints.stats.last_epoch
    if checkpoints.failure is not None:
        return None  # the budget ran out during the final checkpoint: that message says it all
    if checkpoints.stats.last_failure is not None and why == "see the log above":
        why = checkpoints.stats.last_failure
    failure = checkpoints.explain(f"the job stopped without its final checkpoint ({why})")
    log.error("topology %r stopped without its final checkpoint (%s); a restart resumes from checkpoint %s "
              "and produces what came after it again", job.name, why, last)
    return failure


def input_not_covered(job: Job, epoch: int) -> str:
    """The verdict on a completed job whose final checkpoint does not record the end of its input."""
    checkpoints = job.checkpoints
    point = checkpoints.store.get(epoch)
    at = ", ".join(f"{unit}[{i}] at {p!r}" for unit, by in sorted((point.positions if point else {}).items())
                   for i, p in sorted(by.items())) or "no position"
    reason = (f"exactly_once: the job read its input to the end, but its final checkpoint {epoch} ended the spouts "
              f"before the end ({at}): the output of what they read after those positions is missing. That "
              f"checkpoint is consistent and the sinks published exactly what it covers (store "
              f"{checkpoints.store.path}): run the same command again: it resumes from checkpoint {epoch} "
              "and reads the rest")
    log.error("topology %r: %s", job.name, reason)
    return reason
