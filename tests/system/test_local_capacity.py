"""The local pool grows when a split finds no worker with room and gives idle workers back (issue 50).

Real worker processes forked by the driver, killed with SIGKILL at each step of the protocol: a worker
asked for and dead before it joined, a new worker dead as its SPU starts, a grown worker dead mid-stream,
a worker dead while it is given back. Every run ends with every word counted exactly once.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

from esault import JobConfig, LocalCluster
from esault.cluster.providers.local import LocalPoolProvider
from esault.errors import ConfigError, ScalingError
from esault.testing import wait_until

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT / "tests" / "system"))
import eo_parts  # noqa: E402

pytestmark = pytest.mark.system

TOTAL = 3000  # sentences: 30,000 words


def config(tmp_path: Path) -> JobConfig:
    return JobConfig(data_dir=tmp_path / "data", elasticity=False, checkpoint_interval=1.0)


def host_of(cluster: LocalCluster, spu: int) -> str:
    return next(w for w, spus in cluster.registry.spus_on.items() if spu in spus)


def exact(job) -> bool:
    return eo_parts.final_counts(job.data_dir) == eo_parts.oracle(TOTAL)


def test_splits_grow_the_pool_up_to_max_workers_then_are_declined_and_merges_give_the_workers_back(tmp_path):
    with LocalCluster(workers=3, max_workers=5, spus_per_worker=1, release_after=2.0, worker_wait=30.0) as cluster:
        job = cluster.submit(eo_parts.build("grow", TOTAL, rate=1500), config(tmp_path))
        assert cluster.registry.counts() == {"w1": 1, "w2": 1, "w3": 1}  # count 2 + latest 1: one SPU each
        first = job.spus("count")[0]
        grown = []
        for _ in range(2):
            result = job.split("count", first)
            (new,) = result.started
            grown.append(host_of(cluster, new))
        assert len(set(grown)) == 2 and not {"w1", "w2", "w3"} & set(grown), grown
        assert {cluster.capacity.origin(w).provider for w in grown} == {"local"}
        with pytest.raises(ScalingError, match=r"declined: split of grow/count SPU \d+: 1 more worker\(s\) needed "
                                               r".*ceiling of 5 worker process\(es\); raise max_workers"):
            job.split("count", first)
        view = job.status()["capacity"]
        assert view["provider"] == "local" and view["declined"].startswith("declined: split of grow/count")
        assert sorted(row["worker"] for row in view["workers"]) == sorted(["w1", "w2", "w3", *grown])
        for spu in job.spus("count"):
            if host_of(cluster, spu) in grown:
                job.merge("count", spu)
        wait_until(lambda: sorted(cluster.registry.counts()) == ["w1", "w2", "w3"], 30,
                   message="the idle workers given back")
        assert sorted(cluster.capacity.released) == sorted(grown)
        assert cluster.registry.lost == []  # given back, not dead
        assert job.wait(120), job.status()
        job.stop()
    assert exact(job)


def test_a_fixed_pool_packs_a_split_onto_its_workers_as_before(tmp_path):
    with LocalCluster(workers=2) as cluster:
        job = cluster.submit(eo_parts.build("fixed", TOTAL, rate=1500), config(tmp_path))
        job.split("count", job.spus("count")[0])
        assert sorted(cluster.registry.counts()) == ["w1", "w2"] and cluster.capacity.provider.kind == "local"
        assert job.wait(120), job.status()
        job.stop()
    assert exact(job)


class KillsWhatItStarts(LocalPoolProvider):
    """The local pool, with the process of each worker it is asked for killed (SIGKILL) as soon as it starts:
    a worker dead before its hello."""

    def request(self, request) -> None:
        super().request(request)
        os.kill(self.pool.processes[-1].pid, signal.SIGKILL)


def test_a_worker_killed_before_it_joins_is_asked_for_again_then_the_split_is_declined_and_the_job_goes_on(
        tmp_path):
    with LocalCluster(workers=1, spus_per_worker=3, worker_wait=30.0) as cluster:
        cluster.capacity.provider = KillsWhatItStarts(cluster.pool, 2)
        job = cluster.submit(eo_parts.build("unborn", TOTAL, rate=1500), config(tmp_path))
        with pytest.raises(ScalingError, match=r"declined: split of unborn/count SPU \d+: the worker\(s\) asked for "
                                               r"ended before they joined, 4 times"):
            job.split("count", job.spus("count")[0], timeout=60)
        assert len(cluster.pool.names) == 1 + 4  # w1, then the first ask and three again, each killed at once
        assert cluster.capacity.pending == {} and list(cluster.registry.counts()) == ["w1"]
        assert job.wait(120), job.status()
        job.stop()
    assert exact(job)


@pytest.mark.parametrize("when", ["as its SPU starts", "mid-stream"])
def test_a_grown_worker_killed_rolls_back_exactly(tmp_path, when):
    with LocalCluster(workers=1, max_workers=2, spus_per_worker=3, heartbeat_timeout=5.0) as cluster:
        job = cluster.submit(eo_parts.build("killed", TOTAL, rate=1500), config(tmp_path))
        wait_until(lambda: job.checkpoints.stats.completed >= 1, 60, message="a first checkpoint")
        first = job.spus("count")[0]
        if when == "as its SPU starts":  # SIGKILL the new worker the moment it joined: its SPU is starting
            killer = _kill_on_join(cluster)
            try:
                job.split("count", first)
            except ScalingError:
                pass  # aborted with the worker: nothing moved
            killer.join(30)
        else:
            (new,) = job.split("count", first).started
            wait_until(lambda: job.checkpoints.stats.completed >= 3, 60, message="checkpoints after the split")
            os.kill(cluster.registry.pids[host_of(cluster, new)], signal.SIGKILL)
        wait_until(lambda: len(cluster.registry.lost) == 1, 30, message="the grown worker declared dead")
        assert job.wait(180), job.status()
        job.stop()
    assert exact(job)


def _kill_on_join(cluster: LocalCluster):
    import threading

    def watch() -> None:
        wait_until(lambda: len(cluster.registry.workers) > 1, 30, message="the new worker's hello")
        new = next(w for w in cluster.registry.workers if w != "w1")
        os.kill(cluster.registry.pids[new], signal.SIGKILL)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def test_a_worker_killed_while_it_is_given_back_is_no_loss(tmp_path):
    with LocalCluster(workers=1, max_workers=2, spus_per_worker=3, release_after=1.0) as cluster:
        job = cluster.submit(eo_parts.build("leaving", TOTAL, rate=1500), config(tmp_path))
        (new,) = job.split("count", job.spus("count")[0]).started
        worker = host_of(cluster, new)
        pid = cluster.registry.pids[worker]
        job.merge("count", new)
        wait_until(lambda: worker in cluster.registry.leaving, 30, message="the idle worker told to exit")
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass  # it exited first
        assert job.wait(120), job.status()
        assert cluster.registry.lost == [] and worker not in cluster.registry.workers
        job.stop()
    assert exact(job)


@pytest.mark.parametrize("kwargs, message", [
    ({"workers": 2, "max_workers": 1}, "max_workers=1 needs workers=N"),
    ({"workers": 0, "max_workers": 3}, "max_workers=3 needs workers=N"),
    ({"workers": 1, "spus_per_worker": 0}, "spus_per_worker must be a whole number >= 1"),
])
def test_bad_capacity_settings_fail_before_any_worker_starts(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        LocalCluster(**kwargs)
