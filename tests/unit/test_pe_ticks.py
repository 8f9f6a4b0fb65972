"""When a bolt SPU ticks its PEs: never while it receives keys in a hand-off (their held tuples go first);
a join chain's SPU ticks its instance if it asked (a test's gate, say)."""

from __future__ import annotations

from types import SimpleNamespace

from esault.clock import ManualClock
from esault.datapath.chain_spu import ChainProcessing
from esault.datapath.keyed import KeyedProcessing
from esault.datapath.pe_services import PeServices
from pe_parts import touched_keys


def spu_stub(receiving):
    ticked: list[float] = []
    stub = SimpleNamespace(services=PeServices(ManualClock()), _receiving=receiving, _pending=None,
                           ticks=SimpleNamespace(tick=ticked.append),
                           pes=SimpleNamespace(idle_timeout=None, arrived={}))
    return stub, ticked


def test_ticks_pause_while_the_spu_receives_keys_in_a_hand_off_and_resume_after():
    stub, ticked = spu_stub(receiving=object())
    stub.services.ticking.add("k")
    KeyedProcessing.on_tick(stub, 1.0)
    assert ticked == []
    stub._receiving = None
    KeyedProcessing.on_tick(stub, 2.0)
    assert ticked == [2.0]


def test_an_spu_whose_pes_asked_for_no_ticks_does_not_tick_them():
    stub, ticked = spu_stub(receiving=None)
    KeyedProcessing.on_tick(stub, 1.0)
    assert ticked == []


def test_pe_services_keep_the_keys_that_asked_for_ticks():
    services = PeServices(ManualClock(5.0))
    services.ticks("a", True)
    services.ticks("b", True)
    services.ticks("a", False)
    assert services.ticking == {"b"} and services.now() == 5.0


def test_a_join_chain_spu_ticks_its_instance_when_it_asked_even_before_it_knows_its_neighbours():
    ticked: list[float] = []
    stub = SimpleNamespace(services=PeServices(ManualClock()), ticks=SimpleNamespace(tick=ticked.append),
                           _linked=False)
    ChainProcessing.on_tick(stub, 1.0)
    assert ticked == [], "no instance asked for ticks"
    stub.services.ticks(None, True)  # a chain's one instance (not key grouped) asks with key None
    ChainProcessing.on_tick(stub, 2.0)
    assert ticked == [2.0]


def test_under_exactly_once_a_pe_that_only_ticked_is_in_the_next_checkpoint():
    from esault.datapath.pe_manager import PeManager
    from esault.datapath.pe_ticks import PeTicks

    class Ticking:
        def __init__(self, key):
            self.key = key  # as the SPU sets it on every PE it makes
            self.fired = 0

        def on_tick(self, now):
            self.fired += 1  # a window fires: state changes with no tuple

    pes = PeManager(Ticking, per_key=True, idle_timeout=None, track_touched=True)
    pes.create("w")
    assert touched_keys(pes) == {"w"}
    services = PeServices(ManualClock())
    services.ticking.add("w")
    spec = SimpleNamespace(name="win", per_key=True, cls=Ticking)
    PeTicks(spec, pes, services, lambda *a, **k: None, lambda: None, "t").tick(1.0)
    assert pes.get("w").fired == 1
    assert touched_keys(pes) == {"w"}, "what the tick changed enters the next checkpoint"
