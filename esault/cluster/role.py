"""Which kind of esault process this is: a worker imports the topology's modules too.

A worker resolves each unit's class by importing the module that defines it,
so a topology file's module-level code runs once in the driver and once in
every worker process. `in_worker()` lets that code skip what belongs to the
driver only (creating tables, reading the input, printing).
"""

from __future__ import annotations

_in_worker = False


def in_worker() -> bool:
    """True inside an `esault worker` process (set before it imports any topology module)."""
    return _in_worker


def mark_worker() -> None:
    """Called once by the worker entry point, before anything is imported for a job."""
    global _in_worker
    _in_worker = True
