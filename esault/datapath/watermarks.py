"""An SPU's watermarks: what it tells its downstream SPUs, and (a bolt SPU) how it combines its inputs'.

In band: a Watermark leaves on every output channel behind the tuples emitted before it (the router is
flushed first), so it never overtakes a tuple on its channel. On a cadence, never per tuple: at the SPU's
tick (50 ms), when the value or the idleness changed, and once a second unchanged (a downstream SPU that
started, or learnt of this one late, has it soon). A bolt SPU combines the watermark of every upstream SPU
that feeds it (`ChannelWatermarks`: the minimum over those not idle) and forwards it, minus its bolt's
`esault_watermark_lag` (a window forwards its inputs' watermark minus its bound). Windows read the combined
watermark through the SPU-local dict (esault.windows.bolt). docs/WINDOWS.md, "Watermarks per channel".

Which upstream SPUs to wait for: the driver tells (WatermarkInputs, from the upstream unit before its SPUs
start, and in an SPU's config when a reconfiguration starts it); a giver's ForwardMarker gives the SPUs that
take its keys its watermark, in band; a retiring SPU's last Watermark (`final`) removes it. A batch from an
SPU not heard of holds the watermark until that SPU sends one.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable

from esault.datapath.context import log
from esault.messages.data import Watermark, WatermarkInputs
from esault.messages.handoff import ForwardMarker
from esault.windows.channel_watermarks import NOTHING_YET, SPU_LOCAL_KEY, ChannelWatermarks

KEEPALIVE_SECONDS = 1.0
"""An unchanged watermark is sent again after this long."""


class WatermarkOut:
    """What one SPU last told every downstream SPU: (watermark, idle), sent again when it changes."""

    __slots__ = ("spu_id", "broadcast", "flush", "value", "idle", "sent_at", "_force", "retired")

    def __init__(self, spu_id: int, broadcast: Callable[[Any], None], flush: Callable[[], None]) -> None:
        self.spu_id = spu_id
        self.broadcast = broadcast  # OutputRouter.broadcast: one message to every downstream SPU
        self.flush = flush  # the SPU's flush: what it emitted so far leaves first
        self.value = NOTHING_YET
        self.idle = False
        self.sent_at = -math.inf
        self._force = False
        self.retired = False

    def publish(self, value: float, idle: bool, now: float) -> None:
        """Send (value, idle) if it changed, if the routes changed, or a second after the last time."""
        if self.retired or (value == NOTHING_YET and not idle):
            return  # gone from the downstream SPUs' inputs, or nothing promised yet
        if (value, idle) == (self.value, self.idle) and not self._force and now - self.sent_at < KEEPALIVE_SECONDS:
            return
        self.value, self.idle, self.sent_at, self._force = value, idle, now, False
        self.flush()
        self.broadcast(Watermark(self.spu_id, value, idle))

    def routes_changed(self) -> None:
        """New downstream SPUs: tell every one at the next tick."""
        self._force = True

    def retire(self) -> None:
        """This SPU sends nothing more: its channel leaves every downstream SPU's minimum (after its output)."""
        if self.retired:
            return
        self.retired = True
        self.flush()
        self.broadcast(Watermark(self.spu_id, self.value, True, True))


def valid(msg: Watermark) -> str | None:
    """Why a received Watermark cannot be used (its fields came over a socket), or None."""
    value = msg.watermark
    if type(msg.sender) is not int or msg.sender < 0:
        return f"sender {msg.sender!r:.40} is not an SPU id"
    if type(value) is not float or math.isnan(value) or value == math.inf:
        return f"watermark {value!r:.40} is not a number below +infinity"
    if type(msg.idle) is not bool or type(msg.final) is not bool:
        return "idle and final must be booleans"
    return None


class InputWatermarks:
    """A bolt SPU's watermark part: its upstream SPUs' watermarks combined, forwarded on its ticks.

    Only the SPU's thread touches it. Made only for an SPU whose every input sends watermarks
    (esault.dsl.watermark_flow.reads_watermarks); other SPUs keep the windows' own tracker.
    """

    def __init__(self, spu_id: int, who: str, local: dict[str, Any], out: WatermarkOut, lag: float,
                 expected: Iterable[int] = ()) -> None:
        self.inputs = ChannelWatermarks(expected)
        self.out = out
        self.lag = lag
        self._who = who
        self._refused = 0
        local[SPU_LOCAL_KEY] = self.inputs  # what WindowBolt fires on

    def on_watermark(self, msg: Watermark) -> None:
        why = valid(msg)
        if why is not None:
            self._refused += 1
            (log.warning if self._refused <= 5 else log.debug)(
                "%s dropped a malformed watermark (%s; %d so far)", self._who, why, self._refused)
            return
        inputs = self.inputs
        if msg.sender not in inputs:  # gone, or never announced: it counts once the driver names it
            log.debug("%s ignored a watermark of SPU %d, not one of its inputs", self._who, msg.sender)
            return
        if msg.final:
            inputs.remove(msg.sender)
        elif msg.idle:
            inputs.advance(msg.sender, msg.watermark)
            inputs.set_idle(msg.sender)
        else:
            inputs.advance(msg.sender, msg.watermark)

    def on_inputs(self, msg: WatermarkInputs) -> None:
        """New inputs hold the watermark before the gone ones stop holding it (a replacement: no rise between)."""
        for spu in msg.added:
            self.inputs.expect(spu)
        for spu in msg.removed:
            self.inputs.remove(spu)

    def saw_data(self, sender: int) -> None:
        """A batch from an SPU this one was not told of (the driver's word is on its way): it holds the minimum
        until it sends a watermark. Per batch, and only for unknown senders."""
        if not self.inputs.is_gone(sender):
            self.inputs.expect(sender)

    def on_forward_marker(self, msg: ForwardMarker) -> None:
        """In band behind the giver's output of the keys it hands off: the SPUs taking them start at its
        watermark (what they will send comes from inputs past it)."""
        for receiver in msg.receivers:
            if receiver != msg.giver:
                self.inputs.expect(receiver)
                self.inputs.inherit(receiver, msg.giver)

    def on_tick(self, now: float) -> None:
        inputs = self.inputs
        self.out.publish(inputs.watermark - self.lag, inputs.idle, now)


class SourceWatermarks:
    """A spout SPU's watermark part: the spout's watermark(), taken when everything it emitted has left."""

    def __init__(self, out: WatermarkOut, who: str) -> None:
        self.out = out
        self.value = NOTHING_YET
        self.idle = False
        self._who = who
        self._errors = 0

    def capture(self, spout: Any) -> None:
        """Read the spout's watermark: call only when no tuple it emitted is held back (max_spout_pending),
        so the value covers only tuples that left before it."""
        try:
            value = spout.watermark()
            idle = bool(spout.watermark_idle())
        except Exception as exc:
            self._errors += 1
            (log.warning if self._errors <= 5 else log.debug)("%s watermark() raised %r", self._who, exc)
            return
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
                self._errors += 1
                (log.warning if self._errors <= 5 else log.debug)(
                    "%s watermark() returned %r; return a number or None", self._who, value)
                return
            if value == math.inf:  # the end of its input: it holds nobody back (as a finished source)
                idle = True
            else:
                self.value = max(self.value, float(value))
        self.idle = idle

    def on_tick(self, now: float, finished: bool) -> None:
        """A finished source is idle for good: it holds nobody back (no watermark of +infinity: windows of a
        bounded input fire at its end by flush_on_close, inside the final checkpoint)."""
        self.out.publish(self.value, self.idle or finished, now)
