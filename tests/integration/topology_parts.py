"""Bolts and spouts used by the integration tests (importable by module path)."""

from __future__ import annotations

import os
import threading
from typing import Any

from esault import Bolt
from esault.dsl.aggregation import PartialAggregate
from esault.testing import CollectorBolt, ListSpout

GATES: dict[str, threading.Event] = {}
SEEN: dict[str, set] = {}


class GatedListSpout(ListSpout):
    """Emits items[:hold_at], then waits (without blocking its actor) until GATES[gate] is set."""

    def __init__(self, items: list, gate: str, hold_at: int, per_call: int = 64) -> None:
        super().__init__(items, per_call)
        self.gate = gate
        self.hold_at = hold_at

    def limit(self) -> int:
        return len(self.items) if GATES[self.gate].is_set() else self.hold_at


class SequenceCheckBolt(Bolt):
    """Per-key PE: inputs carry per-key sequence numbers 1, 2, 3...; emits (seq, in_order)."""

    def open(self, context: Any) -> None:
        self.last = 0
        self.violations = 0

    def process(self, tup: Any) -> None:
        in_order = tup.value == self.last + 1
        if not in_order:
            self.violations += 1
        self.last = tup.value
        self.emit(self.key, [tup.value, in_order])


HELD: dict[str, threading.Event] = {}
"""HoldingSequenceCheckBolt's gates: set once one of its PEs holds a tuple."""


class HoldingSequenceCheckBolt(SequenceCheckBolt):
    """SequenceCheckBolt whose process() holds its tuple until GATES[gate] is set (after setting HELD[gate]):
    its SPU answers nothing meanwhile, so an operation that needs it waits at its first step."""

    def __init__(self, gate: str) -> None:
        self.gate = gate

    def process(self, tup: Any) -> None:
        HELD[self.gate].set()
        GATES[self.gate].wait(60)
        super().process(tup)


class SequenceCheckBoltV2(SequenceCheckBolt):
    """The same check, a new version (for assign_logic): it reports in_order as 1/0, so a test sees which
    code processed each tuple, and it reads the old version's state (`last`, `violations`)."""

    def process(self, tup: Any) -> None:
        in_order = tup.value == self.last + 1
        if not in_order:
            self.violations += 1
        self.last = tup.value
        self.emit(self.key, [tup.value, int(in_order)])


class RaiseOnBadBolt(Bolt):
    """Raises for keys starting with 'bad'; passes the rest on."""

    def process(self, tup: Any) -> None:
        if str(tup.key).startswith("bad"):
            raise ValueError(f"cannot handle {tup.key}")
        self.emit(tup.key, tup.value)


class LoseFirstAttemptBolt(Bolt):
    """Holds (defers) the first attempt of every key named in params and never acks it: a lost tuple."""

    def __init__(self, lose: list, seen: str) -> None:
        self.lose = set(lose)
        self.seen_name = seen

    def process(self, tup: Any) -> None:
        seen = SEEN.setdefault(self.seen_name, set())
        if tup.key in self.lose and tup.key not in seen:
            seen.add(tup.key)
            self.defer()  # never acked: the tree times out and the spout replays it
            return
        self.emit(tup.key, tup.value)


