"""Automatic elasticity on real actors: a load step splits a bolt, the lull merges it back."""

from __future__ import annotations

from esault import TopologyBuilder
from esault.testing import CollectorBolt, collected, wait_until
from test_split_merge import assert_exact, sequenced_items
from topology_parts import PHASES, PhasedSpout, SlowSequenceBolt

FAST_REACTIONS = dict(
    max_latency=0.03, probe_period=0.05, overload_reaction_time=3, overload_reaction_factor=0.5,
    low_watermark=0.3, underload_reaction_time=6, underload_reaction_factor=0.6, cooldown=0.3,
    min_spus=1, max_spus=2,
)


def test_a_load_step_splits_the_bolt_and_the_lull_merges_it_back_with_exact_results(cluster, config):
    keys, per_key = 120, 30
    items = sequenced_items(keys, per_key, seed=5)
    PHASES["elastic"] = {"mode": "burst", "burst_until": len(items) // 2}
    builder = TopologyBuilder("elastic")
    builder.set_spout("src", PhasedSpout, params={"items": items, "phase": "elastic"}, max_pending=400)
    builder.set_bolt("check", SlowSequenceBolt, 1, params={"seconds": 0.0005}, pe_idle_timeout=None,
                     **FAST_REACTIONS).key_grouping("src")
    builder.set_bolt("out", CollectorBolt, params={"name": "elastic"}).global_grouping("check")
    job = cluster.submit(builder.build(), config.replace(elasticity=True, tick_interval=0.005))

    split = wait_until(lambda: [r for r in job.scaling_history if r.action == "split"], 30,
                       message="an automatic split under the burst")
    assert split[0].reason == "overload" and split[0].unit == "check"
    assert len(job.spus("check")) == 2

    PHASES["elastic"]["mode"] = "idle"  # the load drops to nothing
    merge = wait_until(lambda: [r for r in job.scaling_history if r.action == "merge"], 30,
                       message="an automatic merge in the lull")
    assert merge[0].reason == "underload"
    assert len(job.spus("check")) == 1

    PHASES["elastic"]["mode"] = "end"
    assert job.wait(60), job.status()
    assert_exact("elastic", keys, per_key)
    decisions = job.monitors["check"].proxy().decisions.get()
    assert [d[0] for d in decisions][:2] == ["split", "merge"]
    assert "timed out" in decisions[0][2] or "timeout" in decisions[0][2]
