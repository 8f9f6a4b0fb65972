"""assign_workload and rescale: many key ranges move at once, atomically, while tuples flow.

The same per-key sequence check as test_split_merge: any tuple lost,
duplicated or reordered for a key, or any state not moved with its key,
shows up as a violation or a wrong final sequence.
"""

from __future__ import annotations

import random

import pytest

from esault import KEY_SPACE_MAX, ScalingError, key_hash
from esault.testing import collected, wait_until
from test_split_merge import assert_exact, build, sequenced_items
from topology_parts import GATES


def random_assignment(rnd: random.Random, current: dict[int, list[tuple[int, int]]]) -> dict[int, list]:
    """Cut the key space at random points and deal the pieces to current SPUs and up to two new ones
    (ids -1, -2), so SPUs end up with several ranges, some give and receive at once, some retire."""
    cuts = sorted(set(rnd.randrange(1, KEY_SPACE_MAX) for _ in range(rnd.randint(1, 6))))
    bounds = [0, *cuts, KEY_SPACE_MAX + 1]
    owners = list(current) + [-1, -2][: rnd.randint(0, 2)]
    assignment: dict[int, list] = {}
    for lo, nxt in zip(bounds, bounds[1:]):
        assignment.setdefault(rnd.choice(owners), []).append((lo, nxt - 1))
    return assignment


def owner_of(workload: dict[int, list[tuple[int, int]]], h: int) -> int:
    return next(spu for spu, ranges in workload.items() for lo, hi in ranges if lo <= h <= hi)