class SlowBolt(Bolt):
    """Simulated work of `seconds` per tuple (an Event wait stands in for I/O)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._work = threading.Event()

    def process(self, tup: Any) -> None:
        self._work.wait(self.seconds)
        self.emit(tup.key, tup.value)

    def snapshot_state(self) -> dict[str, Any]:
        return {}  # stateless: the Event is a tool, not state a checkpoint could hold


class BadValueBolt(Bolt):
    """Emits a value msgpack cannot carry for key 'x'."""

    def process(self, tup: Any) -> None:
        self.emit(tup.key, object() if tup.key == "x" else tup.value)


class ExpiringCountBolt(Bolt):
    """Counts silently; emits its total only when its PE expires."""

    def open(self, context: Any) -> None:
        self.count = 0

    def process(self, tup: Any) -> None:
        self.count += 1

    def on_expire(self) -> None:
        self.emit(self.key, self.count)


class PhasedSpout(ListSpout):
    """A scripted load: emits freely while PHASES[name] is 'burst', holds while 'idle', finishes on 'end'."""

    def __init__(self, items: list, phase: str, per_call: int = 64) -> None:
        super().__init__(items, per_call)
        self.phase = phase

    def limit(self) -> int:
        state = PHASES[self.phase]
        if state["mode"] == "burst":
            return min(len(self.items), state["burst_until"])
        if state["mode"] == "idle":
            return self.position
        return len(self.items)


PHASES: dict[str, dict] = {}


class SlowSequenceBolt(SequenceCheckBolt):
    """SequenceCheckBolt with `seconds` of simulated, GIL-releasing work per tuple."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def process(self, tup: Any) -> None:
        _WORK.wait(self.seconds)
        super().process(tup)


_WORK = threading.Event()


class BackgroundAckBolt(Bolt):
    """Defers every input; a background thread acks them later, failing the first try of 'retry*' keys."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.queue: list = []
        self.lock = threading.Lock()
        self.wake = threading.Event()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def snapshot_state(self) -> dict[str, Any]:
        return {}  # what it holds is deferred work the acker tracks, not state a checkpoint could hold

    def process(self, tup: Any) -> None:
        anchor = self.defer()
        with self.lock:
            self.queue.append((tup.copy(), anchor))  # the Tuple passed in is valid only during process()
        self.wake.set()

    def _run(self) -> None:
        seen = SEEN.setdefault(self.name, set())
        while not self.stop.is_set():
            self.wake.wait(0.05)
            self.wake.clear()
            with self.lock:
                batch, self.queue = self.queue, []
            for tup, anchor in batch:
                if str(tup.key).startswith("retry") and tup.key not in seen:
                    seen.add(tup.key)
                    anchor.fail(f"commit of {tup.key} failed, try again")
                else:
                    DONE.setdefault(self.name, []).append(tup.key)
                    anchor.ack()

    def close(self) -> None:
        self.stop.set()


DONE: dict[str, list] = {}


class DriverCollectorBolt(CollectorBolt):
    """A CollectorBolt that stays in the driver process, where the test reads what it collected."""

    esault_placement = "driver"


class Relay(Bolt):
    """Passes each tuple on unchanged: a stateless hop whose SPU can die without taking any state along."""

    def process(self, tup: Any) -> None:
        self.emit(tup.key, tup.value)


class SlowIncrementBolt(Bolt):
    """Per key: emits (key, 1) per tuple after `seconds` of simulated work: stateless counting."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def process(self, tup: Any) -> None:
        _WORK.wait(self.seconds)
        self.emit(tup.key, 1)


class GatedIncrementBolt(Bolt):
    """Per key: emits (key, 1) per tuple, but holds each tuple while the file `gate` exists (at most a minute):
    a gate across processes, so what reaches the SPU meanwhile waits in its inbox."""

    def __init__(self, gate: str) -> None:
        self.gate = gate

    def process(self, tup: Any) -> None:
        for _ in range(12_000):
            if not os.path.exists(self.gate):
                break
            _WORK.wait(0.005)
        self.emit(tup.key, 1)


class ChunkListSpout(ListSpout):
    """ListSpout that emits `per_call` items at a time with emit_batch (one msg_id per chunk)."""

    def next_tuple(self) -> None:
        end = min(self.position + self.per_call, self.limit())
        chunk = self.items[self.position:end]
        if chunk:
            self.emit_batch([k for k, _ in chunk], [v for _, v in chunk], msg_id=self.position)
        self.position = end
        if self.position >= len(self.items):
            self.finish()


class RelayCheckBolt(Bolt):
    """Per-key PE downstream of SequenceCheckBolt: [seq, in_order] in, [seq, in_order and seq follows the last
    one it saw] out, so a collector sees a break in order at either stage."""

    def open(self, context: Any) -> None:
        self.last = 0

    def process(self, tup: Any) -> None:
        seq, ok = tup.value
        in_order = bool(ok) and seq == self.last + 1
        self.last = seq
        self.emit(self.key, [seq, in_order])


