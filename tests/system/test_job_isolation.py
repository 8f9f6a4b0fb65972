"""Jobs on one cluster are isolated: a job refused at submit, whatever step refuses it, leaves behind nothing
that belongs to another job, and the job running beside it stays exact (every pair once, no rollback)."""

from __future__ import annotations

import sys
import threading
from collections import Counter
from pathlib import Path

import pytest

from esault import ConfigError, LocalCluster, TopologyBuilder, TopologyError
from esault.errors import UnitStartError
from esault.datapath.context import job_actor
from esault.testing import ListSpout, collected, reset_collected, wait_until

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "integration"))
from test_joins import STAGES, StagedSpout, make_stream  # noqa: E402
from topology_parts import DriverCollectorBolt  # noqa: E402
from isolation_parts import DriverOpenFailsBolt, ForwardOnlySpout, OpenFailsBolt  # noqa: E402

pytestmark = pytest.mark.system

WINDOW = 15


def driver_only(r: dict, s: dict) -> bool:
    """A predicate the driver can import as __main__:driver_only and its worker processes cannot."""
    return r["k"] == s["k"]


@pytest.fixture
def workers(monkeypatch):
    monkeypatch.setattr(sys.modules["__main__"], "driver_only", driver_only, raising=False)
    reset_collected()
    with LocalCluster(workers=2) as cluster:
        yield cluster
    reset_collected()


def keyed_join(name: str, lefts: list, rights: list, stage: str, holds: list) -> TopologyBuilder:
    b = TopologyBuilder(name)
    b.set_spout("orders", StagedSpout, params={"items": lefts, "stage": stage, "holds": holds})
    b.set_spout("payments", StagedSpout, params={"items": rights, "stage": stage, "holds": holds})
    b.join("j", "orders", "payments", on="k", window=WINDOW, zeta=3, workers=2, parallelism=2, pe_idle_timeout=0.3)
    b.set_bolt("out", DriverCollectorBolt, params={"name": name}).global_grouping("j")
    return b


def join_with(name: str, mode: str, kind: str) -> TopologyBuilder:
    """A join whose units are named like the running job's ("orders", "j", "out")."""
    items = make_stream(50, 9)
    b = TopologyBuilder(name)
    b.set_spout("orders", ListSpout, params={"items": items})
    b.set_spout("payments", ListSpout, params={"items": items})
    b.join("j", "orders", "payments", window=WINDOW, kind=kind, parallelism=2, mode=mode)
    b.set_bolt("out", DriverCollectorBolt, params={"name": name}).global_grouping("j")
    return b


def with_bolt(name: str, cls: type, spout: type = ListSpout, **params) -> TopologyBuilder:
    b = TopologyBuilder(name)
    b.set_spout("orders", spout, **({"params": {"items": [["a", 1]]}} if spout is ListSpout else {}))
    b.set_bolt("j", cls, 2, params=params, chain=False).shuffle_grouping("orders")  # one instance per SPU: opened at start
    b.set_bolt("out", DriverCollectorBolt, params={"name": name}).global_grouping("j")
    return b


def expected_pairs(lefts: list, rights: list) -> Counter:
    return Counter((lk, r["id"], s["id"]) for lk, r in lefts for rk, s in rights
                   if lk == rk and r["k"] == s["k"] and abs(r["ts"] - s["ts"]) <= WINDOW)


def refusals(config):
    """(what, topology, config, the error, what its message says): each refused at submit."""
    lock = threading.Lock()
    return [
        ("a chain join whose predicate only the driver imports", join_with("r1", "chain", "__main__:driver_only"),
         config, UnitStartError, r"unit 'j' cannot start on worker w\d: .*cannot import predicate '__main__:driver_only'"),
        ("a keyed join whose predicate only the driver imports", join_with("r2", "keyed", "__main__:driver_only"),
         config, UnitStartError, r"unit 'j' cannot start on worker w\d: .*cannot import predicate '__main__:driver_only'"),
        ("a bolt whose open() raises on a worker", with_bolt("r3", OpenFailsBolt), config, UnitStartError,
         "never opens"),
        ("a bolt whose open() raises in the driver", with_bolt("r4", DriverOpenFailsBolt), config, UnitStartError,
         "never opens"),
        ("a param that cannot reach a worker", with_bolt("r5", OpenFailsBolt, lock=lock), config, UnitStartError,
         "cannot be sent to the worker"),
        ("a spout that cannot rewind under exactly_once", with_bolt("r8", OpenFailsBolt, spout=ForwardOnlySpout),
         config, ConfigError, "cannot rewind"),
        ("a chain join under at_least_once", join_with("r6", "chain", "equi"),
         config.replace(guarantee="at_least_once"), ConfigError, "at_least_once could lose them"),
        ("a checkpoint to restore that is not there", join_with("r7", "keyed", "equi"),
         config.replace(restore_from=424242), ConfigError, "no completed checkpoint 424242"),
        ("the running job's own name", join_with("pairs", "keyed", "equi"), config, TopologyError,
         "already running here"),
    ]


def test_every_job_refused_at_submit_leaves_the_job_running_beside_it_exact(workers, config):
    config = config.replace(checkpoint_interval=0.5)
    n = 300
    lefts, rights = make_stream(n, 1), make_stream(n, 2)
    STAGES["isolated"] = 0
    job = workers.submit(keyed_join("pairs", lefts, rights, "isolated", [n // 2, n]).build(), config)
    wait_until(lambda: job.checkpoints.stats.completed >= 1, 30, message="the running job's first checkpoint")
    for what, topology, job_config, error, says in refusals(config):
        with pytest.raises(error, match=says):
            workers.submit(topology.build(), job_config)
            pytest.fail(f"{what}: accepted")
        done = job.checkpoints.stats.completed
        wait_until(lambda: job.checkpoints.stats.completed >= done + 2, 30,
                   message=f"checkpoints of the running job after {what}")
        assert not job.checkpoints.stats.recoveries and not job.checkpoints.stats.failed, what
        on_workers = set().union(*workers.registry.spus_on.values())
        assert on_workers == set(job.spus("j")), f"after {what}: the workers host {on_workers}"
        refused = topology.build().name
        if refused != job.name:
            assert not [a for a in ("acker", "checkpoints", "unit-j", "unit-orders", "unit-out")
                        if workers.postman.local(job_actor(refused, a))], f"{what} left names in the driver"
    STAGES["isolated"] = 1
    assert job.wait(60), job.status()
    expected = expected_pairs(lefts, rights)
    got = lambda: Counter((k, v["left"]["id"], v["right"]["id"]) for k, v in collected("pairs"))
    wait_until(lambda: sum(got().values()) >= sum(expected.values()), timeout=30, message="every pair")
    job.stop()
    assert got() == expected and sum(expected.values()) > 300
    assert not job.checkpoints.stats.recoveries and not job.checkpoints.stats.failed
