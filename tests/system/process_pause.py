"""Stop a worker process for a while (SIGSTOP), so a protocol step that needs its answer certainly waits there."""

from __future__ import annotations

import os
import signal
from contextlib import contextmanager, suppress
from typing import Iterator


@contextmanager
def paused(pid: int) -> Iterator[None]:
    """The process is stopped for the block and runs again after it (unless it was killed meanwhile)."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
