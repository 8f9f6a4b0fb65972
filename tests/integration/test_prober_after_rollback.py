"""The latency prober keeps probing the live SPUs when one it knows was discarded by a rollback.

Between a rollback's abandon and the SpusChanged that names the relaunched SPUs, a tick finds an SPU
actor of the driver (e.g. the Spark sink's) already stopped. That must cost nothing but that SPU: no
traceback every tick, and the other SPUs are still probed.
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
from esault.messages.control import Probe
from esault.messages.data import Tick
from esault.testing import CollectorBolt, ListSpout


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


def test_a_tick_skips_an_spu_a_rollback_stopped_and_still_probes_the_live_ones(tmp_path, caplog):
    b = TopologyBuilder("probed")
    b.set_spout("src", ListSpout, params={"items": []})
    b.set_bolt("out", CollectorBolt).shuffle_grouping("src")
    topology = b.build()
    job = JobContext(topology, JobConfig(data_dir=tmp_path), ManualClock(), tmp_path)
    live, gone = ProbeSink.start(), ProbeSink.start()
    gone.stop()
    prober = LatencyProberActor.start(job, topology.unit("out"), ControlEvents(), {1: live, 2: gone})
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
