"""OS-level names for esault's threads, so `top -H`, `ps -L` and /proc/<pid>/task/*/comm tell them apart.

Python's thread names live in Python only: the kernel shows every thread of a worker under its process
name, so which SPU keeps a core busy took a profiler to find. Each long-lived esault thread names itself
as it starts (an SPU as "spu-<id> <unit>", the endpoint's I/O thread as "endpoint-<process>"), through the
setproctitle package that already sets the workers' process titles. The kernel keeps 15 bytes of a name.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

try:
    from setproctitle import setthreadtitle as _set_thread_title
except ImportError:  # pragma: no cover - a declared dependency; without it threads keep the process's name
    _set_thread_title = None

OS_NAME_BYTES = 15
"""What the kernel keeps of a thread's name (TASK_COMM_LEN - 1)."""


def os_thread_name(name: str) -> str:
    """`name` as the kernel will show it: without a leading "esault-", cut to 15 bytes of whole characters."""
    if name.startswith("esault-"):
        name = name[len("esault-"):]
    return name.encode("utf-8")[:OS_NAME_BYTES].decode("utf-8", "ignore")


def name_os_thread(name: str | None = None) -> None:
    """Name the calling thread at the OS level (default: its Python name); never raises: a name is a label."""
    if _set_thread_title is None:
        return
    try:
        _set_thread_title(os_thread_name(name or threading.current_thread().name))
    except Exception:  # noqa: BLE001 - an OS without thread names, say
        pass


def os_named(target: Callable[..., Any]) -> Callable[..., Any]:
    """`target` for threading.Thread, naming its thread after the Thread's name before it runs."""
    def run(*args: Any, **kwargs: Any) -> Any:
        name_os_thread()
        return target(*args, **kwargs)

    return run