class SlowFirstPartial(PartialAggregate):
    """A TAG partial stage whose first SPU takes 1 ms per tuple (a slowed worker); the others take nothing."""

    def open(self, context: Any) -> None:
        self._slow = context.instance == 0

    def process(self, tup: Any) -> None:
        if self._slow:
            _WORK.wait(0.001)  # simulated work, as SlowIncrementBolt's
        super().process(tup)


from esault.aggregates import Sum as _Sum  # noqa: E402
from esault.windows import EventTime as _EventTime, Session as _Session, Sliding as _Sliding, \
    Tumbling as _Tumbling, WindowBolt as _WindowBolt  # noqa: E402


class TumblingSums(_WindowBolt):
    """Sums of [ts, value] tuples per key over tumbling windows of 10, out-of-order by up to 5."""

    window = _Tumbling(10)
    aggregate = _Sum()
    time = _EventTime(max_out_of_orderness=5)
    flush_on_close = True


class SessionSums(_WindowBolt):
    """Sums of [ts, value] tuples per key over sessions with a gap of 100, out-of-order by up to 50."""

    window = _Session(100)
    aggregate = _Sum()
    time = _EventTime(max_out_of_orderness=50)
    flush_on_close = True


class SlidingKeyWindowSums(_WindowBolt):
    """The same over sliding windows of 20 every 5, evaluated as key windows."""

    window = _Sliding(20, 5)
    aggregate = _Sum()
    time = _EventTime(max_out_of_orderness=5)
    key_windows = True
    flush_on_close = True


class ResumableTumblingSums(TumblingSums):
    """TumblingSums for a job stopped to be resumed: no firing at close."""

    flush_on_close = False


class CountOnClose(ExpiringCountBolt):
    """Counts silently; emits its total only when it closes (after the job's final checkpoint)."""

    on_expire = Bolt.on_expire

    def close(self) -> None:
        self.emit(self.key, self.count)


class CloseFailsBolt(CountOnClose):
    """Counts what it sees; its close() raises, as one whose last write finds the disk full."""

    def close(self) -> None:
        raise OSError(28, "No space left on device")


class TallyOnFinish(Bolt):
    """Not key grouped: sums the values it sees and emits ("sum", total) from finish(), once the input ended."""

    def open(self, context: Any) -> None:
        self.total = 0

    def process(self, tup: Any) -> None:
        self.total += tup.value

    def finish(self) -> None:
        self.emit("sum", self.total)


class CountOnFinish(Bolt):
    """Per key: counts silently and emits (key, count) from finish()."""

    def open(self, context: Any) -> None:
        self.count = 0

    def process(self, tup: Any) -> None:
        self.count += 1

    def finish(self) -> None:
        self.emit(self.key, self.count)


class OwnProcessOnEvenKeys(CountOnFinish):
    """PEs of keys ending in an even digit set a process() of their own in open(), which counts twice;
    their state is only the count (a method is not state)."""

    def open(self, context: Any) -> None:
        self.count = 0
        if int(str(self.key)[-1]) % 2 == 0:
            self.process = self.count_twice

    def count_twice(self, tup: Any) -> None:
        self.count += 2

    def snapshot_state(self) -> dict[str, Any]:
        return {"count": self.count}


class FinishFailsBolt(CountOnFinish):
    """Its finish() raises, as one whose final write finds the disk full."""

    def finish(self) -> None:
        raise OSError(28, "No space left on device")


class TickStamps(Bolt):
    """Not key grouped: asks for ticks and emits each tick's time, so a test sees how often its SPU ticks."""

    def open(self, context: Any) -> None:
        self.want_ticks()

    def process(self, tup: Any) -> None:
        pass

    def on_tick(self, now: float) -> None:
        self.emit("tick", now)
