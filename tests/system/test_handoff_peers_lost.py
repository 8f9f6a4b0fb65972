"""A key hand-off past its switch when a worker dies, without exactly_once (which rolls back instead).

Each side of a hand-off waits for others: a giver for every upstream SPU's marker, a receiver for the giver's
state and for every downstream SPU's answer to the giver's ForwardMarker, the unit for both sides. A worker
that dies holding any of them used to leave the operation waiting for ever, and with it every later one,
the lost SPUs' replacements included (they queue behind it). Now the unit tells the live participants
(PeersLost) and its machine stops waiting for the lost: the operation ends, then the replacements run.

Workers are real processes: the worker an SPU waits on is stopped (SIGSTOP) so the wait is certain, then
the victim's worker is killed (SIGKILL) at that step.
"""

from __future__ import annotations

import os
import signal
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from esault import JobConfig, LocalCluster, TopologyBuilder
from esault.keyhash import KEY_SPACE_MAX
from esault.testing import collected, reset_collected, wait_until

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT / "tests" / "integration"))
sys.path.insert(0, str(ROOT / "tests" / "system"))
import wordcount  # noqa: E402
from process_pause import paused  # noqa: E402
from topology_parts import DriverCollectorBolt, Relay  # noqa: E402

pytestmark = pytest.mark.system

TOTAL = 4000


def processed_by(job, unit: str) -> int:
    return sum(s.processed for s in job.spu_counters() if s.unit == unit)


def build(counters: int = 2):
    """sentences -> split (SPU of its own) -> count -> relay (stateless) -> the driver."""
    builder = TopologyBuilder("handoff-peers-lost")
    builder.set_spout("sentences", wordcount.SentenceSpout, params={"total": TOTAL, "seed": 7, "rate": 800},
                      max_pending=4000)
    builder.set_bolt("split", wordcount.SplitBolt, chain=False, elastic=False).shuffle_grouping("sentences")
    builder.set_bolt("count", wordcount.CountBolt, counters, elastic=False).key_grouping("split")
    builder.set_bolt("relay", Relay, elastic=False).shuffle_grouping("count")
    builder.set_bolt("out", DriverCollectorBolt, params={"name": "peers-lost"}).global_grouping("relay")
    return builder.build()


# victim -> (the unit whose worker is stopped so a participant waits on it, whose worker is killed)
STEPS = {
    "downstream": ("relay", "relay"),  # the receiver waits for the relay's MarkerSeen; the relay dies
    "receiver": ("relay", "receiver"),  # ... and the receiver dies while waiting
    "upstream": ("split", "split"),  # the giver waits for the split's EpochMarker; the split dies
    "giver": ("split", "giver"),  # ... and the giver dies while waiting
}


@pytest.mark.parametrize("victim", sorted(STEPS))
def test_a_merge_goes_on_without_an_spu_lost_with_its_worker_past_the_switch(tmp_path, victim):
    """at_least_once: the merge ends, the job ends, and every word reaches the driver; where no count state
    died with the victim, each word's count reaches its true count (replays may add more)."""
    reset_collected()
    config = JobConfig(data_dir=tmp_path, guarantee="at_least_once", elasticity=False, message_timeout=5.0)
    stop_unit, kill = STEPS[victim]
    with LocalCluster(workers=4, heartbeat_timeout=60.0) as cluster:
        job = cluster.submit(build(), config)
        wait_until(lambda: processed_by(job, "relay") > 2000, 60, message="counts reaching the relay")
        host = {s: w for w, spus in cluster.registry.spus_on.items() for s in spus}
        receiver, giver = job.spus("count")
        spu_of = {"relay": job.spus("relay")[0], "split": job.spus("split")[0], "receiver": receiver, "giver": giver}
        counters = {host[receiver], host[giver]}
        assert host[spu_of[stop_unit]] not in counters, f"the {stop_unit} shares a worker with a counter: {host}"
        # the participant waits on the stopped worker
        with ThreadPoolExecutor(1) as pool, paused(cluster.registry.pids[host[spu_of[stop_unit]]]):
            merge = pool.submit(job.merge, "count", giver, receiver)
            wait_until(lambda: job.spus("count") == [receiver], 30, message="the merge switched routes")
            os.kill(cluster.registry.pids[host[spu_of[kill]]], signal.SIGKILL)
            merge.result(timeout=60)
        assert job.wait(120), job.status()
        job.stop()
    check_counts(exact=victim in ("downstream", "upstream"))  # those lost no count state


def check_counts(exact: bool) -> None:
    """Every word reached the driver; `exact`: each with at least its true count (replays may add more)."""
    counts: dict[str, int] = {}
    for word, count in collected("peers-lost"):
        counts[word] = max(count, counts.get(word, 0))
    oracle = dict(wordcount.oracle(TOTAL, seed=7))
    missing = sorted(set(oracle) - set(counts))
    assert not missing, f"{len(missing)} words never reached the driver, e.g. {missing[:5]}"
    if exact:
        short = {w: (counts[w], n) for w, n in oracle.items() if counts[w] < n}
        assert not short, f"{len(short)} words counted short, e.g. {list(short.items())[:5]}"


def test_an_assignment_from_two_givers_goes_on_when_one_dies_before_the_upstream_switched(tmp_path):
    """Two count SPUs give all their keys to a third; the split SPU, stopped, has not switched. The lower-id
    giver's worker is killed: once the split runs again it must still mark its channel to the other giver
    (its marker to the dead one fails), and the operation ends."""
    reset_collected()
    config = JobConfig(data_dir=tmp_path, guarantee="at_least_once", elasticity=False, message_timeout=5.0)
    with LocalCluster(workers=5, heartbeat_timeout=60.0) as cluster:
        job = cluster.submit(build(counters=3), config)
        wait_until(lambda: processed_by(job, "relay") > 2000, 60, message="counts reaching the relay")
        host = {s: w for w, spus in cluster.registry.spus_on.items() for s in spus}
        first, second, keeper = job.spus("count")
        (split,) = job.spus("split")
        assert len({host[first], host[second], host[keeper], host[split]}) == 4, f"workers shared: {host}"
        with ThreadPoolExecutor(1) as pool:
            with paused(cluster.registry.pids[host[split]]):
                assignment = pool.submit(job.assign_workload, "count", {keeper: [(0, KEY_SPACE_MAX)]})
                wait_until(lambda: job.spus("count") == [keeper], 30, message="the assignment switched routes")
                os.kill(cluster.registry.pids[host[first]], signal.SIGKILL)
                wait_until(lambda: host[first] not in cluster.registry.workers, 30,
                           message="the giver's worker declared dead (the split's worker is told so)")
            assignment.result(timeout=60)
        assert job.wait(120), job.status()
        job.stop()
    check_counts(exact=False)
