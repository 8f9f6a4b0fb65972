"""A windowed topology on real worker processes: windows fire on their SPU's watermark, across a split."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from esault import JobConfig, LocalCluster, TopologyBuilder
from esault.testing import collected, reset_collected, wait_until
from esault.windows import Tumbling, is_late

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "integration"))
from test_windowed_topologies import bounded_items, oracle  # noqa: E402
from topology_parts import GATES, DriverCollectorBolt, GatedListSpout, SessionSums, TumblingSums  # noqa: E402

pytestmark = pytest.mark.system


def test_tumbling_windows_on_two_workers_fire_exactly_once_with_the_brute_force_sums_across_a_split(tmp_path):
    reset_collected()
    items = bounded_items(keys=40, n=4000, bound=5, seed=5)
    GATES["wpw"] = threading.Event()
    b = TopologyBuilder("wpw")
    b.set_spout("src", GatedListSpout, params={"items": items, "gate": "wpw", "hold_at": len(items) // 3})
    b.set_bolt("win", TumblingSums, 2, pe_idle_timeout=None).key_grouping("src")
    b.set_bolt("out", DriverCollectorBolt, params={"name": "wpw"}).global_grouping("win")
    config = JobConfig(data_dir=tmp_path / "data", message_timeout=30.0, elasticity=False, guarantee="at_least_once")
    with LocalCluster(workers=2) as cluster:
        job = cluster.submit(b.build(), config)
        wait_until(lambda: job.status()["units"]["win"]["processed"] >= len(items) // 3, 60,
                   message="first third in")
        assert job.split("win", job.spus("win")[0]).moved_keys > 0
        GATES["wpw"].set()
        assert job.wait(60), job.status()
        # Every SPU's watermark is within a few units of the greatest timestamp: these windows must fire
        # without the job stopping (no flush_on_close involved).
        horizon = max(ts for _, (ts, _) in items) - 30
        expected = {w: s for w, s in oracle(items, Tumbling(10)).items() if w[1] + 10 <= horizon}
        fired = lambda: {(k, v["start"]): v["result"] for k, v in collected("wpw") if not is_late(v)}  # noqa: E731
        wait_until(lambda: expected.keys() <= fired().keys(), 30, message="every window below the horizon fired")
        out = collected("wpw")
        job.stop()
    assert not [v for _, v in out if is_late(v)]
    assert len({(k, v["start"]) for k, v in out}) == len(out), "a window fired twice"
    assert {w: s for w, s in fired().items() if w in expected} == expected


def test_touching_sessions_merge_on_a_worker_though_a_tick_fired_between_their_tuples(tmp_path):
    """Issue 26: Session(gap=100), bound 50. ("a", 1000) and ("b", 1150) move the SPU's watermark to 1100; the
    spout holds ("a", 1100) until a tick there fired ("c", 999)'s session [999, 1099) (so it ran for a's too).
    1100 is within the bound and touches [1000, 1100): one session [1000, 1200) = 101, never two."""
    reset_collected()
    items = [("c", [999, 7]), ("a", [1000, 1]), ("b", [1150, 10]), ("a", [1100, 100])]
    GATES["sessions"] = threading.Event()
    b = TopologyBuilder("sessions")
    b.set_spout("src", GatedListSpout, params={"items": items, "gate": "sessions", "hold_at": 3})
    b.set_bolt("win", SessionSums, 1, pe_idle_timeout=None).key_grouping("src")  # one SPU: one watermark
    b.set_bolt("out", DriverCollectorBolt, params={"name": "sessions"}).global_grouping("win")
    config = JobConfig(data_dir=tmp_path / "data", message_timeout=30.0, elasticity=False, guarantee="at_least_once")
    with LocalCluster(workers=2) as cluster:
        job = cluster.submit(b.build(), config)
        wait_until(lambda: [k for k, _ in collected("sessions") if k == "c"], 60,
                   message="the tick at watermark 1100 fired c's session")
        GATES["sessions"].set()
        assert job.wait(60), job.status()
        job.stop()  # flush_on_close: the open sessions fire
    fired = sorted((k, v["start"], v["end"], v["result"]) for k, v in collected("sessions"))
    assert fired == [("a", 1000, 1200, 101), ("b", 1150, 1250, 10), ("c", 999, 1099, 7)]
