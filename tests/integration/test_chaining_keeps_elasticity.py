"""A bolt keeps the elasticity it declares: one that can scale on its own is never fused into its upstream
(real actors, one process)."""

from __future__ import annotations

from typing import Any

from esault import Bolt, TopologyBuilder
from esault.testing import CollectorBolt, ListSpout, collected


class Upper(Bolt):
    def process(self, tup: Any) -> None:
        self.emit(tup.key, str(tup.value).upper())


def build(name: str, **up_options: Any):
    b = TopologyBuilder(name)
    b.set_spout("src", ListSpout, params={"items": [(i, "x") for i in range(300)]})
    b.set_bolt("up", Upper, **up_options).shuffle_grouping("src")  # the spout's parallelism, its only reader
    b.set_bolt("out", CollectorBolt, params={"name": name}).global_grouping("up")
    return b.build()


def test_a_default_elastic_bolt_beside_its_spout_is_probed_and_scales_on_spus_of_its_own(cluster, config):
    job = cluster.submit(build("elastic-up"), config.replace(elasticity=True))
    assert "up" in job.probers and "up" in job.latency_controllers, "the built-in controller watches it"
    result = job.rescale("up", 3)
    assert len(job.spus("up")) == 3, result
    assert job.wait(30), job.status()
    job.stop()
    assert sorted(collected("elastic-up")) == [(i, "X") for i in range(300)]
    up = job.final_status["units"]["up"]
    assert up["processed"] == 300 and "chained_into" not in up


def test_a_bolt_that_cannot_scale_is_still_fused_into_its_spout_and_scales_with_it(cluster, config):
    job = cluster.submit(build("fixed-up", elastic=False), config.replace(elasticity=True))
    assert "up" not in job.latency_controllers
    assert job.wait(30), job.status()
    job.stop()
    assert job.final_status["units"]["up"]["chained_into"] == "src"
    assert sorted(collected("fixed-up")) == [(i, "X") for i in range(300)]
