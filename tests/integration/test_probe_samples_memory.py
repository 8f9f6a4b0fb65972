"""The driver keeps one key sample per SPU, however long an elastic job runs.

Every probe answer carries up to 1,024 sampled key hashes (where to split the SPU). The prober
records each answer in the job's control-event log, which holds the last 10,000 events: when
every record kept its sample, an elastic job's driver grew by ~37 KB a probe, toward ~370 MB.
A real prober actor, SPUs standing in that answer every probe with a full sample.
"""

from __future__ import annotations

import pykka

from esault import JobConfig, TopologyBuilder
from esault.clock import ManualClock
from esault.control.events import ControlEvents, ProbeRecord
from esault.datapath.context import JobContext
from esault.job.prober import LatencyProberActor
from esault.messages.control import Probe, ProbeReturned
from esault.messages.data import Tick
from esault.testing import CollectorBolt, ListSpout

SAMPLE = 1024


class AnsweringSpu(pykka.ThreadingActor):
    """Answers each probe at once, with a full key sample that differs from probe to probe."""

    def __init__(self, spu_id: int) -> None:
        super().__init__()
        self.spu_id = spu_id
        self.answered = 0

    def on_receive(self, message):
        if isinstance(message, Probe):
            base = message.probe_id * SAMPLE
            message.reply_to.tell(ProbeReturned(self.spu_id, message.probe_id, message.sent_at, 100,
                                                tuple(range(base, base + SAMPLE))))
            self.answered += 1
        return self.answered  # to an ask: how many probes it answered so far


def test_after_many_probes_the_event_log_holds_one_key_sample_per_spu_the_newest(tmp_path):
    b = TopologyBuilder("sampled")
    b.set_spout("src", ListSpout, params={"items": []})
    # max_latency beyond the beats' span: on a loaded machine an answer may come after several beats, and a
    # probe timed out is not recorded when its answer comes (not what this test is about)
    b.set_bolt("out", CollectorBolt, probe_period=1.0, max_latency=1000.0).shuffle_grouping("src")
    topology = b.build()
    job = JobContext(topology, JobConfig(data_dir=tmp_path), ManualClock(), tmp_path)
    spus = {1: AnsweringSpu.start(1), 2: AnsweringSpu.start(2)}
    events = ControlEvents()
    prober = LatencyProberActor.start(job, topology.unit("out"), events, spus)
    reader = events.cursor()
    try:
        for beat in range(60):
            prober.ask(Tick(10.0 + beat))  # a probe to each SPU per beat; answers come on their own
        answered = sum(spu.ask(Tick(0.0)) for spu in spus.values())  # each SPU's mailbox barrier: answers sent
        prober.ask(Tick(0.0))  # the prober's barrier: the answers were recorded (a time before its next beat: no probe)
        records = [e for e in events.since(reader)[0] if isinstance(e, ProbeRecord) and e.sample.latency is not None]
        assert len(records) == answered == 120, "every answer is in the log"
        sampled = [r for r in records if r.hashes]
        assert sorted(r.spu for r in sampled) == [1, 2], "one record per SPU keeps its sample"
        for record in sampled:
            newest = max(r.sample.sent_at for r in records if r.spu == record.spu)
            assert record.sample.sent_at == newest and len(record.hashes) == SAMPLE
        assert sum(len(r.hashes) for r in records) == 2 * SAMPLE
    finally:
        prober.stop()
        for spu in spus.values():
            spu.stop()
