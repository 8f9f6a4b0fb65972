"""Stream joins on real actors: every pair exactly once while the chain grows, shrinks and its keys move."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest

from esault import TopologyBuilder, TopologyError
from esault.dsl.join_bolt import JoinBolt
from esault.testing import CollectorBolt, ListSpout, collected, wait_until

STAGES: dict[str, int] = {}


class StagedSpout(ListSpout):
    """Emits items up to holds[STAGES[stage]]; the test moves the stage on."""

    def __init__(self, items: list, stage: str, holds: list, per_call: int = 16) -> None:
        super().__init__(items, per_call)
        self.stage, self.holds = stage, holds

    def limit(self) -> int:
        return self.holds[STAGES[self.stage]]


def odd_sum(r: dict, s: dict) -> bool:
    return (r["k"] + s["x"]) % 3 == 0


def make_stream(n: int, seed: int) -> list:
    rng = random.Random(seed)
    ts, out = 0, []
    for i in range(n):
        ts += rng.randint(0, 2)
        out.append((rng.choice("abc"), {"id": i, "ts": ts, "k": rng.randint(0, 4), "x": rng.randint(0, 20)}))
    return out


def oracle(lefts, rights, window):
    checks = {"j": lambda r, s: r["k"] == s["k"], "near": lambda r, s: abs(r["x"] - s["x"]) <= 1, "odd": odd_sum}
    return Counter((name, lk, r["id"], s["id"]) for lk, r in lefts for rk, s in rights if lk == rk
                   and abs(r["ts"] - s["ts"]) <= window for name, check in checks.items() if check(r, s))


def join_topology(lefts, rights, window, stage, holds_l, holds_r, workers=2, shed=None, odd: Any = odd_sum,
                  collector: type = CollectorBolt):
    b = TopologyBuilder("joins")
    b.set_spout("orders", StagedSpout, params={"items": lefts, "stage": stage, "holds": holds_l})
    b.set_spout("payments", StagedSpout, params={"items": rights, "stage": stage, "holds": holds_r})
    b.join("j", "orders", "payments", on="k", window=window, zeta=3, workers=workers, flush_interval=None,
           also=[{"name": "near", "kind": "band", "on": "x", "band": 1}, {"name": "odd", "kind": odd}],
           parallelism=2, pe_idle_timeout=0.3, shed=shed)
    b.set_bolt("out", collector).global_grouping("j")
    return b


def processed(job, unit):
    return job.status()["units"][unit]["processed"]


def test_every_pair_joins_exactly_once_while_chain_workers_are_added_and_removed_and_keys_move(cluster, config):
    run_and_check_exactly_once(cluster, config)


def run_and_check_exactly_once(cluster, config, **topology_options):
    """Chains of 2 workers, then 4 (and an SPU split moving keys), then 1; the result against a nested loop."""
    window, n = 15, 300
    lefts, rights = make_stream(n, 1), make_stream(n, 2)
    holds = [n // 3, 2 * n // 3, n]
    STAGES["chain"] = 0
    topology = join_topology(lefts, rights, window, "chain", holds, holds, **topology_options).build()
    params = dict(topology.unit("j").params)
    job = cluster.submit(topology, config)
    wait_until(lambda: processed(job, "j") == 2 * holds[0], timeout=20)
    job.assign_logic("j", JoinBolt, {**params, "workers": 4})  # each key's chain: 2 -> 4 workers
    spu = job.spus("j")[0]
    job.split("j", spu)  # keys move between SPUs with their chains
    STAGES["chain"] = 1
    wait_until(lambda: processed(job, "j") == 2 * holds[1], timeout=20)
    job.assign_logic("j", JoinBolt, {**params, "workers": 1})  # 4 -> 1: three merges per key
    STAGES["chain"] = 2
    assert job.wait(60), job.status()
    expected = oracle(lefts, rights, window)
    got = lambda: Counter((v["query"], k, v["left"]["id"], v["right"]["id"]) for k, v in collected("out"))
    wait_until(lambda: sum(got().values()) >= sum(expected.values()), timeout=20)  # idle keys drain their chains
    job.stop()
    assert got() == expected
    assert sum(expected.values()) > 300


def test_load_shedding_counts_every_tuple_it_drops_and_the_run_summary_reports_them(cluster, config):
    lefts, rights = make_stream(400, 3), make_stream(400, 4)
    STAGES["shed"] = 0
    shed = {"tau0": 0.0, "tau1": 1e-9, "tau2": 1.0, "max_shed": 0.5, "period": 0.0}  # always "overloaded"
    b = join_topology(lefts, rights, 10, "shed", [400], [400], shed=shed)
    job = cluster.submit(b.build(), config)
    assert job.wait(60), job.status()
    job.stop()
    status = job.final_status["units"]["j"]
    assert status["shed"] > 0 and status["processed"] == 800
    assert sum(1 for _ in collected("out")) < sum(oracle(lefts, rights, 10).values())


def test_a_join_declaration_says_what_is_wrong():
    b = TopologyBuilder("bad")
    with pytest.raises(TopologyError, match="self-join"):
        b.join("j", "a", "a")
    with pytest.raises(TopologyError, match="window must be a finite number > 0"):
        b.join("j", "a", "b", window=-1)
    with pytest.raises(TopologyError, match="'equi', 'band', a predicate"):
        b.join("j", "a", "b", kind="theta")
    with pytest.raises(TopologyError, match="each of also= must be a dict"):
        b.join("j", "a", "b", also=["x"])


def test_a_stopped_join_resumes_its_chains_from_the_final_checkpoint_and_still_joins_every_pair_once(cluster,
                                                                                                   config):
    window, n = 20, 240
    lefts, rights = make_stream(n, 5), make_stream(n, 6)
    STAGES["resume"] = 0
    build = lambda: join_topology(lefts, rights, window, "resume", [n // 2, n], [n // 2, n], workers=3).build()
    config = config.replace(checkpoint_interval=0.2)
    job = cluster.submit(build(), config)
    wait_until(lambda: processed(job, "j") == n, timeout=20)
    job.stop()  # a final checkpoint: each key's chain (3 workers, tuples not yet met) is in it
    STAGES["resume"] = 1
    job = cluster.submit(build(), config)
    assert job.restored_from is not None
    assert job.wait(60), job.status()
    expected = oracle(lefts, rights, window)
    got = lambda: Counter((v["query"], k, v["left"]["id"], v["right"]["id"]) for k, v in collected("out"))
    wait_until(lambda: sum(got().values()) >= sum(expected.values()), timeout=20)
    job.stop()
    assert got() == expected


def test_the_join_controller_grows_a_busy_join_unit_through_esaults_rescale_and_pairs_stay_exact(cluster, config):
    from esault.joins.controller import JoinController

    window, n = 15, 240
    lefts, rights = make_stream(n, 7), make_stream(n, 8)
    STAGES["grow"] = 0
    job = cluster.submit(join_topology(lefts, rights, window, "grow", [n // 2, n], [n // 2, n]).build(), config)
    wait_until(lambda: processed(job, "j") == n, timeout=20)
    before = len(job.spus("j"))
    controller = JoinController(["j"], interval=0.1, tau0=-1.0, tau2=-0.5, sustain=1, max_spus=before + 1)
    job.add_controller(controller)  # any utilisation is "above tau2": one more SPU, once (max_spus)
    wait_until(lambda: len(job.spus("j")) == before + 1, timeout=20, message="the controller's rescale")
    STAGES["grow"] = 1
    assert job.wait(60), job.status()
    expected = oracle(lefts, rights, window)
    got = lambda: Counter((v["query"], k, v["left"]["id"], v["right"]["id"]) for k, v in collected("out"))
    wait_until(lambda: sum(got().values()) >= sum(expected.values()), timeout=20)
    job.stop()
    assert got() == expected and controller.decisions[0][2] == before + 1


def test_the_run_summary_names_the_tuples_a_join_shed(capsys):
    from esault.cli import _print_status

    unit = {"kind": "bolt", "spus": {1: {}}, "processed": 800, "pes": 3}
    _print_status({"topology": "joins", "units": {"j": {**unit, "shed": 37}, "out": unit}}, 1.0)
    lines = capsys.readouterr().out.splitlines()
    assert "shed 37 under overload" in lines[1] and "shed" not in lines[2]


def test_a_finite_run_with_a_chain_of_several_workers_is_complete_when_the_job_is(cluster, config):
    """Inputs stay unacked until their chain drained, so job.wait() covers the pairs still waiting to cross."""
    window, n = 25, 300
    lefts, rights = make_stream(n, 9), make_stream(n, 10)
    STAGES["finite"] = 0
    job = cluster.submit(join_topology(lefts, rights, window, "finite", [n], [n], workers=3).build(), config)
    assert job.wait(60), job.status()
    job.stop()  # no waiting for idle keys here: a stopped job's queued tuples drain, nothing more
    got = Counter((v["query"], k, v["left"]["id"], v["right"]["id"]) for k, v in collected("out"))
    assert got == oracle(lefts, rights, window)


def test_the_join_example_counts_what_a_nested_loop_counts(cluster, config):
    import json
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
    import joins as example

    job = cluster.submit(example.build_topology(total=300), config)
    assert job.wait(60), job.status()
    job.stop()
    assert json.loads((job.data_dir / "pairs.json").read_text()) == example.oracle(300)
