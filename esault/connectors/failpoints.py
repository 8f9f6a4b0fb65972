"""Crash points of the Kafka connectors' protocols, for the kill -9 tests (set by environment variable).

`<step>`: SIGKILL this process the first time the protocol reaches <step> (a worker crash there).
`<step>@<pid>`: SIGKILL process <pid> instead, once: the broker's crash at that step, which the test then
starts again. The pid must be a tansu broker's (its /proc cmdline says so), so a stale variable can never kill
another process that reused the number.
"""

from __future__ import annotations

import logging
import os
import signal
from typing import Callable

__all__ = ["SINK_FAILPOINT_ENV", "SOURCE_FAILPOINT_ENV", "failpoint_from_env"]

SINK_FAILPOINT_ENV = "ESAULT_KAFKA_SINK_FAILPOINT"
"""KafkaSink's publish steps: "staged", "produced", "committing", "committed"."""

SOURCE_FAILPOINT_ENV = "ESAULT_KAFKA_SOURCE_FAILPOINT"
"""KafkaSource's steps: "committing" (a completed checkpoint's offsets about to be committed to the group);
a live rescale's "releasing" (told to give partitions up, still reading them) and "released" (stopped reading
them, their acked watermarks not handed over yet)."""


def failpoint_from_env(variable: str, log: logging.Logger) -> Callable[[str, int], None] | None:
    """The crash point `variable` names, as a callable (step, epoch), or None when it is unset."""
    spec = os.environ.get(variable)
    if not spec:
        return None
    step, _, target = spec.partition("@")
    victim = int(target) if target.isdigit() else None
    fired = False

    def hit(at: str, epoch: int) -> None:
        nonlocal fired
        if at != step or fired:
            return
        fired = True
        if victim is None:
            log.warning("failpoint %s at epoch %d: SIGKILL of this process", at, epoch)
            os.kill(os.getpid(), signal.SIGKILL)
        elif _is_a_broker(victim):
            log.warning("failpoint %s at epoch %d: SIGKILL of the broker (pid %d)", at, epoch, victim)
            os.kill(victim, signal.SIGKILL)

    return hit


def _is_a_broker(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"tansu" in f.read()
    except OSError:
        return False
