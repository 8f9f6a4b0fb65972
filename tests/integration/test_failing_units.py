"""User code that fails on real actors: the job fails fast and says where, or the error is logged in full.

A unit that cannot start fails the submit; a spout that keeps raising is
stopped; a bolt exception is logged with its traceback and file:line while
every other tuple goes on.
"""

from __future__ import annotations

import logging

import pykka
import pytest

from esault import Bolt, TopologyBuilder, UnitStartError
from esault.testing import CollectorBolt, ListSpout, collected, wait_until


class UnopenableSpout(ListSpout):
    def open(self, context):
        raise RuntimeError("the source is not there")


class UnopenableBolt(Bolt):
    def open(self, context):
        raise OSError("no database")

    def process(self, tup):
        pass


class BrokenSpout(ListSpout):
    def next_tuple(self):
        raise RuntimeError("broken source")


class FlakySpout(ListSpout):
    """Raises on every other call: never `max_spout_errors` (2) in a row, so it is never stopped."""

    def next_tuple(self):
        self.calls = getattr(self, "calls", 0) + 1
        if self.calls % 2:
            raise ConnectionError("try again")
        super().next_tuple()


class RaiseOnOdd(Bolt):
    def process(self, tup):
        if tup.value % 2:
            raise ValueError(f"odd value {tup.value}")
        self.emit(tup.key, tup.value)


def line_of(cls: type, text: str) -> int:
    """The line in this file of `text` inside `cls` (where the test expects file:line to point)."""
    import inspect

    lines, first = inspect.getsourcelines(cls)
    return first + next(i for i, line in enumerate(lines) if text in line)


def spus_running() -> int:
    return sum(1 for ref in pykka.ActorRegistry.get_all() if ref.actor_class.__name__.endswith("SpuActor"))


def items(n: int) -> list[tuple[str, int]]:
    return [(f"k{i}", i) for i in range(n)]


def test_a_spout_whose_open_raises_fails_the_submit_with_its_file_and_line(cluster, config):
    before = spus_running()
    b = TopologyBuilder("unopenable")
    b.set_spout("src", UnopenableSpout, params={"items": items(10)})
    b.set_bolt("out", CollectorBolt).shuffle_grouping("src")
    with pytest.raises(UnitStartError, match=rf"spout 'src' open\(\) raised RuntimeError: the source is not there at "
                                             rf"{__file__}:{line_of(UnopenableSpout, 'raise')}; the job cannot run"):
        cluster.submit(b.build(), config)
    assert "unopenable" not in cluster.jobs
    assert spus_running() == before, "the failed job's SPUs were stopped"


def test_a_bolt_whose_open_raises_fails_the_submit(cluster, config):
    b = TopologyBuilder("unopenable_bolt")
    b.set_spout("src", ListSpout, params={"items": items(10)})
    b.set_bolt("db", UnopenableBolt, chain=False).shuffle_grouping("src")
    with pytest.raises(UnitStartError, match=r"bolt 'db' constructor or open\(\) raised OSError: no database at "
                                             rf"{__file__}:{line_of(UnopenableBolt, 'raise')}"):
        cluster.submit(b.build(), config)


def test_a_spout_raising_max_spout_errors_times_in_a_row_is_stopped_and_the_job_says_why(cluster, config):
    b = TopologyBuilder("broken")
    b.set_spout("src", BrokenSpout, params={"items": items(10)})
    b.set_bolt("out", CollectorBolt).shuffle_grouping("src")
    job = cluster.submit(b.build(), config.replace(max_spout_errors=5))
    assert job.wait(20) is False, "a failed spout ends the wait, as a failure"
    errors = job.spout_errors()
    assert errors == [f"spout 'src' next_tuple() raised 5 times in a row (last: RuntimeError: broken source at "
                      f"{__file__}:{line_of(BrokenSpout, 'raise')}); it was stopped. Fix the source, or raise "
                      "JobConfig.max_spout_errors (5) for one that recovers"]
    assert job.status()["spout_errors"] == errors
    assert job.status()["units"]["src"]["user_errors"] == 5, "not called again after it was stopped"


def test_a_spout_that_recovers_between_errors_is_never_stopped(cluster, config):
    b = TopologyBuilder("flaky")
    b.set_spout("src", FlakySpout, params={"items": items(200), "per_call": 10})
    b.set_bolt("out", CollectorBolt, params={"name": "flaky"}).shuffle_grouping("src")
    job = cluster.submit(b.build(), config.replace(max_spout_errors=2))
    assert job.wait(20), (job.spout_errors(), job.status())
    assert job.spout_errors() == []
    assert sorted(collected("flaky")) == sorted(items(200))


def test_a_bolt_exception_is_logged_with_its_traceback_and_the_other_tuples_go_on(cluster, config, caplog):
    caplog.set_level(logging.ERROR, logger="esault")
    b = TopologyBuilder("odd")
    b.set_spout("src", ListSpout, params={"items": items(40)})
    b.set_bolt("check", RaiseOnOdd, chain=False).shuffle_grouping("src")
    b.set_bolt("out", CollectorBolt, params={"name": "odd"}).global_grouping("check")
    job = cluster.submit(b.build(), config.replace(max_retries=0))
    assert job.wait(20), job.status()
    assert sorted(collected("odd")) == sorted((f"k{i}", i) for i in range(0, 40, 2))
    given_up = [r for r in caplog.records if "dead-lettered" in r.getMessage()]
    assert len(given_up) == 5, "the first 5 in full, the other 15 only counted"
    where = f"{__file__}:{line_of(RaiseOnOdd, 'raise')}"
    first = given_up[0]
    assert f"bolt 'check' process() raised ValueError: odd value" in first.getMessage() and where in first.getMessage()
    assert first.exc_info is not None and first.exc_info[0] is ValueError
    assert "raise ValueError(f\"odd value" in caplog.text, "the traceback shows the user's line"
    job.stop()
    assert any("bolt 'check' gave up tuples: 20 error(s) in total, 15 not logged" in r.getMessage()
               for r in caplog.records), "the SPU's stop reports what was only counted"


def test_a_job_with_no_worker_to_run_its_bolts_fails_the_submit_before_anything_starts(config):
    """Pins what the issue reported as a silent run: bolts launch before spouts, so no SPU runs."""
    from esault import LocalCluster, ResourceError

    before = spus_running()
    b = TopologyBuilder("nobody")
    b.set_spout("src", ListSpout, params={"items": items(10)})
    b.set_bolt("out", RaiseOnOdd, chain=False).shuffle_grouping("src")  # a bolt for the workers
    with LocalCluster(listen="127.0.0.1:0") as static:  # a static cluster no worker joined
        with pytest.raises(ResourceError, match=r"no worker process has joined the driver; start one with "
                                                r"`esault worker --driver HOST:PORT`"):
            static.submit(b.build(), config)
        assert spus_running() == before, "not even the spout started"
