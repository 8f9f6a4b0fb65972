"""Stream joins with their SPUs in real worker processes: every pair exactly once through chain changes (keyed
mode: chains per key inside PEs; chain mode: the chain's workers are SPUs in different processes)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from esault import LocalCluster
from esault.testing import reset_collected

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "integration"))
from test_join_chain_spus import run_grow_and_shrink  # noqa: E402
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


@pytest.mark.parametrize("guarantee", ["exactly_once", "none"])
def test_a_chain_over_two_worker_processes_joins_every_pair_once_while_it_grows_and_shrinks(workers, config,
                                                                                           guarantee):
    """mode="chain": ChainLink messages cross pyzmq between neighbouring SPUs in different processes."""
    job = run_grow_and_shrink(workers, config.replace(guarantee=guarantee, checkpoint_interval=0.3),
                              odd="test_join_chain_spus:odd_sum", collector=DriverCollectorBolt)
    hosts = {spu["worker"] for spu in job.final_status["units"]["j"]["spus"].values()}
    assert len(hosts) == 2 and "driver" not in hosts, hosts  # neighbours in different processes
