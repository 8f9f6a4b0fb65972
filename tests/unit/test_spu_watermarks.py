"""An SPU's watermark part: combined per upstream SPU, forwarded on the tick behind its output, nothing trusted."""

from __future__ import annotations

import logging
import math

import pytest

from esault.datapath.watermarks import KEEPALIVE_SECONDS, InputWatermarks, SourceWatermarks, WatermarkOut
from esault.messages.data import Watermark, WatermarkInputs
from esault.messages.handoff import ForwardMarker
from esault.windows.channel_watermarks import SPU_LOCAL_KEY


class Wire:
    """What the part sends, in order: 'flush' when the SPU's output left, then each broadcast message."""

    def __init__(self) -> None:
        self.sent: list = []

    def out(self, spu: int = 9) -> WatermarkOut:
        return WatermarkOut(spu, self.sent.append, lambda: self.sent.append("flush"))

    def marks(self) -> list[tuple[float, bool, bool]]:
        return [(m.watermark, m.idle, m.final) for m in self.sent if isinstance(m, Watermark)]


def part(wire: Wire, expected=(1, 2), lag: float = 0.0) -> InputWatermarks:
    local: dict = {}
    p = InputWatermarks(9, "test SPU", local, wire.out(), lag, expected)
    assert local[SPU_LOCAL_KEY] is p.inputs  # what a WindowBolt of this SPU fires on
    return p


def test_it_forwards_the_minimum_of_its_upstream_spus_on_the_tick_after_its_output_and_only_when_it_moved():
    wire = Wire()
    p = part(wire, lag=100)
    p.on_watermark(Watermark(1, 5_000.0))
    p.on_tick(0.0)
    assert wire.sent == []  # SPU 2 said nothing yet: nothing is promised
    p.on_watermark(Watermark(2, 3_000.0))
    p.on_tick(0.05)
    assert wire.sent == ["flush", Watermark(9, 2_900.0)]  # its bolt's lag (a window's bound) taken off
    p.on_tick(0.1)
    assert len(wire.marks()) == 1
    p.on_tick(0.05 + KEEPALIVE_SECONDS)
    assert wire.marks()[-1] == (2_900.0, False, False)  # unchanged, once a second


@pytest.mark.parametrize("bad", [Watermark(1, math.nan), Watermark(1, math.inf), Watermark(-3, 1.0),
                                 Watermark(1, 1.0, idle=1), Watermark(1, "7")])
def test_a_malformed_watermark_is_dropped_and_the_others_still_count(bad, caplog):
    caplog.set_level(logging.WARNING, logger="esault")
    wire = Wire()
    p = part(wire)
    p.on_watermark(bad)
    p.on_watermark(Watermark(1, 10.0))
    p.on_watermark(Watermark(2, 20.0))
    assert p.inputs.watermark == 10.0
    assert "dropped a malformed watermark" in caplog.text


def test_a_watermark_from_an_spu_it_was_not_told_of_is_ignored_but_its_data_holds_the_watermark():
    wire = Wire()
    p = part(wire, expected=(1,))
    p.on_watermark(Watermark(1, 10.0))
    p.on_watermark(Watermark(7, 99.0))
    assert 7 not in p.inputs and p.inputs.watermark == 10.0
    p.saw_data(7)  # a batch from it: the driver's word is on its way, it holds from now
    p.on_watermark(Watermark(1, 50.0))
    assert p.inputs.watermark == 10.0
    p.on_watermark(Watermark(7, 30.0))
    assert p.inputs.watermark == 30.0


def test_inputs_start_and_leave_by_the_drivers_word_and_a_retired_spu_by_its_final_watermark():
    wire = Wire()
    p = part(wire)
    p.on_watermark(Watermark(1, 10.0))
    p.on_watermark(Watermark(2, 40.0))
    p.on_inputs(WatermarkInputs(frozenset({3}), frozenset({1})))  # 3 replaces lost 1: it holds, no rise
    assert p.inputs.watermark == 10.0
    p.on_watermark(Watermark(3, 60.0))
    assert p.inputs.watermark == 40.0
    p.on_watermark(Watermark(2, 40.0, idle=True, final=True))
    assert 2 not in p.inputs and p.inputs.watermark == 60.0
    p.saw_data(2)  # its last batches, late: it does not come back
    assert 2 not in p.inputs


def test_the_spus_taking_a_givers_keys_start_at_its_watermark_behind_its_forward_marker():
    wire = Wire()
    p = part(wire)
    p.on_watermark(Watermark(1, 100.0))
    p.on_watermark(Watermark(2, 500.0))
    p.on_forward_marker(ForwardMarker(4, 1, {1: None, 5: None}))  # 1 gives keys to new SPU 5
    assert p.inputs.value(5) == 100.0 and p.inputs.watermark == 100.0
    p.on_watermark(Watermark(1, 400.0))
    assert p.inputs.watermark == 100.0  # 5 holds it at what 1 had promised
    p.on_watermark(Watermark(5, 450.0))
    assert p.inputs.watermark == 400.0


def test_when_every_input_is_idle_it_says_so_downstream_and_its_watermark_stays():
    wire = Wire()
    p = part(wire)
    p.on_watermark(Watermark(1, 100.0))
    p.on_watermark(Watermark(2, 300.0))
    p.on_watermark(Watermark(1, 100.0, idle=True))
    p.on_tick(0.0)
    p.on_watermark(Watermark(2, 300.0, idle=True))
    p.on_tick(0.05)
    assert wire.marks() == [(300.0, False, False), (300.0, True, False)]


def test_a_retiring_spu_sends_its_final_watermark_behind_its_output():
    wire = Wire()
    out = wire.out()
    out.publish(70.0, False, 0.0)
    out.retire()
    assert wire.sent[-2:] == ["flush", Watermark(9, 70.0, True, True)]


class Source:
    def __init__(self) -> None:
        self.value, self.idle = None, False

    def watermark(self):
        return self.value

    def watermark_idle(self):
        return self.idle


def test_a_source_watermark_is_sent_when_it_moves_and_a_finished_source_is_idle():
    wire, spout = Wire(), Source()
    s = SourceWatermarks(wire.out(), "test spout")
    s.capture(spout)
    s.on_tick(0.0, False)
    assert wire.sent == []
    spout.value = 1_000
    s.capture(spout)
    s.on_tick(0.05, False)
    spout.value = 500  # a source's watermark never goes back
    s.capture(spout)
    s.on_tick(0.1, True)
    assert wire.marks() == [(1_000.0, False, False), (1_000.0, True, False)]


def test_a_source_watermark_that_is_not_a_number_is_refused(caplog):
    caplog.set_level(logging.WARNING, logger="esault")
    wire, spout = Wire(), Source()
    s = SourceWatermarks(wire.out(), "test spout")
    spout.value = "soon"
    s.capture(spout)
    s.on_tick(0.0, False)
    assert wire.sent == [] and "watermark() returned 'soon'" in caplog.text


def test_a_retired_spu_sends_its_final_watermark_once_and_nothing_after():
    wire = Wire()
    out = wire.out()
    out.publish(70.0, False, 0.0)
    out.retire()
    out.retire()
    out.publish(90.0, False, 5.0)
    assert wire.marks() == [(70.0, False, False), (70.0, True, True)]
