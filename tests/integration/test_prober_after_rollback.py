"""The latency prober keeps probing the live SPUs when one it knows was stopped (rollback or merge).

Between a rollback's abandon and the SpusChanged that names the relaunched SPUs, a tick finds an SPU
actor of the driver (e.g. the Spark sink's) already stopped. That must cost nothing but that SPU: no
traceback every tick, and the other SPUs are still probed. Its probe series goes with it, and a reply
it sent before it stopped must not bring the series back (a merged-away SPU would stay in /metrics).
"""

from __future__ import annotations

import logging
import threading

import pykka

from esault import JobConfig, TopologyBuilder
from esault.clock import ManualClock
from esault.control.events import ControlEvents
from esault.datapath.context import JobContext
from esault.job.prober import LatencyProberActor
from esault.messages.control import Probe, ProbeReturned
from esault.messages.data import Tick
from esault.testing import CollectorBolt, ListSpout
from test_metrics_cardinality import exposed_spus


class ProbeSink(pykka.ThreadingActor):
    """Stands in for an SPU: records the probes it is sent."""

    def __init__(self) -> None:
        super().__init__()
        self.probes: list[int] = []
        self.seen = threading.Event()

    def on_receive(self, message):
        if isinstance(message, Probe):
            self.probes.append(message.probe_id)
            self.seen.set()


def prober_of(tmp_path, name: str, spus: dict, **elasticity):
    """A LatencyProberActor for bolt "out" of a job `name`, probing `spus` (id -> mailbox)."""
    b = TopologyBuilder(name)
    b.set_spout("src", ListSpout, params={"items": []})
    b.set_bolt("out", CollectorBolt, **elasticity).shuffle_grouping("src")
    topology = b.build()
    job = JobContext(topology, JobConfig(data_dir=tmp_path), ManualClock(), tmp_path)
    return LatencyProberActor.start(job, topology.unit("out"), ControlEvents(), spus)


def test_a_tick_skips_an_spu_a_rollback_stopped_and_still_probes_the_live_ones(tmp_path, caplog):
    live, gone = ProbeSink.start(), ProbeSink.start()
    gone.stop()
    prober = prober_of(tmp_path, "probed", {1: live, 2: gone})
    try:
        with caplog.at_level(logging.ERROR, logger="esault"):
            for now in (10.0, 20.0, 30.0):
                prober.tell(Tick(now))
            prober.ask(Tick(40.0))  # the mailbox barrier: every tick before it is handled
        assert len(live.proxy().probes.get()) == 4, "the live SPU is probed on every tick"
        state = prober.proxy()
        assert set(state.spus.get()) == {1}, "the stopped SPU is forgotten until SpusChanged names the new ones"
        assert {spu for spu, _ in state.outstanding.get().values()} == {1}
        assert not [r for r in caplog.records if "latency prober" in r.getMessage()], "no traceback per tick"
    finally:
        prober.stop()
        live.stop()


def test_a_stopped_spus_probe_series_goes_and_its_late_reply_does_not_bring_it_back(tmp_path):
    live, leaving = ProbeSink.start(), ProbeSink.start()
    prober = prober_of(tmp_path, "probed-gone", {1: live, 2: leaving}, probe_period=1.0, max_latency=5.0)
    try:
        prober.ask(Tick(10.0))
        first = leaving.proxy().probes.get()[0]
        prober.ask(ProbeReturned(2, first, 10.0, 0))
        assert exposed_spus("probed-gone", "esault_probe_latency_seconds") == {"2"}, "an answered probe is recorded under its SPU"

        prober.ask(Tick(11.0))  # SPU 2 is probed again, and answers before it stops (merged away)
        late = leaving.proxy().probes.get()[-1]
        leaving.stop()
        prober.ask(Tick(12.0))  # finds it stopped, while its reply is still within max_latency
        assert exposed_spus("probed-gone", "esault_probe_latency_seconds") == set(), "the stopped SPU's series goes with it"
        prober.ask(ProbeReturned(2, late, 11.0, 0))
        assert exposed_spus("probed-gone", "esault_probe_latency_seconds") == set(), "a reply it sent before it stopped does not bring it back"
    finally:
        prober.stop()
        live.stop()
