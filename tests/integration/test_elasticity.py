"""Automatic elasticity on real actors: a load step splits a bolt, the lull merges it back."""

from __future__ import annotations

from esault import TopologyBuilder
from esault.testing import CollectorBolt, wait_until
from test_split_merge import assert_exact, sequenced_items
from topology_parts import PHASES, PhasedSpout, SlowSequenceBolt

FAST_REACTIONS = dict(
    max_latency=0.03, probe_period=0.05, overload_reaction_time=3, overload_reaction_factor=0.5,
    low_watermark=0.3, underload_reaction_time=6, underload_reaction_factor=0.6, cooldown=0.3,
    min_spus=1, max_spus=2,
)


def load_step_splits_then_merges(cluster, config, name: str, collector: type = CollectorBolt):
    """Burst until the bolt splits on its own, go idle until it merges back, then finish: exact results."""
    keys, per_key = 100, 30
    items = sequenced_items(keys, per_key, seed=len(name))
    PHASES[name] = {"mode": "burst", "burst_until": len(items) // 2}
    builder = TopologyBuilder(name)
    builder.set_spout("src", PhasedSpout, params={"items": items, "phase": name}, max_pending=400)
    builder.set_bolt("check", SlowSequenceBolt, 1, params={"seconds": 0.0005}, pe_idle_timeout=None,
                     **FAST_REACTIONS).key_grouping("src")
    builder.set_bolt("out", collector, params={"name": name}).global_grouping("check")
    job = cluster.submit(builder.build(), config.replace(elasticity=True, tick_interval=0.005))

    wait_until(lambda: any(r.action == "split" for r in job.scaling_history), 30,
               message="an automatic split under the burst")
    assert len(job.spus("check")) == 2
    PHASES[name]["mode"] = "idle"  # the load drops to nothing
    wait_until(lambda: any(r.action == "merge" for r in job.scaling_history), 30,
               message="an automatic merge in the lull")
    assert len(job.spus("check")) == 1
    PHASES[name]["mode"] = "end"
    assert job.wait(60), job.status()
    assert_exact(name, keys, per_key)
    assert [(r.action, r.reason, r.unit) for r in job.scaling_history][:2] == [
        ("split", "overload", "check"), ("merge", "underload", "check")]
    return job


def test_a_load_step_splits_the_bolt_and_the_lull_merges_it_back_with_exact_results(cluster, config):
    job = load_step_splits_then_merges(cluster, config, "elastic")
    decisions = job.latency_controllers["check"].decisions
    assert [d[0] for d in decisions][:2] == ["split", "merge"]
    assert "timed out" in decisions[0][2] or "timeout" in decisions[0][2]


def test_only_the_spus_a_change_touched_start_their_load_history_over(cluster, config):
    """Resetting every detector would make a steady lull look like the new peak: nothing would merge."""
    from test_split_merge import build

    items = sequenced_items(40, 3, seed=9)
    job = cluster.submit(build("keep", items, "keep", hold_at=len(items), parallelism=3),
                         config.replace(elasticity=True))
    controller = job.latency_controllers["check"]
    a, b, c = job.spus("check")
    before = wait_until(lambda: len(d := dict(controller.detectors)) == 3 and d, 10,
                        message="the controller's first snapshot")
    split = job.split("check", a)
    after_split = wait_until(lambda: (d := dict(controller.detectors)) and split.receiver in d and d, 10,
                             message="the controller saw the split")
    assert after_split[b] is before[b] and after_split[c] is before[c]
    assert after_split[a] is not before[a]
    job.merge("check", b, into=c)
    after_merge = wait_until(lambda: (d := dict(controller.detectors)) and b not in d and d, 10,
                             message="the controller saw the merge")
    assert after_merge[c] is before[c], "the merge receiver keeps its peak"
    assert after_merge[a] is after_split[a]
