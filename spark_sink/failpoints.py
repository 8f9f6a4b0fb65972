"""Failpoints: named places in the commit protocol where a test can crash the writer.

Set ESAULT_SINK_FAILPOINT="<step>[:<action>[:<nth>]]" (or pass a Failpoint to
BatchWriter) to crash at a step: action "kill" sends SIGKILL to this process
(a real crash: no finally blocks, no flush), "raise" raises InjectedCrash; nth
counts hits of that step (default 1st). Steps, in protocol order, are STEPS.
Unset, a failpoint costs one attribute check per step.
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Callable

from esault.errors import ConfigError

FAILPOINT_ENV = "ESAULT_SINK_FAILPOINT"

STEPS = ("before-stage", "staged", "begun", "published", "committed")
"""before-stage: nothing written yet. staged: Parquet files complete in the
staging dir. begun: "begin" record durable. published: the batch directory
renamed into the table (visible), log not yet saying "commit". committed: log
says "commit", the caller has not been told yet."""

Failpoint = Callable[[str, str], None]
"""Called as failpoint(step, batch_id) at each step."""


class InjectedCrash(RuntimeError):
    """Raised by a "raise" failpoint."""


class StepFailpoint:
    """Crash (kill or raise) the nth time the writer reaches `step`."""

    def __init__(self, step: str, action: str = "raise", nth: int = 1) -> None:
        if step not in STEPS:
            raise ConfigError(f"{FAILPOINT_ENV}: unknown step {step!r}; steps are {', '.join(STEPS)}")
        if action not in ("kill", "raise"):
            raise ConfigError(f"{FAILPOINT_ENV}: action must be 'kill' or 'raise', got {action!r}")
        if nth < 1:
            raise ConfigError(f"{FAILPOINT_ENV}: nth must be >= 1, got {nth!r}")
        self.step, self.action, self.nth = step, action, nth
        self.hits = 0
        self._lock = threading.Lock()

    def __call__(self, step: str, batch_id: str) -> None:
        if step != self.step:
            return
        with self._lock:
            self.hits += 1
            fire = self.hits == self.nth
        if not fire:
            return
        if self.action == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        raise InjectedCrash(f"injected crash at step {step!r} of batch {batch_id}")


def from_env(environ: dict[str, str] | None = None) -> StepFailpoint | None:
    spec = (os.environ if environ is None else environ).get(FAILPOINT_ENV, "").strip()
    if not spec:
        return None
    parts = spec.split(":")
    if len(parts) > 3:
        raise ConfigError(f"{FAILPOINT_ENV}={spec!r}: write '<step>[:kill|raise[:<nth>]]', e.g. 'published:kill'")
    step = parts[0]
    action = parts[1] if len(parts) > 1 else "raise"
    try:
        nth = int(parts[2]) if len(parts) > 2 else 1
    except ValueError:
        raise ConfigError(f"{FAILPOINT_ENV}={spec!r}: nth must be a whole number") from None
    return StepFailpoint(step, action, nth)
