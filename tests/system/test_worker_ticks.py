"""A job's tick_interval paces its SPUs on worker processes as it does in the driver (a worker ran every job's
SPUs on one 10 ms ticker, whatever the job's config said)."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

from esault import JobConfig, LocalCluster, TopologyBuilder
from esault.testing import collected, reset_collected, wait_until

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
from topology_parts import GATES, DriverCollectorBolt, GatedListSpout, TickStamps  # noqa: E402


def test_a_jobs_tick_interval_paces_its_spus_on_worker_processes(tmp_path):
    reset_collected()
    GATES["ticks"] = threading.Event()  # never set: the spout holds and the job stays up
    b = TopologyBuilder("ticks")
    b.set_spout("src", GatedListSpout, params={"items": [("a", 1)], "gate": "ticks", "hold_at": 0})
    b.set_bolt("tick", TickStamps, elastic=False, chain=False).shuffle_grouping("src")
    b.set_bolt("out", DriverCollectorBolt, params={"name": "ticks"}).global_grouping("tick")
    with LocalCluster(workers=1) as cluster:
        job = cluster.submit(b.build(), JobConfig(data_dir=tmp_path, guarantee="at_least_once", elasticity=False,
                                                  tick_interval=0.2))
        assert cluster.registry.spus_on, "the ticking bolt runs on the worker"
        wait_until(lambda: len(collected("ticks")) >= 5, 30, message="five ticks")
        job.stop()
    stamps = [now for _, now in collected("ticks")][:5]
    gaps = [later - earlier for earlier, later in zip(stamps, stamps[1:])]
    assert min(gaps) > 0.15, f"ticks {gaps} s apart; the job's tick_interval is 0.2 s"
