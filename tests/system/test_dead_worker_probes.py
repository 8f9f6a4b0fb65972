"""Probes of an SPU on a silent worker never read as overload: no split of the dead, the replacement comes."""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path

import pytest

from esault import JobConfig, LocalCluster, TopologyBuilder
from esault.testing import reset_collected, wait_until

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "integration"))
from test_split_merge import sequenced_items  # noqa: E402
from topology_parts import GATES, DriverCollectorBolt, GatedListSpout, SequenceCheckBolt  # noqa: E402

pytestmark = pytest.mark.system

# Quick to call overload (3 probes over 50 ms), never underload: only a dead SPU's timeouts could split.
REACTIONS = dict(max_latency=0.05, probe_period=0.05, overload_reaction_time=3, overload_reaction_factor=0.5,
                 underload_reaction_time=1000, cooldown=0.2, min_spus=1, max_spus=4)


def test_the_latency_controller_does_not_split_an_spu_whose_worker_died(tmp_path):
    reset_collected()
    items = sequenced_items(40, 10, seed=61)
    GATES["dead"] = threading.Event()
    builder = TopologyBuilder("dead")
    builder.set_spout("src", GatedListSpout, params={"items": items, "gate": "dead", "hold_at": len(items) // 4})
    builder.set_bolt("check", SequenceCheckBolt, 2, pe_idle_timeout=None, **REACTIONS).key_grouping("src")
    builder.set_bolt("out", DriverCollectorBolt, params={"name": "dead"}, elastic=False).global_grouping("check")
    config = JobConfig(data_dir=tmp_path, elasticity=True, guarantee="at_least_once", tick_interval=0.005,
                       message_timeout=2.0)
    with LocalCluster(workers=2, heartbeat_timeout=3.0) as cluster:
        job = cluster.submit(builder.build(), config)
        controller = job.latency_controllers["check"]
        wait_until(lambda: job.status()["units"]["check"]["processed"] >= len(items) // 4, 30,
                   message="the first quarter processed")
        wait_until(lambda: len([p for s in [controller] for p in s.detectors]) == 2 and controller.load, 10,
                   message="probes answered by both SPUs")
        dead = job.spus("check")[0]
        worker = next(w for w, spus in cluster.registry.spus_on.items() if dead in spus)
        # Stopped, not killed: a local worker that ends is declared dead at once, and the probes' window
        # (the worker silent, not yet declared dead) is what a hung worker or a lost host leaves
        pid = cluster.registry.pids[worker]
        os.kill(pid, signal.SIGSTOP)
        replaced = wait_until(lambda: next((r for r in job.scaling_history if r.action == "replace"
                                            and r.giver == dead), None), 30,
                              message="the dead SPU replaced once the worker is declared dead (3 s)")
        os.kill(pid, signal.SIGKILL)
        assert not [d for d in controller.decisions if d[1] == dead], controller.decisions
        assert not [r for r in job.scaling_history if r.action == "split"], "nothing split: nothing was loaded"
        assert replaced.receiver in job.spus("check")
        cluster.pool.spawn("r1")
        GATES["dead"].set()
        assert job.wait(60), job.status()
        job.stop()
