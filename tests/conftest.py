"""Fixtures shared by every layer: a LocalCluster that is always shut down, a data dir."""

from __future__ import annotations

import logging

import pytest

from esault import JobConfig, LocalCluster
from esault.testing import reset_collected


@pytest.fixture
def cluster():
    reset_collected()
    with LocalCluster() as c:
        yield c
    reset_collected()


@pytest.fixture
def config(tmp_path):
    """A job config writing under the test's tmp dir, automatic scaling off (tests that want it turn it on)."""
    return JobConfig(data_dir=tmp_path / "data", message_timeout=30.0, elasticity=False)


@pytest.fixture(autouse=True)
def _quiet_user_errors(caplog):
    caplog.set_level(logging.CRITICAL, logger="esault")


def pytest_sessionfinish(session, exitstatus):
    """Fail, never hang, when a test left an actor or other non-daemon thread running.

    Such a thread keeps the interpreter from exiting after the last test, so CI
    would sit until its own timeout. Name the leftovers (with their stacks),
    fail the session, then stop every actor so the process can exit.
    """
    import sys
    import threading
    import traceback

    import pykka

    def leftovers():
        return [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon and t.is_alive()]

    deadline = threading.Event()
    for _ in range(100):  # up to 10 s for actors that are still stopping
        if not leftovers():
            return
        deadline.wait(0.1)
    frames = sys._current_frames()
    report = ["tests left non-daemon threads running (a job or cluster not stopped?):"]
    for thread in leftovers():
        report.append(f"--- {thread.name}")
        report.extend(line.rstrip() for line in traceback.format_stack(frames.get(thread.ident)) if thread.ident in frames)
    sys.stderr.write("\n".join(report) + "\n")
    session.exitstatus = 1
    pykka.ActorRegistry.stop_all(block=True, timeout=10)
