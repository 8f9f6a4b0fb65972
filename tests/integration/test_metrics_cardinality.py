"""Through a real job: after splits and merges, /metrics names only live SPUs, yet totals count all.

Every split creates an SPU; a long-running elastic job would otherwise grow one
set of series per SPU it ever had. The exposition is read with
prometheus_client's own generate_latest on the process registry, as /metrics serves it.
"""

from __future__ import annotations

import threading

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from esault import TopologyBuilder
from esault.metrics import REGISTRY, STATS, register_stats_collector
from esault.job.job import Job
from esault.testing import CollectorBolt, wait_until
from test_split_merge import assert_exact, sequenced_items
from topology_parts import GATES, GatedListSpout, SequenceCheckBolt

PROBING_ONLY = dict(
    probe_period=0.02,
    overload_reaction_time=10_000, underload_reaction_time=10_000,  # probes, never decides on its own
)
"""The latency monitor probes every SPU (so esault_probe_latency_seconds has spu labels too), while
the splits and merges stay the test's own."""


def exposed_spus(topology: str, metric: str | None = None) -> set[str]:
    """Distinct `spu` label values of `topology` in the process's exposition (optionally of one family)."""
    register_stats_collector(REGISTRY, STATS)  # idempotent: what the metrics server registers
    labels = set()
    for family in text_string_to_metric_families(generate_latest(REGISTRY).decode()):
        if metric is not None and family.name != metric:
            continue
        for sample in family.samples:
            if sample.labels.get("topology") == topology and "spu" in sample.labels:
                labels.add(sample.labels["spu"])
    return labels


def live_spus(job: Job, units: tuple[str, ...] | None = None) -> set[str]:
    """The SPU ids (as label text) of `units` (default: every unit) that run now."""
    return {str(spu) for unit in (units or tuple(u.name for u in job.topology.units)) for spu in job.spus(unit)}


def test_after_splits_and_merges_the_exposition_names_only_live_spus_and_totals_count_every_tuple(
        cluster, config, monkeypatch):
    # All SPUs run in this process. With no reporting window a retired SPU is gone from every
    # per-SPU view at once, so the totals below can only come from the units' retired totals.
    monkeypatch.setattr(STATS, "report_retired_for", 0.0)
    name = "cardinality"
    keys, per_key = 200, 20
    items = sequenced_items(keys, per_key, seed=9)
    GATES[name] = threading.Event()
    builder = TopologyBuilder(name)
    builder.set_spout("src", GatedListSpout, params={"items": items, "gate": name, "hold_at": len(items) // 3})
    builder.set_bolt("check", SequenceCheckBolt, 2, pe_idle_timeout=None, **PROBING_ONLY).key_grouping("src")
    builder.set_bolt("out", CollectorBolt, params={"name": name}).global_grouping("check")
    job = cluster.submit(builder.build(), config.replace(elasticity=True, tick_interval=0.005))
    wait_until(lambda: job.status()["units"]["check"]["processed"] >= len(items) // 4, 30,
               message="a quarter of the input processed")
    wait_until(lambda: exposed_spus(name, "esault_probe_latency_seconds") == live_spus(job, ("check",)), 30,
               message="every check SPU probed")

    ever = live_spus(job)
    first = job.split("check", job.spus("check")[0])
    second = job.split("check", first.receiver)
    job.merge("check", first.giver)
    GATES[name].set()  # the rest of the input flows while the next reconfigurations run
    third = job.split("check", job.spus("check")[-1])
    job.merge("check", second.receiver)
    job.merge("check", third.receiver)
    ever |= {str(r.receiver) for r in (first, second, third)}
    assert job.wait(60), job.status()

    retired = ever - live_spus(job)
    assert len(retired) == 3, f"three SPUs were merged away, got {sorted(retired)}"
    # A merged-away SPU stops after merge() returns: wait for its series to go, not for a time.
    wait_until(lambda: exposed_spus(name) == live_spus(job), 10,
               message=f"the exposition's spu labels to be the live SPUs {sorted(live_spus(job))}")
    assert not exposed_spus(name) & retired
    assert exposed_spus(name, "esault_probe_latency_seconds") <= live_spus(job, ("check",))

    status = job.status()
    assert status["units"]["check"]["processed"] == len(items), "retired SPUs' tuples still count"
    assert status["units"]["out"]["processed"] == len(items)
    assert status["units"]["src"]["emitted"] == len(items)
    assert_exact(name, keys, per_key)

    job.stop()
    assert job.final_status["units"]["check"]["processed"] == len(items)
    assert exposed_spus(name) == set(), "a stopped job leaves no series behind"
