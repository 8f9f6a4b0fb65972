"""The driver-scale simulation cannot drift from the protocol: the driver's messages agree with real workers'.

The same topology and the same operations run twice on the real driver: once on two real worker processes,
once on two simulated workers (esault/testing/sim). The driver's Traffic counter (every message its endpoint
sends and delivers, by type) must show, per operation, exactly the same protocol messages, and heartbeats at
the same pace, so bench/scale_sim.py's figures are what real workers would cost the driver.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import pytest

from esault import JobConfig, LocalCluster
from esault.testing import wait_until
from esault.testing.sim import topology
from esault.testing.sim.fleet import SimFleet
from esault.transport.traffic import Traffic

pytestmark = pytest.mark.system

PACE = {"WorkerHeartbeat", "DriverBeat"}
"""Messages that come with time, not with an operation: compared as a rate."""
PACE_SAMPLES = 20
"""Heartbeats the driver receives in the window the pace is taken over (about 5-10 s with two workers)."""
SIGNS = {"checkpoint": ("in", "CheckpointAcks"), "split": ("out", "StartSpu"), "merge": ("out", "StopSpu"),
         "move": ("in", "SpuStopped"), "rescale": ("in", "HandoffFinished")}
"""A message each operation must have exchanged with the workers (else the comparison proves nothing)."""


def settled(traffic: Traffic, quiet: float = 1.0) -> Callable[[], bool]:
    """True once no protocol message (anything but the pace) came or went for `quiet` seconds."""
    state: dict[str, Any] = {"counts": None, "since": time.monotonic()}

    def check() -> bool:
        counts = Counter({k: n for k, n in traffic.snapshot().items() if k[1] not in PACE})
        if counts != state["counts"]:
            state["counts"], state["since"] = counts, time.monotonic()
        return time.monotonic() - state["since"] >= quiet

    return check


def operations(cluster: LocalCluster, traffic: Traffic, data: Path) -> dict[str, Counter]:
    """The driver's messages for each operation of one run: a checkpoint, split, merge, move and rescale."""
    job = cluster.submit(topology.build("agree", 2, counts_per_worker=5, rate=20),
                         JobConfig(data_dir=data, elasticity=False, checkpoint_interval=3600.0))
    wait_until(lambda: job.workers() and all(u.get("spus") for u in job.status()["units"].values()), 60,
               message="every unit's SPUs started")
    wait_until(settled(traffic), 30, message="the start's messages settled")
    out: dict[str, Counter] = {}

    def measure(name: str, action: Callable[[], Any]) -> None:
        before = traffic.snapshot()
        action()
        wait_until(settled(traffic), 30, message=f"the messages of {name} settled")
        out[name] = Counter({k: n for k, n in (traffic.snapshot() - before).items() if k[1] not in PACE})

    unit = topology.COUNT_UNITS[0]
    before, started = traffic.snapshot(), time.monotonic()
    wait_until(lambda: (traffic.snapshot() - before)[("in", "WorkerHeartbeat")] >= PACE_SAMPLES, 60,
               message=f"{PACE_SAMPLES} heartbeats from the workers")
    steady = traffic.snapshot() - before
    out["pace"] = Counter({k: n / (time.monotonic() - started) for k, n in steady.items() if k[1] in PACE})
    measure("checkpoint", lambda: job.checkpoint(timeout=60))
    measure("split", lambda: job.split(unit, job.spus(unit)[0]))
    measure("merge", lambda: job.merge(unit, job.spus(unit)[-1]))
    spu = job.spus(unit)[0]
    measure("move", lambda: job.assign_resource(unit, spu, next(w for w in job.workers() if w != job.worker_of(spu))))
    measure("rescale", lambda: job.rescale(unit, len(job.spus(unit)) + 1))
    job.stop()
    return out


def test_the_driver_exchanges_the_same_messages_with_simulated_workers_as_with_real_ones(tmp_path):
    with LocalCluster(workers=2) as cluster:
        traffic = Traffic()
        cluster.postman.endpoint.traffic = traffic
        real = operations(cluster, traffic, tmp_path / "real")
    with SimFleet(2, 1, tmp_path / "sim") as fleet:
        fleet.set_rate(20)
        simulated = operations(fleet.cluster, fleet.traffic, tmp_path / "sim-data")
    for name, sign in SIGNS.items():
        assert real[name][sign] >= 1, (name, real[name])  # the operation did talk to the workers
        assert simulated[name] == real[name], (name, real[name], simulated[name])
    for kind, rate in real["pace"].items():
        assert simulated["pace"][kind] == pytest.approx(rate, rel=0.25), (kind, real["pace"], simulated["pace"])
