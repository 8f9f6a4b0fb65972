"""Splits that need a worker ask Ray for one, merges give it back, a killed node is replaced from Ray (issue 50).

A real local Ray autoscaling cluster (head with no CPU, 1-CPU nodes added and removed by Ray's autoscaler) and
a driver whose only source of workers is Ray (LocalCluster(ray=...)): every esault worker is a Ray actor on a
node of its own (one SPU a worker). Each scenario ends with every word counted exactly once.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

from esault.testing.ray_cluster import ray_cluster, use_loopback

use_loopback()  # before anything imports ray

from esault import JobConfig, LocalCluster  # noqa: E402
from esault.errors import ResourceError, ScalingError  # noqa: E402
from esault.testing import wait_until  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT / "tests" / "system"))
import eo_parts  # noqa: E402

pytestmark = [pytest.mark.system, pytest.mark.ray, pytest.mark.timeout(300)]

TOTAL = 3000


@pytest.fixture(scope="module")
def ray_nodes():
    with ray_cluster(max_nodes=3) as cluster:
        yield cluster


def config(tmp_path: Path) -> JobConfig:
    return JobConfig(data_dir=tmp_path / "data", elasticity=False, checkpoint_interval=1.0)


def on_ray(ray_nodes, **kwargs) -> LocalCluster:
    return LocalCluster(ray=ray_nodes.address, spus_per_worker=1, heartbeat_timeout=5.0, **kwargs)


def host_of(cluster: LocalCluster, spu: int) -> str:
    return next(w for w, spus in cluster.registry.spus_on.items() if spu in spus)


def test_splits_land_on_nodes_ray_adds_the_next_is_declined_when_none_fits_and_merges_give_them_back(
        ray_nodes, tmp_path):
    with on_ray(ray_nodes, release_after=2.0, worker_wait=90.0) as cluster:
        job = cluster.submit(eo_parts.build("ray-grow", TOTAL, rate=600, count_parallelism=1), config(tmp_path))
        # count and latest, one SPU a worker: a worker each on its node, or both packed onto the one that joined
        # in time, the start's reservation declined (a slow Ray) and saying so
        counts = cluster.registry.counts()
        packed = any(d.startswith("declined: the start of ray-grow") for d in cluster.capacity.declined)
        assert sorted(counts.values()) == ([2] if packed else [1, 1]), (
            counts, cluster.capacity.declined, cluster.registry.deaths,
            ray_nodes.autoscaler_said("Terminating the node", "Adding"))
        first = job.spus("count")[0]
        grown = []
        while ray_nodes.alive_nodes() < 3:  # a split a node, up to the cluster's 3
            (new,) = job.split("count", first, timeout=150).started
            grown.append(host_of(cluster, new))
            origin = cluster.capacity.origin(grown[-1])
            assert origin.provider == "ray" and origin.node.startswith("ray node "), origin
            assert len(grown) <= 2, f"a split added no node: {cluster.registry.counts()}"
        cluster.capacity.worker_wait = 8.0  # the cluster is at its 3 nodes: Ray places no further actor
        with pytest.raises(ScalingError, match=r"declined: split of ray-grow/count SPU \d+: no room for 1 new "
                                               r"SPU\(s\) within worker_wait=8s .*not joined: ray-\d+"):
            job.split("count", first, timeout=60)
        assert job.status()["capacity"]["declined"].startswith("declined: split of ray-grow/count")
        for spu in [s for s in job.spus("count") if host_of(cluster, s) in grown]:
            job.merge("count", spu)
        wait_until(lambda: not set(grown) & set(cluster.registry.workers), 30, message="the idle workers given back")
        wait_until(lambda: ray_nodes.alive_nodes() == 3 - len(grown), 90, interval=0.5,
                   message="their nodes removed by Ray")
        assert job.wait(180), job.status()
        job.stop()
        # No SPU left: every worker is given back after release_after, and Ray's autoscaler removes the nodes.
        wait_until(lambda: not cluster.registry.workers, 30, message="every worker given back")
        wait_until(lambda: ray_nodes.alive_nodes() == 0, 90, interval=0.5, message="every node removed")
    assert eo_parts.final_counts(job.data_dir) == eo_parts.oracle(TOTAL)


def test_a_killed_nodes_spus_are_recovered_onto_a_node_ray_adds_in_its_place(ray_nodes, tmp_path):
    with on_ray(ray_nodes, worker_wait=60.0) as cluster:
        job = cluster.submit(eo_parts.build("ray-kill", TOTAL, rate=600, count_parallelism=1), config(tmp_path))
        wait_until(lambda: job.checkpoints.stats.completed >= 2, 60, message="checkpoints on the Ray workers")
        victim = host_of(cluster, job.spus("count")[0])
        node = cluster.capacity.origin(victim).node.split()[2]
        os.kill(ray_nodes.raylet_pids()[node], signal.SIGKILL)  # the node dies with its raylet
        wait_until(lambda: victim in cluster.registry.lost, 60, message="the killed node's worker declared dead")
        wait_until(lambda: len(cluster.registry.workers) == 2, 120, message="a replacement worker from Ray")
        assert job.wait(180), job.status()
        assert job.checkpoints.stats.recoveries, "the job rolled back to its last checkpoint"
        replacement = host_of(cluster, job.spus("count")[0])
        assert replacement != victim and cluster.capacity.origin(replacement).provider == "ray"
        job.stop()
    assert eo_parts.final_counts(job.data_dir) == eo_parts.oracle(TOTAL)


def test_a_bad_ray_address_fails_at_the_clusters_start_naming_it(tmp_path):
    with pytest.raises(ResourceError, match=r"'127\.0\.0\.1:1'.*ray start --head"):
        LocalCluster(ray="127.0.0.1:1")
