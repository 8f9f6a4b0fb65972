"""Which units send watermarks and which SPUs combine them per channel, decided from the topology."""

from __future__ import annotations

from typing import Any

from esault import Bolt, TopologyBuilder
from esault.dsl.watermark_flow import emits_watermarks, reads_watermarks
from esault.testing import CollectorBolt, ListSpout


class Stamped(ListSpout):
    @classmethod
    def esault_emits_watermarks(cls, params: dict[str, Any]) -> bool:
        return True


class Pass(Bolt):
    def process(self, tup: Any) -> None:
        self.emit(tup.key, tup.value)


def test_a_bolt_combines_watermarks_only_when_every_one_of_its_inputs_sends_them():
    b = TopologyBuilder("flow")
    b.set_spout("stamped", Stamped, 2, params={"items": []})
    b.set_spout("plain", ListSpout, params={"items": []})
    b.set_bolt("hop", Pass, 3).shuffle_grouping("stamped")
    b.set_bolt("two_hops", Pass, 2).key_grouping("hop")
    b.set_bolt("mixed", Pass, 2).key_grouping("hop").key_grouping("plain")
    b.set_bolt("after_mixed", CollectorBolt).shuffle_grouping("mixed")
    t = b.build()
    assert emits_watermarks(t, "stamped") and not emits_watermarks(t, "plain")
    assert reads_watermarks(t, "hop") and reads_watermarks(t, "two_hops")  # a window two hops down is right
    assert not reads_watermarks(t, "mixed") and not reads_watermarks(t, "after_mixed")
    assert not reads_watermarks(t, "stamped")  # a spout sends them, it combines none
