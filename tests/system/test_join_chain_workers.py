"""A join chain whose SPUs run in different worker processes: ChainLink messages cross pyzmq, the chain grows
and shrinks at its tail, and every pair comes out exactly once."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from esault import LocalCluster
from esault.testing import reset_collected

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "integration"))
from test_join_chain_spus import run_grow_and_shrink  # noqa: E402
from topology_parts import DriverCollectorBolt  # noqa: E402

pytestmark = pytest.mark.system


@pytest.fixture
def workers():
    reset_collected()
    with LocalCluster(workers=2) as cluster:
        yield cluster
    reset_collected()


@pytest.mark.parametrize("guarantee", ["exactly_once", "none"])
def test_a_chain_over_two_worker_processes_joins_every_pair_once_while_it_grows_and_shrinks(workers, config,
                                                                                           guarantee):
    job = run_grow_and_shrink(workers, config.replace(guarantee=guarantee, checkpoint_interval=0.3),
                              odd="test_join_chain_spus:odd_sum", collector=DriverCollectorBolt)
    hosts = {spu["worker"] for spu in job.final_status["units"]["j"]["spus"].values()}
    assert len(hosts) == 2 and "driver" not in hosts, hosts  # neighbours in different processes