def running_job(cluster, config, name: str, keys: int, per_key: int, seed: int, spus: int, held: int):
    """A sequence-checked job whose first 1/`held` of the input is through (the rest waits for GATES[name])."""
    items = sequenced_items(keys, per_key, seed=seed)
    job = cluster.submit(build(name, items, name, hold_at=len(items) // held, parallelism=spus), config)
    wait_until(lambda: job.status()["units"]["check"]["processed"] >= len(items) // (2 * held), 30,
               message="the first tuples processed")
    return job


def test_random_assignments_while_tuples_flow_keep_every_key_exact(cluster, config):
    keys, per_key = 300, 1000
    job = running_job(cluster, config, "aw", keys, per_key, seed=21, spus=3, held=10)
    GATES["aw"].set()
    rnd = random.Random(5)
    done = 0
    # Reconfigure for as long as the input flows (and a few times more): keys move with tuples in flight.
    while done < 6 or (job.status()["units"]["check"]["processed"] < keys * per_key and done < 40):
        before = job.workload("check")
        try:
            result = job.assign_workload("check", random_assignment(rnd, before))
        except ScalingError as exc:
            assert "the assignment is the current one" in str(exc)
            continue
        done += 1
        after = job.workload("check")
        assert set(result.retired) == set(before) - set(after)
        assert set(result.started) == set(after) - set(before)
        # The moves are exactly where the owner changed.
        for lo, hi, giver, receiver in result.moves:
            for h in (lo, hi, (lo + hi) // 2):
                assert owner_of(before, h) == giver and owner_of(after, h) == receiver
    held = [r.paused_seconds for r in job.scaling_history if r.paused_seconds > 0]
    assert held, "no reconfiguration held a tuple of a moved key: the test did not exercise the hand-off"
    job.rescale("check", 4)
    assert len(job.spus("check")) == 4
    job.rescale("check", 2)
    assert job.wait(60), job.status()
    assert not job.status()["units"]["check"]["failed"]
    assert_exact("aw", keys, per_key)


def test_an_assignment_moves_exactly_the_keys_whose_owner_changes(cluster, config):
    keys, per_key = 300, 3
    items = sequenced_items(keys, per_key, seed=22)
    job = cluster.submit(build("awx", items, "awx", hold_at=len(items), parallelism=2), config)
    assert job.wait(30)
    a, b = job.spus("check")
    third = (KEY_SPACE_MAX + 1) // 3
    target = {b: [(0, third - 1), (2 * third, KEY_SPACE_MAX)], -1: [(third, 2 * third - 1)]}
    before = job.workload("check")
    result = job.assign_workload("check", target)
    (new,) = result.started
    assert result.retired == (a,)
    after = job.workload("check")
    assert after == {b: [(0, third - 1), (2 * third, KEY_SPACE_MAX)], new: [(third, 2 * third - 1)]}
    hashes = [key_hash(f"k{i}") for i in range(keys)]
    moving = [h for h in hashes if owner_of(before, h) != owner_of(after, h)]
    assert 0 < len(moving) < keys
    assert result.moved_keys == len(moving)
    spus = job.status()["units"]["check"]["spus"]
    assert spus[b]["pes"] == sum(1 for h in hashes if owner_of(after, h) == b)
    assert spus[b]["intervals"] == after[b]
    assert spus[b]["pes"] + spus[new]["pes"] == keys


def test_bad_assignments_are_refused_naming_the_problem_and_the_unit_stays_usable(cluster, config):
    items = sequenced_items(20, 2, seed=23)
    job = cluster.submit(build("awe", items, "awe", hold_at=len(items), parallelism=2), config)
    assert job.wait(30)
    a, b = job.spus("check")
    with pytest.raises(ScalingError, match=r"hashes \[100, 100\] are assigned to no SPU"):
        job.assign_workload("check", {a: [(0, 99)], b: [(101, KEY_SPACE_MAX)]})
    with pytest.raises(ScalingError, match="assigned twice"):
        job.assign_workload("check", {a: [(0, 100)], b: [(100, KEY_SPACE_MAX)]})
    with pytest.raises(ScalingError, match="the assignment is the current one"):
        job.assign_workload("check", job.workload("check"))
    with pytest.raises(ScalingError, match="'out' reads with global_grouping"):
        job.assign_workload("out", {1: [(0, KEY_SPACE_MAX)]})
    with pytest.raises(ScalingError, match=r"takes \{spu: \[\(lo, hi\), \.\.\.\]\}"):
        job.assign_workload("check", {a: 5})
    with pytest.raises(ScalingError, match="give a whole number >= 1"):
        job.rescale("check", 0)
    assert job.rescale("check", 3).started
    assert len(job.spus("check")) == 3


def test_moving_an_spu_needs_worker_processes_and_says_so(cluster, config):
    items = sequenced_items(20, 2, seed=24)
    job = cluster.submit(build("awr", items, "awr", hold_at=len(items), parallelism=2), config)
    assert job.wait(30)
    spu = job.spus("check")[0]
    with pytest.raises(ScalingError, match=r"refused: this cluster runs every SPU in one process: there is no "
                                           r"worker 'w1'; start it with LocalCluster\(workers=N\)"):
        job.assign_resource("check", spu, "w1")
    with pytest.raises(ScalingError, match="has no SPU 4242"):
        job.assign_resource("check", 4242, "w1")
    assert job.spus("check")[0] == spu and len(job.split("check", spu).moves) == 1  # the unit still scales


def test_rescaling_a_shuffle_grouped_bolt_starts_and_drains_spus_and_loses_nothing(cluster, config):
    from esault import TopologyBuilder
    from esault.testing import CollectorBolt, collected
    from topology_parts import GatedListSpout, SlowBolt

    items = [[f"k{i}", i] for i in range(3000)]
    GATES["shuf"] = __import__("threading").Event()
    builder = TopologyBuilder("shuf")
    builder.set_spout("src", GatedListSpout, params={"items": items, "gate": "shuf", "hold_at": 1000})
    builder.set_bolt("pass", SlowBolt, 2, params={"seconds": 0.0002}).shuffle_grouping("src")
    builder.set_bolt("out", CollectorBolt, params={"name": "shuf"}).global_grouping("pass")
    job = cluster.submit(builder.build(), config)
    grown = job.rescale("pass", 4)
    assert len(grown.started) == 2 and not grown.moves and len(job.spus("pass")) == 4
    GATES["shuf"].set()
    shrunk = job.rescale("pass", 1)
    assert len(shrunk.retired) == 3 and len(job.spus("pass")) == 1
    with pytest.raises(ScalingError, match="runs 1 SPUs already"):
        job.rescale("pass", 1)
    assert job.wait(60), job.status()
    assert sorted(v for _, v in collected("shuf")) == list(range(3000))


def swapped_exactly(name: str) -> int:
    """Per key the flags are bools (old code) then ints (new code), never back; returns how many tuples the
    new code processed."""
    new = 0
    flags: dict[str, list[bool]] = {}
    for key, (_, in_order) in collected(name):
        flags.setdefault(key, []).append(type(in_order) is int)
    for key, is_new in flags.items():
        assert is_new == sorted(is_new), f"key {key} went back to the old code: {is_new}"
        new += sum(is_new)
    return new


def test_the_code_of_a_running_bolt_is_swapped_keeping_every_key_state_exact(cluster, config):
    from topology_parts import SequenceCheckBoltV2

    keys, per_key = 150, 60
    job = running_job(cluster, config, "logic", keys, per_key, seed=25, spus=2, held=3)
    before = job.workload("check")
    result = job.assign_logic("check", SequenceCheckBoltV2)
    GATES["logic"].set()  # the other two thirds are the new code's, from the state the old code left
    assert result.action == "assign_logic" and set(result.retired) == set(before)
    assert sorted(job.workload("check").values()) == sorted(before.values())  # same ranges, new SPUs
    assert job.wait(60), job.status()
    assert_exact("logic", keys, per_key)
    assert swapped_exactly("logic") > 0


def test_a_swap_that_cannot_work_is_refused_and_the_old_code_keeps_running(cluster, config):
    from topology_parts import SlowBolt

    items = sequenced_items(20, 2, seed=26)
    job = cluster.submit(build("logicbad", items, "logicbad", hold_at=len(items), parallelism=2), config)
    with pytest.raises(ScalingError, match="needs a Bolt subclass"):
        job.assign_logic("check", dict)
    with pytest.raises(ScalingError, match=r"SlowBolt\(\*\*params\) cannot be built: .*seconds"):
        job.assign_logic("check", SlowBolt)
    with pytest.raises(ScalingError, match="'out' reads with global_grouping"):
        job.assign_logic("out", SlowBolt, {"seconds": 0})
    assert job.wait(30) and len(job.spus("check")) == 2
