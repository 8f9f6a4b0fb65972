"""esault.testing without running anything: where a CollectorBolt runs, what run_to_completion refuses."""

from __future__ import annotations

import pytest

from esault import TopologyBuilder
from esault.errors import ConfigError, TopologyError
from esault.testing import CollectorBolt, ListSpout, run_to_completion


def small(collector_options: dict | None = None, second: dict | None = None) -> TopologyBuilder:
    b = TopologyBuilder("small")
    b.set_spout("src", ListSpout, params={"items": [["k", 1]]})
    b.set_bolt("out", CollectorBolt, **(collector_options or {})).shuffle_grouping("src")
    if second is not None:
        b.set_bolt("out2", CollectorBolt, **second).shuffle_grouping("src")
    return b


def test_a_collector_bolt_runs_in_the_driver_and_is_never_chained_into_its_source():
    topology = small().build()
    assert topology.unit("out").where == "driver"
    assert not topology.chained("out"), "a chained collector would run wherever its source's SPUs run"


def test_run_to_completion_refuses_bad_arguments_saying_what_to_pass():
    with pytest.raises(ConfigError, match=r"workers=\.\.\.\) must be a number of worker processes \(1 or more\) or "
                                          r"'in-process', got 'threads'"):
        run_to_completion(small(), workers="threads")
    with pytest.raises(ConfigError, match=r"got 0"):
        run_to_completion(small(), workers=0)
    with pytest.raises(ConfigError, match=r"timeout=\.\.\.\) must be a positive number of seconds, got 0"):
        run_to_completion(small(), timeout=0)
    with pytest.raises(ConfigError, match=r"give workers= \(a cluster this call starts\) or cluster= \(one you "
                                          r"started\), not both"):
        run_to_completion(small(), workers=2, cluster=object())
    with pytest.raises(TopologyError, match=r"takes a Topology or a TopologyBuilder, got list"):
        run_to_completion([])


def test_collectors_the_test_could_not_read_are_refused_before_any_worker_starts():
    with pytest.raises(ConfigError, match=r"collector 'out' is placed in the worker processes \(placement='worker'\)"
                                          r", where what it collects stays: drop the placement"):
        run_to_completion(small({"placement": "worker"}))  # default: 2 worker processes, never spawned
    with pytest.raises(ConfigError, match=r"collectors 'out' and 'out2' both collect under the name 'x', so their "
                                          r"outputs would mix"):
        run_to_completion(small({"params": {"name": "x"}}, {"params": {"name": "x"}}), workers="in-process")
