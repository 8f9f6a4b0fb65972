"""Tells the driver the moment one of its local worker processes ends.

Why: the driver that started a worker on this machine can see it end, so
waiting for its heartbeats to stop (`heartbeat_timeout`, 10 s by default)
only delays the recovery. A local worker that ends is declared dead at once;
workers started elsewhere (a static cluster) are still found by their silence.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from typing import Callable

from esault.cluster.forker import ForkedProcess, call_when_ended


@dataclass(frozen=True)
class WorkerProcessExited:
    """Told to the driver's cluster actor in-process (never on the wire): the local worker `process`, OS pid
    `pid`, ended with exit code `code` (None: not known yet)."""

    process: str
    pid: int
    code: int | None


def watch_exit(process: subprocess.Popen | ForkedProcess, on_exit: Callable[[int | None], None]) -> None:
    """Call `on_exit(code)` once, on another thread, when `process` ends (at once if it has)."""
    if isinstance(process, ForkedProcess):
        process.add_exit_callback(on_exit)  # its zygote reports the exit
        return
    try:  # a child of this process: not reaped until it is waited for, so the pid is still its own
        pidfd = os.pidfd_open(process.pid)
    except OSError:  # reaped already
        on_exit(process.poll())
        return

    def ended() -> None:
        os.close(pidfd)
        on_exit(process.poll())

    call_when_ended(pidfd, ended, f"esault-exit-{process.pid}")
