"""Stream joins with their SPUs in real worker processes: every pair exactly once through chain changes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from esault import LocalCluster
from esault.testing import reset_collected

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "integration"))
from test_joins import run_and_check_exactly_once  # noqa: E402
from topology_parts import DriverCollectorBolt  # noqa: E402

pytestmark = pytest.mark.system


@pytest.fixture
def workers():
    reset_collected()
    with LocalCluster(workers=2) as cluster:
        yield cluster
    reset_collected()


def test_every_pair_joins_exactly_once_on_worker_processes_while_chains_grow_shrink_and_keys_move(workers, config):
    # the predicate crosses to the workers by name; the collector stays in the driver
    run_and_check_exactly_once(workers, config.replace(guarantee="at_least_once"), odd="test_joins:odd_sum",
                               collector=DriverCollectorBolt)
    job = next(iter(workers.jobs.values()))
    hosts = {spu["worker"] for spu in job.final_status["units"]["j"]["spus"].values()}
    assert hosts and "driver" not in hosts, hosts  # the join SPUs ran in the worker processes
