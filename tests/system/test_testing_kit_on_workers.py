"""The testing kit on real `esault worker` processes: collectors read in the test's process, runs to completion."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from esault import LocalCluster, TopologyBuilder
from esault.errors import RunIncomplete
from esault.testing import CollectorBolt, collected, reset_collected, run_to_completion

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "integration"))
from test_run_to_completion import (  # noqa: E402
    EndlessSpout, RaiseOnBad, assert_counted, counting_topology, expected_per_key, keyed_items,
)

pytestmark = pytest.mark.system


@pytest.fixture(scope="module")
def workers():
    """Two worker processes shared by this module's tests."""
    with LocalCluster(workers=2) as cluster:
        yield cluster


def test_collectors_read_in_the_tests_process_every_tuple_from_bolts_on_worker_processes(workers, config):
    """CollectorBolt alone, no run_to_completion: key, shuffle and global groupings into it, 2 SPUs each."""
    reset_collected()
    items = keyed_items(400, keys=13)
    job = workers.submit(counting_topology("kit-collect", items).build(), config)
    assert job.wait(30), job.status()
    assert {job.worker_of(spu) for spu in job.spus("count")} == {"w1", "w2"}, "the counting runs in both workers"
    collectors = [spu for unit in ("by_key", "shuffled", "all") for spu in job.spus(unit)]
    assert len(collectors) == 5 and all(job.worker_of(spu) is None for spu in collectors), "collectors: the driver"
    split = job.split("by_key", job.spus("by_key")[0])
    assert job.worker_of(split.receiver) is None, "a collector scales within the driver"
    job.stop()
    expected = expected_per_key(items)
    for unit in ("by_key", "all"):
        per_key: dict = {}
        for key, value in collected(unit):
            per_key.setdefault(key, []).append(value)
        assert per_key == expected, unit
    assert sorted((k, tuple(v)) for k, v in collected("shuffled")) == sorted(
        (k, tuple(v)) for k, values in expected.items() for v in values)


def test_run_to_completion_starts_two_worker_processes_by_default_and_returns_every_output():
    items = keyed_items(300)
    result = run_to_completion(counting_topology("kit-default", items), timeout=30)
    assert_counted(result, items)
    count_spus = result.status["units"]["count"]["spus"].values()
    assert sorted(spu["worker"] for spu in count_spus) == ["w1", "w2"], "bolts ran in two worker processes"
    assert {spu["worker"] for spu in result.status["units"]["all"]["spus"].values()} == {"driver"}


def test_run_to_completion_on_a_shared_cluster_stops_a_job_whose_spout_never_finishes(workers, config):
    items = keyed_items(50)
    b = TopologyBuilder("kit-endless")
    b.set_spout("src", EndlessSpout, params={"items": items})
    b.set_bolt("relay", RaiseOnBad, 2).key_grouping("src")  # passes every key but "bad" on, in the workers
    b.set_bolt("out", CollectorBolt, 2).key_grouping("relay")
    with pytest.raises(RunIncomplete, match=r"did not run to completion on the given cluster:\n  - the job did not "
                                            r"complete within 1 s") as err:
        run_to_completion(b, cluster=workers, config=config, timeout=1.0)
    assert sorted(err.value.result["out"]) == sorted(tuple(i) for i in items)
    assert workers.jobs["kit-endless"]._stopped, "the job was stopped; the cluster goes on"
    again = run_to_completion(counting_topology("kit-after", items), cluster=workers, config=config, timeout=30)
    assert_counted(again, items)


def test_a_close_that_raises_in_a_worker_process_fails_the_run(workers, config):
    """The error happens in the worker as its SPU stops, after the final status: the driver waits for the
    workers' next reports and counts it, so the run does not pass for a success."""
    from topology_parts import CloseFailsBolt
    from esault.testing import ListSpout

    b = TopologyBuilder("kit-close-fails")
    b.set_spout("src", ListSpout, params={"items": [["a", 1], ["b", 2], ["c", 3]]})
    b.set_bolt("tally", CloseFailsBolt, 2, elastic=False, chain=False).shuffle_grouping("src")
    with pytest.raises(RunIncomplete, match=r"finish\(\) or close\(\) raised 2 time\(s\) \(tally 2\)"):
        run_to_completion(b, cluster=workers, config=config, timeout=30)
