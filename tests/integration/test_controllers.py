"""Controllers on a running job: DS2 follows a load step, a user controller's failures never stop the job."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from esault import TopologyBuilder
from esault.control import Controller, DS2Controller, Rescale
from esault.testing import CollectorBolt, ListSpout, wait_until
from test_split_merge import assert_exact, sequenced_items
from topology_parts import PHASES, PhasedSpout, SlowSequenceBolt

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
from controllers.hot_spu import HotSpuController  # noqa: E402


def phased_job(cluster, config, name: str, keys: int = 100, per_key: int = 60):
    items = sequenced_items(keys, per_key, seed=len(name))
    PHASES[name] = {"mode": "burst", "burst_until": len(items) // 2}
    builder = TopologyBuilder(name)
    builder.set_spout("src", PhasedSpout, params={"items": items, "phase": name}, max_pending=400)
    # ~2 ms of GIL-releasing work per tuple: one SPU does ~500/s, so the burst saturates it for seconds
    builder.set_bolt("check", SlowSequenceBolt, 1, params={"seconds": 0.002}, pe_idle_timeout=None,
                     elastic=False).key_grouping("src")
    builder.set_bolt("out", CollectorBolt, params={"name": name}).global_grouping("check")
    return cluster.submit(builder.build(), config), keys, per_key


class BrokenBacklogSpout(ListSpout):
    def backlog(self) -> int:
        raise RuntimeError("the source lost count")


def backlog_job(cluster, config, name: str, spout: type):
    items = sequenced_items(40, 25, seed=len(name))
    builder = TopologyBuilder(name)
    builder.set_spout("src", spout, params={"items": items}, max_pending=20)
    builder.set_bolt("check", SlowSequenceBolt, 1, params={"seconds": 0.001}, elastic=False).key_grouping("src")
    builder.set_bolt("out", CollectorBolt, params={"name": name}).global_grouping("check")
    return cluster.submit(builder.build(), config), len(items)


def spout_counts(job) -> dict:
    return next(s.as_dict() for s in job.spu_counters() if s.unit == "src" and s.spu >= 0)


def test_a_spouts_backlog_is_exported_and_a_failing_backlog_call_loses_nothing(cluster, config):
    job, total = backlog_job(cluster, config, "backlog", ListSpout)
    seen = wait_until(lambda: (b := spout_counts(job).get("backlog", 0)) > 100 and b, 30,
                      message="the throttled spout reports what it holds back")
    assert seen <= total
    assert job.wait(60), job.status()
    wait_until(lambda: spout_counts(job).get("backlog", 0) == 0, 10, message="nothing left once it finished")
    assert_exact("backlog", 40, 25)
    broken, _ = backlog_job(cluster, config, "nobacklog", BrokenBacklogSpout)
    assert broken.wait(60), broken.status()
    assert broken.status()["units"]["src"]["user_errors"] >= 1
    assert_exact("nobacklog", 40, 25)


def test_ds2_rescales_a_saturated_bolt_in_one_step_and_back_to_one_in_the_lull(cluster, config):
    job, keys, per_key = phased_job(cluster, config, "ds2")
    ds2 = DS2Controller(["check"], interval=0.5, cooldown=1.0, max_spus=4, headroom=1.5)
    runner = job.add_controller(ds2)
    first = wait_until(lambda: next((d for d in runner.decisions if d.result is not None), None), 30,
                       message="DS2 scaled the saturated bolt out")
    assert isinstance(first.operation, Rescale) and first.operation.spus >= 2 and first.error is None
    assert first.result.action == "assign_workload" and len(first.result.started) == first.operation.spus - 1
    PHASES["ds2"]["mode"] = "idle"
    wait_until(lambda: len(job.spus("check")) == 1, 30, message="DS2 scaled back to one SPU with no input")
    PHASES["ds2"]["mode"] = "end"
    assert job.wait(60), job.status()
    assert_exact("ds2", keys, per_key)
    assert {h.reason for h in job.scaling_history} == {"controller"}


class Broken(Controller):
    interval = 0.05

    def __init__(self) -> None:
        self.calls = 0

    def decide(self, snapshot):
        self.calls += 1
        if self.calls % 2:
            raise RuntimeError("a bug in the user's policy")
        if self.calls % 4 == 2:  # returned together, they apply atomically: the good one does not either
            return [Rescale("check", 2), "not an operation"]
        return [Rescale("nope", 2)]


def test_a_controller_that_raises_or_returns_nonsense_is_logged_and_the_job_goes_on(cluster, config):
    job, keys, per_key = phased_job(cluster, config, "broken", per_key=10)
    broken = Broken()
    runner = job.add_controller(broken)
    wait_until(lambda: broken.calls >= 4 and len(runner.decisions) >= 3, 30, message="several periods")
    errors = [d.error for d in runner.decisions]
    assert all(errors) and any("which is not an operation" in e for e in errors)
    assert any("no unit 'nope'" in e for e in errors)
    assert len(job.spus("check")) == 1 and not job.scaling_history, "a refused group applies nothing"
    PHASES["broken"]["mode"] = "end"
    assert job.wait(60), job.status()
    assert_exact("broken", keys, per_key)


class AlwaysRaises(Controller):
    interval = 0.05

    def __init__(self) -> None:
        self.calls = 0

    def decide(self, snapshot):
        self.calls += 1
        raise RuntimeError("a bug in the user's policy")


def test_a_controller_whose_decide_always_raises_logs_a_few_tracebacks_then_counts(cluster, config, caplog):
    caplog.set_level(logging.ERROR, logger="esault")
    job, keys, per_key = phased_job(cluster, config, "raising", per_key=10)
    raising = AlwaysRaises()
    runner = job.add_controller(raising)
    wait_until(lambda: raising.calls >= 30, 30, message="thirty periods")
    runner.stop()
    logged = [r for r in caplog.records if "decide() raised" in r.getMessage()]
    tracebacks = [r for r in logged if r.exc_info]
    assert len(tracebacks) == 5 and logged[:5] == tracebacks, [r.getMessage() for r in logged]
    assert "later ones are counted" in tracebacks[-1].getMessage()
    assert "RuntimeError(\"a bug in the user's policy\") at " in tracebacks[0].getMessage()
    assert all("so far" in r.getMessage() for r in logged[5:]), "after five, only counts (one line per 10 s)"
    total = [r.getMessage() for r in caplog.records if "error(s) in total" in r.getMessage()]
    assert len(total) == 1 and total[0].startswith(f"controller AlwaysRaises: decide(): {raising.calls} error(s) "
                                                   "in total")
    PHASES["raising"]["mode"] = "end"
    assert job.wait(60), job.status()
    assert_exact("raising", keys, per_key)


def test_the_example_user_controller_splits_the_busiest_spu_with_assign_workload(cluster, config):
    job, keys, per_key = phased_job(cluster, config, "hot")
    hot = HotSpuController("check", busy_above=0.3, max_spus=3, interval=0.3)
    runner = job.add_controller(hot)
    wait_until(lambda: len(runner.decisions) >= 2, 30, message="the hot SPU split twice")
    assert [d.error for d in runner.decisions][:2] == [None, None] and len(job.spus("check")) == 3
    PHASES["hot"]["mode"] = "end"
    assert job.wait(60), job.status()
    assert_exact("hot", keys, per_key)


class Watcher(Controller):
    """Decides nothing; keeps what it saw."""

    interval = 0.1

    def __init__(self) -> None:
        self.seen: list = []

    def decide(self, snapshot):
        self.seen.append(snapshot)
        return []


def test_a_controller_sees_probe_latencies_and_key_samples_of_every_bolt_it_could_scale(cluster, config):
    job, keys, per_key = phased_job(cluster, config, "watch", per_key=30)  # elasticity off: no built-in probes
    assert not job.probers
    watcher = Watcher()
    job.add_controller(watcher)
    assert set(job.probers) == {"check"}, "the global-grouped collector cannot scale: not probed"

    def probed():
        return next((m for snap in watcher.seen for m in snap.unit("check").spus.values()
                     if m.probe_latency is not None and m.key_hashes), None)

    metrics = wait_until(probed, 30, message="a snapshot with a probe's latency and the SPU's key samples")
    assert 0 < metrics.probe_latency < 30 and all(isinstance(h, int) for h in metrics.key_hashes)
    assert any(p.unit == "check" for snap in watcher.seen for p in snap.probes)
    PHASES["watch"]["mode"] = "end"
    assert job.wait(60), job.status()
    assert_exact("watch", keys, per_key)
