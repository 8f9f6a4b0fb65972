"""ChannelWatermarks: one watermark from several inputs, as Flink combines its input channels.

An input (a channel: an upstream SPU, or a partition inside a source) promises
with each watermark that nothing it sends later is older, so the inputs
together promise only their minimum. An idle input (it has nothing to send
for now) is left out of the minimum until it speaks again, so a silent
partition or a source instance without data does not hold every window back;
when every input is idle the watermark stays where it is. A known input that
has sent nothing yet holds the minimum where it is. The result never
decreases, whatever the inputs do.

Pure: no clock, no actors. The SPU (esault.datapath.watermarks) and the
KafkaSource (per partition) feed it.
"""

from __future__ import annotations

import math
from typing import Hashable, Iterable

NOTHING_YET = -math.inf
"""The watermark of an input that has promised nothing yet (it holds the minimum where it is)."""
SPU_LOCAL_KEY = "esault.input_watermarks"
"""Where an SPU that combines its inputs' watermarks keeps its ChannelWatermarks, in its PEs' spu_local dict."""


class ChannelWatermarks:
    """The minimum watermark over the inputs that are not idle, never decreasing.

    Each mutator returns True when `watermark` or `idle` changed (what a sender forwards). O(inputs) per
    change (a few upstream SPUs, a few hundred partitions at most: watermarks arrive on a cadence, never per
    tuple); reading `watermark` is O(1). Inputs that were removed stay removed: a late message of a retired
    input never brings it back.
    """

    __slots__ = ("_values", "_idle", "_gone", "watermark", "idle")

    def __init__(self, inputs: Iterable[Hashable] = ()) -> None:
        self._values: dict[Hashable, float] = {}
        self._idle: set[Hashable] = set()
        self._gone: set[Hashable] = set()
        self.watermark = NOTHING_YET
        """The combined watermark: no input sends anything older from now on (unless it was idle)."""
        self.idle = False
        """Every input is idle (and there is at least one): a sender says so downstream."""
        for name in inputs:
            self.expect(name)

    def __contains__(self, name: Hashable) -> bool:
        return name in self._values

    def __len__(self) -> int:
        return len(self._values)

    def inputs(self) -> list[Hashable]:
        return list(self._values)

    def value(self, name: Hashable) -> float | None:
        """The input's own watermark (None if unknown)."""
        return self._values.get(name)

    def is_gone(self, name: Hashable) -> bool:
        return name in self._gone

    def is_idle(self, name: Hashable) -> bool:
        return name in self._idle

    def expect(self, name: Hashable) -> bool:
        """A new input, not heard from yet: it holds the watermark until it sends one."""
        if name in self._values or name in self._gone:
            return False
        self._values[name] = NOTHING_YET
        return self._combine()

    def advance(self, name: Hashable, value: float) -> bool:
        """The input promises `value` (a lower value than it promised before changes nothing) and is active."""
        if name in self._gone:
            return False
        values = self._values
        if value > values.get(name, NOTHING_YET):
            values[name] = value
        elif name not in values:
            values[name] = NOTHING_YET
        self._idle.discard(name)
        return self._combine()

    def set_idle(self, name: Hashable, idle: bool = True) -> bool:
        """The input has nothing to send for now (idle), or is active again without a newer watermark."""
        if name in self._gone:
            return False
        self._values.setdefault(name, NOTHING_YET)
        if idle:
            self._idle.add(name)
        else:
            self._idle.discard(name)
        return self._combine()

    def inherit(self, name: Hashable, giver: Hashable) -> bool:
        """A new input starts at `giver`'s watermark (what it takes over was behind that promise); one heard
        from already keeps its own."""
        start = self._values.get(giver)
        if name in self._gone or start is None or self._values.get(name, NOTHING_YET) > NOTHING_YET:
            return False
        self._values[name] = start
        return self._combine()

    def readmit(self, name: Hashable) -> None:
        """A removed input may be expected again (a source partition that moved back to this instance)."""
        self._gone.discard(name)

    def remove(self, name: Hashable) -> bool:
        """The input is gone for good (retired, lost): it no longer holds the minimum back."""
        self._gone.add(name)
        self._idle.discard(name)
        if self._values.pop(name, None) is None:
            return False
        return self._combine()

    def _combine(self) -> bool:
        before = (self.watermark, self.idle)
        idle = self._idle
        active = [v for name, v in self._values.items() if name not in idle]
        if active:
            low = min(active)
            if low > self.watermark:
                self.watermark = low
        self.idle = bool(self._values) and not active
        return (self.watermark, self.idle) != before

    def check_invariants(self) -> None:
        """Raise AssertionError if the state is inconsistent (tests call this after every step)."""
        assert self._idle <= set(self._values), "an idle input that is not an input"
        assert not (self._gone & set(self._values)), "a removed input still counted"
        active = [v for name, v in self._values.items() if name not in self._idle]
        assert not active or self.watermark >= min(active), "the watermark is below its inputs' minimum"
        assert self.idle == (bool(self._values) and not active)
        assert not math.isnan(self.watermark)
