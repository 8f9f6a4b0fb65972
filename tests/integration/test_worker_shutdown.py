"""A worker that leaves (Shutdown, or its driver went silent) exits within SHUTDOWN_GRACE even when its actors
cannot stop: a thread blocked sending to a peer that is gone kept workers of a killed driver running 25-40 s
past their driver timeout (issue 48)."""

from __future__ import annotations

import subprocess
import sys
import time

from esault.cluster.worker import SHUTDOWN_GRACE

STUCK = """
import threading, types
from esault.cluster import worker

blocked = threading.Event()  # never set: the host's stop waits as a send to a dead peer would
host = types.SimpleNamespace(stop=lambda block: blocked.wait())
postman = types.SimpleNamespace(close=lambda: None)
worker._shut_down("w9", 3, host, postman)
print("returned")
"""

CLEAN = """
import types
from esault.cluster import worker

host = types.SimpleNamespace(stop=lambda block: None)
postman = types.SimpleNamespace(close=lambda: None)
worker._shut_down("w9", 3, host, postman)
print("returned")
"""


def test_a_worker_whose_actors_cannot_stop_exits_with_its_code_after_the_grace_and_every_threads_stack():
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", STUCK], capture_output=True, text=True, timeout=60)
    took = time.monotonic() - started
    assert done.returncode == 3 and "returned" not in done.stdout
    assert "worker w9: its SPUs did not stop within 5 s of leaving" in done.stderr
    assert "Current thread" in done.stderr or "Thread 0x" in done.stderr, "every thread's stack is logged"
    assert SHUTDOWN_GRACE <= took < SHUTDOWN_GRACE + 30


def test_a_worker_whose_actors_stop_returns_from_its_shutdown():
    done = subprocess.run([sys.executable, "-c", CLEAN], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "returned" in done.stdout, done.stderr
