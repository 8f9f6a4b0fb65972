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
