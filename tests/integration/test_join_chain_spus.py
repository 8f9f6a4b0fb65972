"""A join chain whose workers are SPUs (mode="chain"): every pair exactly once while workers are added at and
removed from the tail, across checkpoints and a restart on fewer SPUs, with shedding and the JoinController."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from esault import ConfigError, TopologyBuilder, TopologyError
from esault.testing import CollectorBolt, collected, wait_until
from test_joins import STAGES, StagedSpout, make_stream, odd_sum  # noqa: F401 (odd_sum: workers import it here)


def oracle(lefts, rights, window):
    """A chain join is global: pairs of any keys, each leaving with the left tuple's key."""
    checks = {"j": lambda r, s: r["k"] == s["k"], "near": lambda r, s: abs(r["x"] - s["x"]) <= 1, "odd": odd_sum}
    return Counter((name, lk, r["id"], s["id"]) for lk, r in lefts for _, s in rights
                   if abs(r["ts"] - s["ts"]) <= window for name, check in checks.items() if check(r, s))


def chain_topology(lefts, rights, window, stage, holds, spus=2, zeta=3, odd: Any = odd_sum,
                   collector: type = CollectorBolt, **join_options):
    b = TopologyBuilder("chainjoin")
    b.set_spout("orders", StagedSpout, params={"items": lefts, "stage": stage, "holds": holds})
    b.set_spout("payments", StagedSpout, params={"items": rights, "stage": stage, "holds": holds})
    b.join("j", "orders", "payments", on="k", window=window, zeta=zeta, mode="chain", parallelism=spus,
           also=[{"name": "near", "kind": "band", "on": "x", "band": 1}, {"name": "odd", "kind": odd}],
           **join_options)
    b.set_bolt("out", collector).global_grouping("j")
    return b


def pairs():
    return Counter((v["query"], k, v["left"]["id"], v["right"]["id"]) for k, v in collected("out"))


def processed(job, unit):
    return job.status()["units"][unit]["processed"]


@pytest.mark.parametrize("guarantee", ["exactly_once", "none"])
def test_every_pair_joins_once_while_the_chain_grows_and_shrinks_at_its_tail(cluster, config, guarantee):
    run_grow_and_shrink(cluster, config.replace(guarantee=guarantee, checkpoint_interval=0.3))


def run_grow_and_shrink(cluster, config, **topology_options):
    """2 chain SPUs, then 4 (two tails added), then 2 again (a merge and a rescale), against a nested loop."""
    window, n = 15, 300
    lefts, rights = make_stream(n, 1), make_stream(n, 2)
    holds = [n // 3, 2 * n // 3, n]
    STAGES["grow"] = 0
    job = cluster.submit(chain_topology(lefts, rights, window, "grow", holds, **topology_options).build(), config)
    wait_until(lambda: processed(job, "j") == 2 * holds[0], timeout=20)
    job.split("j", job.spus("j")[0])  # a third worker, at the tail
    job.split("j", job.spus("j")[0])  # a fourth
    assert len(job.spus("j")) == 4
    STAGES["grow"] = 1
    wait_until(lambda: processed(job, "j") == 2 * holds[1], timeout=20)
    job.merge("j", job.spus("j")[-1])  # the tail merges into its left neighbour
    job.rescale("j", 2)
    assert len(job.spus("j")) == 2
    STAGES["grow"] = 2
    assert job.wait(60), {u: (v["emitted"], v["processed"], {s: (x["inflight"], x["processed"], x["emitted"])
                                                              for s, x in v["spus"].items()})
                          for u, v in job.status()["units"].items()}
    job.stop()
    expected = oracle(lefts, rights, window)
    assert pairs() == expected
    assert sum(expected.values()) > 1000
    return job


def test_a_stopped_chain_resumes_from_its_final_checkpoint_on_fewer_workers_and_still_joins_every_pair_once(
        cluster, config):
    window, n = 20, 240
    lefts, rights = make_stream(n, 5), make_stream(n, 6)
    STAGES["resume"] = 0
    config = config.replace(checkpoint_interval=0.2)
    job = cluster.submit(chain_topology(lefts, rights, window, "resume", [n // 2, n], spus=3).build(), config)
    wait_until(lambda: processed(job, "j") == n, timeout=20)
    job.stop()  # the final checkpoint holds three workers' tuples
    STAGES["resume"] = 1
    job = cluster.submit(chain_topology(lefts, rights, window, "resume", [n // 2, n], spus=2).build(), config)
    assert job.restored_from is not None
    assert job.wait(60), job.status()
    job.stop()
    assert pairs() == oracle(lefts, rights, window)


def test_a_chain_join_refuses_at_least_once_and_says_what_to_run_instead(cluster, config):
    b = chain_topology([], [], 5, "x", [0])
    STAGES["x"] = 0
    with pytest.raises(ConfigError, match="exactly_once.*or 'none'"):
        cluster.submit(b.build(), config.replace(guarantee="at_least_once"))
    with pytest.raises(TopologyError, match="set parallelism=3 instead of workers=3"):
        TopologyBuilder("t").join("j", "a", "b", mode="chain", workers=3)
    with pytest.raises(TopologyError, match="mode must be 'keyed'"):
        TopologyBuilder("t").join("j", "a", "b", mode="global")


def test_the_join_controller_adds_a_chain_worker_at_the_tail_and_pairs_stay_exact(cluster, config):
    from esault.joins.controller import JoinController

    window, n = 15, 240
    lefts, rights = make_stream(n, 7), make_stream(n, 8)
    STAGES["ctl"] = 0
    job = cluster.submit(chain_topology(lefts, rights, window, "ctl", [n // 2, n]).build(), config)
    wait_until(lambda: processed(job, "j") == n, timeout=20)
    before = job.spus("j")
    controller = JoinController(["j"], interval=0.1, tau0=-1.0, tau2=-0.5, sustain=1, max_spus=len(before) + 1)
    job.add_controller(controller)  # any utilisation is "above tau2": one more chain worker, once (max_spus)
    wait_until(lambda: len(job.spus("j")) == len(before) + 1, timeout=20, message="the controller's rescale")
    assert job.spus("j")[:-1] == before and job.spus("j")[-1] > max(before)  # the new SPU is the new tail
    STAGES["ctl"] = 1
    assert job.wait(60), job.status()
    job.stop()
    assert pairs() == oracle(lefts, rights, window)


def test_a_chain_sheds_at_its_entry_spus_counts_every_dropped_tuple_and_joins_the_rest_exactly(cluster, config):
    window, n = 10, 400
    lefts, rights = make_stream(n, 3), make_stream(n, 4)
    STAGES["shed"] = 0
    shed = {"tau0": 0.0, "tau1": 1e-9, "tau2": 1.0, "max_shed": 0.5, "period": 0.0}  # always "overloaded"
    job = cluster.submit(chain_topology(lefts, rights, window, "shed", [n], spus=3, shed=shed).build(),
                         config.replace(guarantee="none"))
    assert job.wait(60), job.status()
    job.stop()
    status = job.final_status["units"]["j"]
    assert status["shed"] > 0 and status["processed"] == 2 * n
    got = pairs()
    assert sum(got.values()) < sum(oracle(lefts, rights, window).values())
    assert not got - oracle(lefts, rights, window) and max(got.values()) == 1  # what is admitted joins exactly
