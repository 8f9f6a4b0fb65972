"""CPU hogs for tests that must hold on a busy host: the machine's cores kept busy, for a bounded time.

`busy_cores()` starts one pure-Python spinning process per core, plus one (a load average above the core
count, as on the independent runs that found issue 48), each ending by itself after `seconds` at the latest
and stopped by its pid when the block ends.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator

SPIN = "import time, sys\nend = time.monotonic() + float(sys.argv[1])\nwhile time.monotonic() < end:\n    pass\n"


@contextlib.contextmanager
def busy_cores(seconds: float = 300.0, extra: int = 1) -> Iterator[list[int]]:
    """Keep every core busy while the block runs (at most `seconds`); yields the hogs' pids."""
    hogs = [subprocess.Popen([sys.executable, "-c", SPIN, str(seconds)], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL) for _ in range((os.cpu_count() or 1) + extra)]
    try:
        yield [h.pid for h in hogs]
    finally:
        for hog in hogs:
            if hog.poll() is None:
                hog.send_signal(signal.SIGKILL)
            hog.wait(30)
