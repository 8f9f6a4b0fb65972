"""esault.testing.run_to_completion on real actors in one process: outputs, verdicts, fresh starts.

tests/system/test_testing_kit_on_workers.py runs the same topologies on worker processes.
"""

from __future__ import annotations

from typing import Any

import pytest

from esault import Bolt, TopologyBuilder
from esault.errors import RunIncomplete
from esault.testing import CollectorBolt, ListSpout, collected, run_to_completion


class RunningCount(Bolt):
    """Key-grouped: per key, emits [how many it has seen, the value], so a collector sees each key's order."""

    def open(self, context: Any) -> None:
        self.count = 0

    def process(self, tup: Any) -> None:
        self.count += 1
        self.emit(self.key, [self.count, tup.value])


class RaiseOnBad(Bolt):
    def process(self, tup: Any) -> None:
        if tup.key == "bad":
            raise ValueError(f"cannot take {tup.value!r}")
        self.emit(tup.key, tup.value)


class EndlessSpout(ListSpout):
    """Emits its items, then never says it is finished (a source that does not end)."""

    def next_tuple(self) -> None:
        end = min(self.position + self.per_call, len(self.items))
        for i in range(self.position, end):
            self.emit(*self.items[i], msg_id=i)
        self.position = end


def keyed_items(n: int = 300, keys: int = 9) -> list[list[Any]]:
    return [[f"k{i % keys}", i] for i in range(n)]


def counting_topology(name: str, items: list[list[Any]], count_spus: int = 2) -> TopologyBuilder:
    """A running count per key into three collectors: key-grouped (2 SPUs), shuffled (2 SPUs), global."""
    b = TopologyBuilder(name)
    b.set_spout("src", ListSpout, params={"items": items, "per_call": 16})
    b.set_bolt("count", RunningCount, count_spus, pe_idle_timeout=None).key_grouping("src")
    b.set_bolt("by_key", CollectorBolt, 2).key_grouping("count")
    b.set_bolt("shuffled", CollectorBolt, 2).shuffle_grouping("count")
    b.set_bolt("all", CollectorBolt).global_grouping("count")
    return b


def expected_per_key(items: list[list[Any]]) -> dict[str, list[list[Any]]]:
    """The oracle: each key's [running count, value] in input order."""
    out: dict[str, list[list[Any]]] = {}
    for key, value in items:
        out.setdefault(key, []).append([len(out.get(key, ())) + 1, value])
    return out


def assert_counted(result, items: list[list[Any]]) -> None:
    """Every collector got every tuple; the key-grouped and global ones in each key's order."""
    expected = expected_per_key(items)
    assert result.by_key("by_key") == expected
    assert result.by_key("all") == expected
    flat = sorted((key, tuple(value)) for key, values in expected.items() for value in values)
    assert sorted((key, tuple(value)) for key, value in result["shuffled"]) == flat
    assert result.count("count") == len(items) and result.completed and result.ok


def test_a_finite_topology_runs_to_completion_in_process_and_every_collector_gets_every_tuple(config):
    items = keyed_items()
    result = run_to_completion(counting_topology("rtc", items), workers="in-process", config=config, timeout=20)
    assert_counted(result, items)
    assert result.dead_letters == [] and result.outcome.problems == ()


def test_a_spout_that_never_finishes_raises_run_incomplete_with_what_was_collected(config):
    items = keyed_items(40)
    b = TopologyBuilder("endless")
    b.set_spout("src", EndlessSpout, params={"items": items})
    b.set_bolt("out", CollectorBolt).global_grouping("src")
    with pytest.raises(RunIncomplete, match=r"topology 'endless' did not run to completion on one process:\n  - "
                                            r"the job did not complete within 1 s \(run_to_completion\(timeout=\)\)"
                       ) as err:
        run_to_completion(b, workers="in-process", config=config, timeout=1.0)
    result = err.value.result
    assert not result.completed and not result.ok
    assert sorted(result["out"]) == sorted(tuple(i) for i in items), "what it did process is in the result"


