"""How exceptions raised by user code (process(), next_tuple(), ack(), ...) reach the log.

A user error must be findable (its traceback, the file:line in the user's
code) but a flood of them must not drown the log or slow the SPU: the first
few are logged in full, then one line per period says how many came since.
Logging never raises into the caller: a user error fails one tuple or call,
never the SPU.
"""

from __future__ import annotations

import logging
import os
import time
import traceback
from typing import Callable

log = logging.getLogger("esault")

_ESAULT_DIR = os.path.dirname(os.path.abspath(__file__))  # frames outside it are the user's


def user_frame(exc: BaseException) -> str:
    """' at file:line' of the innermost frame in user code (outside esault), else the innermost frame."""
    frames = traceback.extract_tb(exc.__traceback__) if exc.__traceback__ else []
    for frame in reversed(frames):
        if not os.path.abspath(frame.filename).startswith(_ESAULT_DIR + os.sep):
            return f" at {frame.filename}:{frame.lineno}"
    return f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""


class UserErrorLog:
    """One per (unit, SPU, hook): the first `first` errors with their traceback, then a count every `every` s.

    Not thread-safe: each SPU calls its own from its actor thread.
    """

    def __init__(self, first: int = 5, every: float = 10.0, now: Callable[[], float] = time.monotonic) -> None:
        self.first = first
        self.every = every
        self.now = now
        self.count = 0
        self._reported = 0  # count at the last line logged
        self._last = 0.0  # when it was logged

    def __call__(self, msg: str, *args: object, exc: BaseException | None = None) -> None:
        """Log `msg % args` (with exc's traceback while within the first `first`); name the file:line in msg."""
        self.count += 1
        if self.count <= self.first:
            more = (f" (the first {self.first} are logged with their traceback; later ones are counted, one line "
                    f"every {self.every:g} s)") if self.count == self.first else ""
            self._log(msg + more, args, exc)
        elif self.now() - self._last >= self.every:
            since = self.count - self._reported
            self._log(msg + f" [{self.count} so far, {since} since the last report]", args, None)
        else:
            return
        self._reported = self.count
        self._last = self.now()

    def close(self, what: str) -> None:
        """At the SPU's stop: the total, if some were only counted."""
        if self.count > self._reported:
            self._log("%s: %d error(s) in total, %d not logged since the last report",
                      (what, self.count, self.count - self._reported), None)
            self._reported = self.count

    @staticmethod
    def _log(msg: str, args: tuple, exc: BaseException | None) -> None:
        # logging formats lazily and reports (never raises) a user repr() that fails
        log.error(msg, *args, exc_info=(type(exc), exc, exc.__traceback__) if exc is not None else None)
