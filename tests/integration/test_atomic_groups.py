"""Atomic groups: several units reconfigured as one (Job.apply), all or nothing, while tuples flow.

Two key-grouped stages in a row, each checking per-key order: a group that
rescales both at once must keep every key exact through both; a group with
one bad member must change nothing, including the SPUs its good members had
already started.
"""

from __future__ import annotations

import threading

import pykka
import pytest

from esault import KEY_SPACE_MAX, ScalingError, TopologyBuilder
from esault.control import AssignWorkload, Rescale, Split
from esault.datapath.bolt_spu import BoltSpuActor
from esault.testing import CollectorBolt, wait_until
from test_split_merge import assert_exact, sequenced_items
from topology_parts import GATES, GatedListSpout, RelayCheckBolt, SequenceCheckBolt


def two_stages(cluster, config, name: str, keys: int, per_key: int, hold: float):
    items = sequenced_items(keys, per_key, seed=len(name))
    GATES[name] = threading.Event()
    builder = TopologyBuilder(name)
    builder.set_spout("src", GatedListSpout, params={"items": items, "gate": name, "hold_at": int(len(items) * hold)})
    builder.set_bolt("first", SequenceCheckBolt, 2, pe_idle_timeout=None).key_grouping("src")
    builder.set_bolt("second", RelayCheckBolt, 2, pe_idle_timeout=None).key_grouping("first")
    builder.set_bolt("out", CollectorBolt, params={"name": name}).global_grouping("second")
    return cluster.submit(builder.build(), config)


def spu_actors() -> int:
    return len(pykka.ActorRegistry.get_by_class(BoltSpuActor))


def test_a_group_rescales_two_adjacent_units_at_once_and_every_key_stays_exact(cluster, config):
    keys, per_key = 120, 40
    job = two_stages(cluster, config, "grp", keys, per_key, hold=0.4)
    wait_until(lambda: job.status()["units"]["second"]["processed"] >= 1000, 30, message="tuples flowing")
    results = job.apply([Rescale("second", 3), Rescale("first", 3)])
    assert [r.unit for r in results] == ["second", "first"], "results in the order given"
    assert all(len(r.started) == 1 for r in results)
    assert (len(job.spus("first")), len(job.spus("second"))) == (3, 3)
    # Scale in one stage while the other moves ranges, in one group, with the rest of the input flowing.
    GATES["grp"].set()
    first = job.workload("first")
    a, b, c = sorted(first, key=lambda s: first[s][0][0])
    (lo, hi), = first[b]
    mid = lo + (hi - lo) // 2
    moved = {a: first[a] + [(mid + 1, hi)], b: [(lo, mid)], c: first[c]}
    results = job.apply([AssignWorkload("first", moved), Rescale("second", 1)])
    assert results[0].moved_keys > 0 and len(results[1].retired) == 2
    assert job.wait(60), job.status()
    assert_exact("grp", keys, per_key)
    assert [r.action for r in job.scaling_history] == ["assign_workload"] * 4


def test_a_group_with_one_bad_member_changes_nothing_and_stops_what_it_started(cluster, config):
    keys, per_key = 60, 20
    job = two_stages(cluster, config, "grpbad", keys, per_key, hold=0.5)
    wait_until(lambda: job.status()["units"]["second"]["processed"] >= 300, 30, message="tuples flowing")
    before = {unit: job.workload(unit) for unit in ("first", "second")}
    actors = spu_actors()
    gap = {spu: ranges for spu, ranges in before["second"].items()}
    first_spu = min(gap, key=lambda s: gap[s][0][0])
    gap[first_spu] = [(gap[first_spu][0][0] + 1, gap[first_spu][0][1])]  # hash 0 belongs to nobody
    with pytest.raises(ScalingError, match=r"atomic group of 2 operations refused: assign_workload of 'second'.*"
                                           r"nothing changed"):
        job.apply([Rescale("first", 4), AssignWorkload("second", gap)])  # 'first' prepares, then 'second' fails
    assert {unit: job.workload(unit) for unit in ("first", "second")} == before
    wait_until(lambda: spu_actors() == actors, 10, message="the SPUs the cancelled rescale started stopped")
    with pytest.raises(ScalingError, match="one operation per unit, but 'first' appear"):
        job.apply([Split("first", first_spu), Rescale("first", 3)])
    # The unit is free again: a single operation right after works.
    assert job.rescale("first", 3).action == "assign_workload"
    GATES["grpbad"].set()
    assert job.wait(60), job.status()
    assert_exact("grpbad", keys, per_key)
    assert [r.unit for r in job.scaling_history] == ["first"]