def test_dead_lettered_tuples_fail_the_run_and_check_false_returns_them(config):
    items = [["a", 1], ["bad", 2], ["b", 3]]
    b = TopologyBuilder("dead")
    b.set_spout("src", ListSpout, params={"items": items})
    b.set_bolt("check", RaiseOnBad, chain=False).shuffle_grouping("src")
    b.set_bolt("out", CollectorBolt).global_grouping("check")
    config = config.replace(max_retries=0)
    with pytest.raises(RunIncomplete, match=r"1 tuple\(s\) dead-lettered \(check 1\)"):
        run_to_completion(b, workers="in-process", config=config, timeout=20)
    result = run_to_completion(b, workers="in-process", config=config, timeout=20, check=False)
    assert result.completed and not result.ok
    assert sorted(result["out"]) == [("a", 1), ("b", 3)]
    assert [(d["unit"], d["key"], d["value"]) for d in result.dead_letters] == [("check", "bad", 2)]
    assert "ValueError: cannot take 2" in result.dead_letters[0]["error"]


def test_a_given_config_starts_fresh_so_a_second_run_on_its_data_dir_outputs_everything_again(config):
    """exactly_once would resume the second run at the first one's final checkpoint, past every item."""
    items = keyed_items(60)
    first = run_to_completion(counting_topology("again", items), workers="in-process", config=config, timeout=20)
    second = run_to_completion(counting_topology("again", items), workers="in-process", config=config, timeout=20)
    assert_counted(first, items)
    assert_counted(second, items)


def test_a_collectors_list_is_emptied_before_and_after_the_run():
    items = keyed_items(30)
    run_to_completion(counting_topology("twice", items), workers="in-process", timeout=20)
    again = run_to_completion(counting_topology("twice", items), workers="in-process", timeout=20)
    assert len(again["all"]) == 30, "not 60: the first run's tuples are gone"
    assert collected("all") == [], "and the run leaves none behind for the next test"
    with pytest.raises(KeyError, match=r"topology 'twice' has no CollectorBolt unit 'count'; its collectors: "
                                       r"'by_key', 'shuffled', 'all'"):
        again["count"]


@pytest.mark.parametrize("chain", [True, False])
def test_a_close_that_raises_fails_the_run_instead_of_passing_for_a_success(config, chain):
    """close() runs after the final status was taken: its error was only logged, and the run passed while
    what the bolt writes at the end was missing. Fused into the spout's SPUs or on SPUs of its own alike."""
    from topology_parts import CloseFailsBolt

    b = TopologyBuilder(f"close-fails-{chain}")
    b.set_spout("src", ListSpout, params={"items": [["a", 1], ["b", 2]]})
    b.set_bolt("tally", CloseFailsBolt, elastic=False, chain=chain).shuffle_grouping("src")
    assert b.build().chained("tally") is chain
    with pytest.raises(RunIncomplete, match=r"finish\(\) or close\(\) raised 1 time\(s\) \(tally 1\): what those bolts or "
                                            r"spouts emit or write at the end"):
        run_to_completion(b, workers="in-process", config=config, timeout=20)


def test_rows_a_bolt_emits_in_close_into_an_exactly_once_sink_fail_the_run_saying_why(config, tmp_path):
    """The sink publishes only what a checkpoint covers, and close() runs after the final one: the rows were
    dropped with a warning and the run passed. Now the sink's close() says so and the run fails."""
    from spark_sink import SparkSink
    from topology_parts import CountOnClose

    b = TopologyBuilder("close-into-sink")
    b.set_spout("src", ListSpout, params={"items": [["a", 1], ["b", 2], ["a", 3]]})
    b.set_bolt("count", CountOnClose, elastic=False).key_grouping("src")
    b.set_bolt("sink", SparkSink, elastic=False, params={
        "table": "close_counts", "schema": "key STRING, value BIGINT", "engine": "pyarrow",
        "warehouse": str(tmp_path / "warehouse")}).shuffle_grouping("count")
    with pytest.raises(RunIncomplete, match=r"finish\(\) or close\(\) raised 1 time\(s\) \(sink 1\)"):
        run_to_completion(b, workers="in-process", config=config.replace(guarantee="exactly_once"), timeout=30)
