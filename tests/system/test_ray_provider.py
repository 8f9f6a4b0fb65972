"""esault workers as Ray actors, on a real local Ray autoscaling cluster (a head with no CPU, 1-CPU nodes added
and removed by Ray's autoscaler): they join a driver, run a job, leave with their nodes, and a killed node's
worker is reported dead by Ray before its process ends. One cluster for the module: its start is the cost."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from esault.testing.ray_cluster import RayTestCluster, alive, free_port, ray_cluster, use_loopback

use_loopback()  # before anything imports ray: this process's ray.init then stays on 127.0.0.1 too

from esault import LocalCluster  # noqa: E402
from esault.cluster.exit_watch import WorkerProcessExited  # noqa: E402
from esault.cluster.providers.base import WorkerRequest  # noqa: E402
from esault.cluster.providers.ray import RayProvider  # noqa: E402
from esault.errors import ResourceError  # noqa: E402
from esault.messages.cluster import Shutdown  # noqa: E402
from esault.testing import run_to_completion, wait_until  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "integration"))
from test_run_to_completion import assert_counted, counting_topology, keyed_items  # noqa: E402

pytestmark = [pytest.mark.system, pytest.mark.ray, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def ray_nodes():
    started = time.monotonic()
    with ray_cluster(max_nodes=2) as cluster:
        print(f"ray head up in {time.monotonic() - started:.1f} s")
        yield cluster


@pytest.fixture(scope="module")
def driver(ray_nodes):
    """A driver with no local worker: every worker of this module comes from Ray."""
    with LocalCluster(listen="127.0.0.1:0") as cluster:
        yield cluster


class Exits:
    """on_exit's reports, forwarded to the driver as a local pool's are, each with when it came."""

    def __init__(self, driver: LocalCluster) -> None:
        self.driver = driver
        self.seen: dict[str, tuple[WorkerProcessExited, float]] = {}
        self._lock = threading.Lock()

    def __call__(self, ended: WorkerProcessExited) -> None:
        with self._lock:
            self.seen[ended.process] = (ended, time.monotonic())
        self.driver._worker_exited(ended)


def tell_to_exit(driver: LocalCluster, worker: str) -> None:
    """What the driver does before it releases a worker: mark it leaving, send it Shutdown."""
    driver.registry.leaving.add(worker)
    driver.postman.send(worker, "host", Shutdown(), timeout=2.0)


def test_two_ray_workers_join_run_a_keyed_count_exactly_and_leave_with_their_nodes(ray_nodes, driver, config):
    exits = Exits(driver)
    provider = RayProvider(driver.postman, ray_nodes.address, num_cpus=1, on_exit=exits)
    try:
        asked = time.monotonic()
        for name in ("r1", "r2"):
            provider.request(WorkerRequest(name, "test: two workers"))
        assert time.monotonic() - asked < 5, "request() returns at once; Ray places the actors meanwhile"
        assert driver.registry.wait_for(2, 90), f"joined: {sorted(driver.registry.workers)}"
        joined = time.monotonic() - asked
        origins = {name: wait_until(lambda n=name: (o := provider.origin(n)) and o.node != "placing" and o, 30)
                   for name in ("r1", "r2")}
        assert all(o.provider == "ray" and o.node.startswith("ray node ") and " at 127.0.0.1" in o.node
                   for o in origins.values()), origins
        assert len({o.node for o in origins.values()}) == 2, "one 1-CPU node each: the autoscaler added two"
        assert ray_nodes.alive_nodes() == 2

        items = keyed_items(300)
        result = run_to_completion(counting_topology("ray-count", items), cluster=driver, config=config, timeout=60)
        assert_counted(result, items)
        assert sorted(s["worker"] for s in result.status["units"]["count"]["spus"].values()) == ["r1", "r2"]

        pids = {name: driver.registry.pids[name] for name in ("r1", "r2")}
        left = time.monotonic()
        for name in ("r1", "r2"):
            tell_to_exit(driver, name)
            provider.release(name)
        wait_until(lambda: set(exits.seen) == {"r1", "r2"}, 30, message="both workers' ends reported")
        assert {n: (e.pid, e.code) for n, (e, _) in exits.seen.items()} == {n: (p, 0) for n, p in pids.items()}
        wait_until(lambda: provider.workers() == [], 30, message="both actors ended")
        wait_until(lambda: not any(alive(pid) for pid in pids.values()), 30, message="their processes ended")
        wait_until(lambda: ray_nodes.alive_nodes() == 0, 90, interval=0.5, message="the idle nodes removed")
        print(f"ray: 2 workers joined {joined:.1f} s after request; nodes removed {time.monotonic() - left:.1f} s "
              "after release")
    finally:
        provider.shutdown()


def test_max_workers_is_a_ceiling_cannot_grow_names(ray_nodes, driver, monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", ray_nodes.address)  # what "auto" finds off a node of the cluster
    provider = RayProvider(driver.postman, "auto", max_workers=1)
    try:
        assert provider.cannot_grow(0) is None
        reason = provider.cannot_grow(1)
        assert reason is not None and "max_workers=1" in reason and "1 worker(s)" in reason
        other = f"127.0.0.1:{free_port()}"
        with pytest.raises(ResourceError, match=r"connected to the Ray cluster at 127\.0\.0\.1:\d+ already, not "
                                                rf"'{other}': one process can use one Ray cluster"):
            RayProvider(driver.postman, other)
    finally:
        provider.shutdown()
    assert provider.cannot_grow(0) == "the Ray provider is shut down"


@pytest.mark.parametrize("form", ["HOST:PORT", "ray://HOST:PORT", "nonsense"])
def test_a_bad_ray_address_fails_at_construction_naming_it_and_what_to_do(driver, form):
    # The port is picked in the test, not in its id: pytest-xdist's workers must collect the same test names.
    address = form.replace("HOST:PORT", f"127.0.0.1:{free_port()}")
    started = time.monotonic()
    with pytest.raises(ResourceError, match="ray start --head") as caught:
        RayProvider(driver.postman, address)
    assert repr(address) in str(caught.value)
    assert time.monotonic() - started < 10


def test_a_killed_nodes_worker_ends_with_its_raylet_and_is_reported_dead_within_seconds(ray_nodes, driver):
    exits = Exits(driver)
    provider = RayProvider(driver.postman, ray_nodes.address, on_exit=exits)
    try:
        provider.request(WorkerRequest("r3", "test: a worker on a node to kill"))
        wait_until(lambda: "r3" in driver.registry.workers, 90, interval=0.05, message="r3 joining")
        origin = wait_until(lambda: (o := provider.origin("r3")) and o.node != "placing" and o, 30)
        node = origin.node.split()[2]
        pid = provider._placed["r3"].pid
        raylet = ray_nodes.raylet_pids()[node]
        killed = time.monotonic()
        os.kill(raylet, signal.SIGKILL)
        wait_until(lambda: "r3" in exits.seen, 60, interval=0.05, message="Ray reporting the actor dead")
        ended, when = exits.seen["r3"]
        reported = when - killed
        still_running = alive(pid)
        wait_until(lambda: "r3" in driver.registry.lost, 10, message="the driver declaring r3 dead")
        assert ended.pid == pid and ended.code is None, ended
        print(f"ray: raylet killed -> on_exit after {reported:.1f} s (worker process still running then: "
              f"{still_running}); the driver declared it dead at once")
        # Ray alone: the GCS declares the node dead after ~15 s, the actor's process ends ~27 s after the kill.
        assert reported < 10, f"Ray reported the killed node's worker {reported:.1f} s after the kill"
        assert not still_running, "the worker ended with its raylet, not ~27 s later"
    finally:
        provider.shutdown()

