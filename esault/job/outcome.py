"""How a run ended, as an exit code and a summary a person (or a script) can act on.

A run that lost, gave up or never read part of its input must not look like
success: `judge_run` turns a finished job's final status into the problems it
had and the exit code that says which kind. Pure: no actors, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Any


class ExitCode(IntEnum):
    """The exit codes of `esault` commands (README, "Exit codes")."""

    OK = 0
    """Every tuple the spouts emitted was processed; none was lost or dead-lettered."""
    INCOMPLETE = 1
    """The job ran but did not process all its input, or may not have written all its output: it timed out, a
    spout stopped by errors, tuples were lost or dead-lettered, a finish() or close() raised. The summary says what and
    where."""
    NOT_STARTED = 2
    """Nothing ran, or the job could not go on as declared: bad arguments, configuration or topology, a
    unit that could not start (its open() raised, its params cannot reach a worker, no worker joined, a
    damaged checkpoint store), no worker left to take a lost SPU back, a state exactly_once must
    checkpoint that cannot be saved, or exactly_once checkpoints that cannot be made durable
    (tolerable_checkpoint_failures spent, a full disk), a final checkpoint that failed or, after the job had
    completed, did not record the end of its input, or a worker that does not see the driver's checkpoint
    store (Job.failures; the message says what is committed and how to resume)."""
    NO_DRIVER = 3
    """`esault worker`: the driver could not be reached within --connect-timeout, or went silent."""
    STUCK_SPU = 4
    """`esault worker`: an SPU did not stop within --stop-timeout; the log holds every thread's stack."""
    INTERRUPTED = 130
    """Ctrl-C."""


@dataclass(frozen=True, slots=True)
class RunOutcome:
    """The verdict on one run: what went wrong (empty when nothing did) and the exit code."""

    problems: tuple[str, ...]
    exit_code: ExitCode

    @property
    def ok(self) -> bool:
        return self.exit_code is ExitCode.OK


def judge_run(status: dict[str, Any], completed: bool, *, timeout: float | None, duration: float | None,
              dead_letter_path: str, timeout_option: str = "--timeout") -> RunOutcome:
    """The outcome of a run from the job's final status (Job.final_status).

    `completed`: Job.wait() returned True (or, with `duration`, the job was
    stopped on time, which is how a --duration run ends). `timeout_option`:
    how the caller names its timeout in the summary.
    """
    problems: list[str] = []
    failures = list(status.get("failures") or ())
    problems.extend(failures)
    for error in status.get("spout_errors") or ():
        problems.append(error)
    units = status.get("units", {})
    emitted = sum(u.get("emitted", 0) for u in units.values())
    processed = sum(u.get("processed", 0) for u in units.values() if u.get("kind") == "bolt")
    if not completed and duration is None and not status.get("spout_errors") and not failures:
        # With tracking on, a tuple lost with a worker is replayed (or rolled back): a job that completes
        # lost nothing. Without it (guarantee "none") lost tuples keep it from completing: they show here.
        waited = f" within {timeout:g} s ({timeout_option})" if timeout is not None else ""
        problems.append(f"the job did not complete{waited}: {processed} of {emitted} emitted tuples were "
                        f"processed (the rest are still queued or were lost), {status.get('pending_trees', 0)} "
                        "tuple tree(s) still in flight")
    unaccounted = status.get("unaccounted", 0)
    if unaccounted:
        problems.append(f"{unaccounted} emitted tuple(s) were never processed: worker process(es) died holding "
                        f"SPUs {status.get('lost_spus', [])} and guarantee 'none' does not replay; run with "
                        "--guarantee at_least_once or exactly_once to replay what a dead worker held")
    closing = status.get("close_errors") or {}
    if closing:
        where = ", ".join(f"{unit} {n}" for unit, n in sorted(closing.items()))
        problems.append(f"finish() or close() raised {sum(closing.values())} time(s) ({where}): what those bolts or "
                        "spouts emit or write at the end (final results, a last flush) may be missing; the log has "
                        "each error")
    dead = status.get("dead_letters", 0)
    if dead:
        per_unit = ", ".join(f"{name} {u['dead_letters']}" for name, u in units.items() if u.get("dead_letters"))
        problems.append(f"{dead} tuple(s) dead-lettered ({per_unit or 'by the spouts'}): each failed every retry; "
                        f"they, their errors and file:line are in {dead_letter_path}")
    missing = status.get("output_missing") or {}
    if missing:  # exactly-once sinks that found rows of committed epochs missing from their output
        where = ", ".join(f"{unit} {n}" for unit, n in sorted(missing.items()))
        problems.append(f"exactly_once: {sum(missing.values())} row(s) that committed checkpoints sent to sinks are "
                        f"not in their output ({where}); the log names each sink, its table and its counts")
    if failures or missing:
        return RunOutcome(tuple(problems), ExitCode.NOT_STARTED)
    return RunOutcome(tuple(problems), ExitCode.INCOMPLETE if problems else ExitCode.OK)
