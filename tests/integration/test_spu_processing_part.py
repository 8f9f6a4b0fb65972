"""A bolt SPU is one actor over parts; what differs per kind is its processing part, and the actor calls
each of the part's hooks in one place (esault.datapath.processing). A real BoltSpuActor runs here with a
small recording part in place of KeyedProcessing or ChainProcessing."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from esault import JobConfig, TopologyBuilder
from esault.clock import ManualClock
from esault.datapath.actors import processing_of
from esault.datapath.inbox import ControlFirstInbox
from esault.datapath.bolt_spu import BoltSpuActor
from esault.datapath.chain_spu import ChainInbox, ChainProcessing
from esault.datapath.context import JobContext
from esault.datapath.keyed import KeyedProcessing
from esault.datapath.sender import StartCheck
from esault.datapath.ticker import Ticker
from esault.dsl.chain_join_bolt import ChainJoinBolt
from esault.messages.checkpoints import Barrier, CheckpointStart
from esault.messages.control import SpuConfig
from esault.messages.data import DataBatch, Tick
from esault.messages.handoff import (
    CancelReconfiguration,
    EpochMarker,
    ForwardMarker,
    InstallRoutes,
    MarkerSeen,
    PrepareGive,
    PrepareReceive,
    RouteSpec,
)
from esault.testing import CollectorBolt, ListSpout, wait_until

UPSTREAM = 7
"""The one upstream SPU whose barriers the checkpoints below align over."""


class Ping:
    """A message only the recording part knows (its handler is the part's own): like a chain's link message,
    it asks the checkpoint alignment again whether the epoch can be sealed."""


class Mailbox:
    """Stands in for the unit, the acker, the coordinator and a downstream SPU: keeps what it is told."""

    def __init__(self) -> None:
        self.told: list[Any] = []

    def tell(self, message: Any) -> None:
        self.told.append(message)


def recording_kind(calls: list[tuple], ready: threading.Event) -> type:
    """A processing part class whose hooks append (hook, argument) to `calls`, on the actor's thread."""

    class Recording:
        def __init__(self, spu: Any) -> None:
            calls.append(("built", type(spu).__name__))
            self.spu = spu

        def install(self, handlers: dict) -> None:
            calls.append(("install", DataBatch in handlers))
            handlers[Ping] = self._on_ping

        def _on_ping(self, msg: Ping) -> None:
            calls.append(("ping", None))
            self.spu.barriers.check()

        def process_data(self, msg: DataBatch) -> None:
            calls.append(("process_data", tuple(msg.keys)))

        def on_tick(self, now: float) -> None:
            calls.append(("on_tick", now))

        def restore(self, epoch: int) -> None:
            calls.append(("restore", epoch))

        def ready_to_seal(self, epoch: int) -> bool:
            calls.append(("ready_to_seal", epoch))
            return ready.is_set()

        def end_input(self) -> None:
            calls.append(("end_input", None))

        def snapshot(self, snapshot: Any) -> None:
            calls.append(("snapshot", snapshot.ack.epoch))

        def sealed(self, epoch: int, final: bool) -> None:
            calls.append(("sealed", (epoch, final)))

        def give(self, giving: Any, receivers: dict) -> None:
            calls.append(("give", giving.reconfig_id))

        def on_prepare_receive(self, msg: PrepareReceive) -> None:
            calls.append(("on_prepare_receive", msg.reconfig_id))

        def cancel(self, reconfig_id: int) -> None:
            calls.append(("cancel", reconfig_id))

        def routes_installed(self) -> None:
            calls.append(("routes_installed", None))

    return Recording


@pytest.fixture
def spu(tmp_path):
    """Start a BoltSpuActor of bolt "mid" (one downstream route) with the recording part; stop it after."""
    started: list[Any] = []
    unit, downstream = Mailbox(), Mailbox()
    b = TopologyBuilder("parts")
    b.set_spout("src", ListSpout, params={"items": []})
    b.set_bolt("mid", CollectorBolt).shuffle_grouping("src")
    b.set_bolt("out", CollectorBolt).shuffle_grouping("mid")
    topology = b.build()
    ticker = Ticker(ManualClock(), 1.0)  # never started: the test tells the ticks itself
    job = JobContext(topology, JobConfig(data_dir=tmp_path), ManualClock(), tmp_path, acker=Mailbox(),
                     ticker=ticker, checkpoints=Mailbox())
    route = RouteSpec("out", "shuffle", None, {2: downstream}, 1)

    def start(calls: list[tuple], ready: threading.Event, restore_epoch: int | None = None, kind: Any = None) -> Any:
        cfg = SpuConfig("parts", "mid", 1, None, (route,), extra={"unit_ref": unit}, restore_epoch=restore_epoch)
        ref = BoltSpuActor.start(cfg, topology.unit("mid"), job, kind or recording_kind(calls, ready))
        started.append(ref)
        return ref

    start.route = route
    yield start
    for ref in started:
        ref.stop()


def hooks(calls: list[tuple]) -> list[str]:
    return [name for name, _ in calls]


def test_the_actor_calls_each_processing_hook_once_per_message_that_asks_for_it(spu):
    calls: list[tuple] = []
    ready = threading.Event()
    ready.set()
    ref = spu(calls, ready, restore_epoch=4)
    batch = DataBatch(UPSTREAM, "src", ["a", "b"], [1, 2], [], [])
    sent = [(batch, "process_data"), (Tick(3.0), "on_tick"), (Ping(), "ping"),
            (PrepareReceive(11, ((0, 9, 5),)), "on_prepare_receive"), (CancelReconfiguration(11), "cancel"),
            (InstallRoutes(12, spu.route, {}), "routes_installed"),
            (PrepareGive(13, ((0, 9, 5),), {5: Mailbox()}, frozenset({UPSTREAM}), False), None),
            (EpochMarker(13, UPSTREAM), "give")]
    for message, hook in sent:
        ref.tell(message)
        if hook is not None:
            wait_until(lambda: hook in hooks(calls), 10, message=f"{hook} after {type(message).__name__}")
    assert ref.ask(StartCheck()) is None  # the mailbox barrier: every message before it was handled
    assert calls[:3] == [("built", "BoltSpuActor"), ("install", True), ("restore", 4)], \
        "built once, installed once, restored at start"
    assert hooks(calls)[3:] == ["process_data", "on_tick", "ping", "on_prepare_receive", "cancel",
                                "routes_installed", "give"]
    assert ("process_data", ("a", "b")) in calls and ("on_tick", 3.0) in calls and ("give", 13) in calls


def test_a_checkpoint_asks_the_part_until_it_is_ready_then_snapshots_and_seals_once(spu):
    calls: list[tuple] = []
    ready = threading.Event()
    ref = spu(calls, ready)
    ref.tell(CheckpointStart(1, frozenset({UPSTREAM})))
    ref.tell(Barrier(1, UPSTREAM))
    wait_until(lambda: "ready_to_seal" in hooks(calls), 10, message="aligned: the part is asked")
    assert "snapshot" not in hooks(calls), "not ready: no snapshot yet"
    ready.set()
    ref.tell(Ping())
    wait_until(lambda: "sealed" in hooks(calls), 10, message="sealed")
    ref.ask(StartCheck())
    sealing = [c for c in calls if c[0] in ("end_input", "snapshot", "sealed")]
    assert sealing == [("snapshot", 1), ("sealed", (1, False))], "not the final epoch: the input goes on"


def test_the_final_checkpoint_ends_the_parts_input_before_its_snapshot(spu):
    calls: list[tuple] = []
    ready = threading.Event()
    ready.set()
    ref = spu(calls, ready)
    ref.tell(CheckpointStart(2, frozenset({UPSTREAM}), final=True))
    ref.tell(Barrier(2, UPSTREAM))
    wait_until(lambda: "sealed" in hooks(calls), 10, message="sealed")
    ref.ask(StartCheck())
    assert [c for c in calls if c[0] in ("end_input", "snapshot", "sealed")] == [
        ("end_input", None), ("snapshot", 2), ("sealed", (2, True))]


def test_every_bolt_spu_answers_an_upstream_givers_forward_marker_whatever_its_processing_part(spu):
    """A join chain may read a keyed bolt: when that bolt splits, the receivers wait for every downstream SPU's
    MarkerSeen, so the actor answers ForwardMarker itself, not its part."""
    calls: list[tuple] = []
    ref = spu(calls, threading.Event())
    receiver = Mailbox()
    ref.tell(ForwardMarker(21, 3, {5: receiver}))
    wait_until(lambda: receiver.told, 10, message="MarkerSeen at the receiver")
    assert receiver.told == [MarkerSeen(21, 3, 1)]
    assert hooks(calls) == ["built", "install"], "no hook of the part is involved"


def test_a_chain_join_runs_the_chain_part_and_every_other_bolt_the_keyed_part():
    b = TopologyBuilder("kinds")
    b.set_spout("r", ListSpout, params={"items": []})
    b.set_spout("s", ListSpout, params={"items": []})
    b.join("j", left="r", right="s", on="k", window=1.0, mode="chain", parallelism=2)
    b.set_bolt("out", CollectorBolt).shuffle_grouping("j")
    topology = b.build()
    assert issubclass(topology.unit("j").cls, ChainJoinBolt)
    assert processing_of(topology.unit("j")) is ChainProcessing
    assert ChainProcessing.inbox is ChainInbox  # its links pass queued entries
    assert processing_of(topology.unit("out")) is KeyedProcessing


def test_the_actor_takes_the_mailbox_its_processing_kind_names(spu):
    calls: list[tuple] = []
    ready = threading.Event()
    ready.set()
    plain = spu(calls, ready)
    assert type(plain.actor_inbox) is ControlFirstInbox  # the recording kind names none: the default

    class Urgent(ControlFirstInbox):
        """a kind's own mailbox"""

    kind = recording_kind([], ready)
    kind.inbox = Urgent
    assert type(spu([], ready, kind=kind).actor_inbox) is Urgent


def blocking_kind(calls: list[tuple], ready: threading.Event, gate: threading.Event) -> type:
    """The recording part, whose batch with key "wait" keeps the SPU's thread until `gate` is set."""

    class Blocking(recording_kind(calls, ready)):
        def process_data(self, msg: DataBatch) -> None:
            if "wait" in msg.keys:
                gate.wait(30)
            super().process_data(msg)
    return Blocking


class Recorder(Mailbox):
    """A receiver that also writes what it is told into the calls, so the order against the hooks shows."""

    def __init__(self, calls: list[tuple]) -> None:
        super().__init__()
        self.calls = calls

    def tell(self, message: Any) -> None:
        super().tell(message)
        self.calls.append(("told", message))


def test_a_forward_marker_is_answered_as_it_arrives_not_after_the_batches_queued_before_it(spu):
    """The receiver's moved keys wait for every downstream SPU's MarkerSeen. The giver's outputs before the
    marker are ahead of it in this SPU's FIFO data lane, so whatever the receiver sends after the answer
    comes behind them: the answer need not wait for the backlog (esault/datapath/inbox.py)."""
    calls: list[tuple] = []
    gate = threading.Event()
    ref = spu(calls, threading.Event(), kind=blocking_kind(calls, threading.Event(), gate))
    receiver = Recorder(calls)
    try:
        ref.tell(DataBatch(3, "src", ["wait"], [1], [], []))  # the SPU's thread is held by this batch
        ref.tell(DataBatch(3, "src", ["before"], [2], [], []))
        ref.tell(ForwardMarker(21, 3, {5: receiver}))
        assert receiver.told == [MarkerSeen(21, 3, 1)], "answered as it entered the mailbox"
        assert ("process_data", ("before",)) not in calls, "while the batch before it still waits"
    finally:
        gate.set()
    ref.ask(StartCheck())  # in band: behind the marker
    assert receiver.told == [MarkerSeen(21, 3, 1)], "and not again when the SPU reached it"
    assert ("process_data", ("before",)) in calls


def test_a_forward_marker_behind_a_checkpoint_barrier_is_answered_after_the_held_data_then_on_arrival_again(spu):
    """An aligning SPU holds the data of a channel whose barrier came, so the giver's outputs before its marker
    may run after a receiver's: the marker then waits with its channel and is answered in order."""
    calls: list[tuple] = []
    ready = threading.Event()
    ready.set()
    ref = spu(calls, ready)
    receiver = Recorder(calls)
    ref.tell(CheckpointStart(2, frozenset({UPSTREAM, 3})))
    ref.tell(Barrier(2, 3))  # giver 3's channel is held from here until UPSTREAM's barrier
    ref.tell(DataBatch(3, "src", ["held"], [1], [], []))
    ref.tell(ForwardMarker(21, 3, {5: receiver}))
    ref.ask(StartCheck())
    assert receiver.told == [] and ("process_data", ("held",)) not in calls
    ref.tell(Barrier(2, UPSTREAM))
    ref.ask(StartCheck())
    order = [c[0] for c in calls if c[0] in ("sealed", "process_data", "told")]
    assert order == ["sealed", "process_data", "told"], calls
    assert receiver.told == [MarkerSeen(21, 3, 1)]
    later = Mailbox()
    ref.tell(ForwardMarker(22, 3, {6: later}))
    assert later.told == [MarkerSeen(22, 3, 1)], "no alignment open: answered on arrival again"
