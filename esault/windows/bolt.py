"""WindowBolt: windowed aggregation per key, a key-grouped Bolt whose window state is its PE state.

    class Totals(WindowBolt):
        window = Sliding(size=60, slide=10)
        aggregate = Sum()
        time = EventTime(max_out_of_orderness=5, allowed_lateness=10)
        def timestamp(self, tup): return tup.value["ts"]
        def value(self, tup): return tup.value["amount"]

    b.set_bolt("totals", Totals, parallelism=2, pe_idle_timeout=None).key_grouping("payments")

Where time lives: each SPU keeps one watermark for all its keys, in spu_local:
when every input sends watermarks (a KafkaSource on event time), the minimum over
its input channels (esault.datapath.watermarks) - max_out_of_orderness; else the
max timestamp seen - max_out_of_orderness. Each key keeps its
own watermark in its state (how far its windows have fired). Windows fire on
the SPU's ticks (every esault_tick_interval), never inside process(), so a
key that goes quiet still fires once other keys move the watermark, and
tuples held during a hand-off all run before a window judges them. A key
that moves takes its windows and its watermark along: it never fires a window
twice nor lets in a tuple it already judged late.

Output, emitted under the window's key:
- a result: {"start", "end", "result", "update"} (update=True for a re-fire
  caused by a late tuple within allowed_lateness);
- key windows (key_windows = True, Sliding only): {"start", "end",
  "result", "empty"}, one per change point: the result of window [start,
  end) and of every later window of the key up to its next output; empty=True
  once the key's data has all left its windows;
- the side output for late tuples: {"late": value, "timestamp": ts}.
Tell them apart by the "late" field (esault.windows.is_late).
"""

from __future__ import annotations

import heapq
import itertools
import math
from typing import Any

from esault.aggregates import aggregate_of
from esault.dsl.bolt import Bolt
from esault.dsl.tuple import Tuple
from esault.errors import TopologyError
from esault.windows.assigners import Sliding, check_assigner
from esault.windows.channel_watermarks import SPU_LOCAL_KEY
from esault.windows.key_windows import KeyWindows
from esault.windows.watermark import EventTime, ProcessingTime, WatermarkTracker
from esault.windows.window_set import WindowSet

_TRACKER = "esault.windows.watermark"
_DUE = "esault.windows.due"
_SEQ = itertools.count()  # ties in the due heap: keys need not be comparable


class _DueKeys:
    """One SPU's keys by the watermark at which their windows are due: a heap, one live entry per key.

    O(log keys) per schedule and per due key; entries of keys that left the SPU are dropped when due."""

    __slots__ = ("heap", "earliest")

    def __init__(self) -> None:
        self.heap: list[tuple[float, int, Any]] = []
        self.earliest: dict[Any, float] = {}

    def schedule(self, key: Any, due: float) -> None:
        if due == math.inf:
            return
        known = self.earliest.get(key)
        if known is not None and known <= due:
            return  # an earlier entry wakes the key; it schedules again then
        self.earliest[key] = due
        heapq.heappush(self.heap, (due, next(_SEQ), key))

    def pop_due(self, watermark: float) -> list[Any]:
        heap, out = self.heap, []
        while heap and heap[0][0] <= watermark:
            due, _, key = heapq.heappop(heap)
            if self.earliest.get(key) == due:
                del self.earliest[key]
            out.append(key)
        return out


def is_late(value: Any) -> bool:
    """True for a WindowBolt's side output (a late tuple), False for a window result."""
    return isinstance(value, dict) and "late" in value


class WindowBolt(Bolt):
    """Set window, aggregate and time as class attributes; override timestamp()/value() for your tuples.

    By default a tuple's value is a [timestamp, value] pair (on processing
    time, just the value). Declare it with key_grouping. A PE with windows
    pending never expires (it asked for ticks); one without parks as usual.
    """

    window: Any = None
    aggregate: Any = "count"
    time: EventTime | ProcessingTime = EventTime()
    key_windows: bool = False
    flush_on_close: bool = False
    """Bounded input: when the input ends, fire every pending window (a watermark of +infinity), from
    finish(). Under exactly_once that is the final checkpoint's barrier once every source finished, inside
    that checkpoint (exactly-once sinks commit them; a restart from it does not fire them again); a stop
    mid-stream fires nothing, so a job stopped to resume later keeps its windows whole."""

    _esault_core: Any = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.window is not None:
            cls._esault_core = _core_of(cls)
        # what this bolt emits is a bound older than its input's watermark (datapath/watermarks.py)
        cls.esault_watermark_lag = cls.time.max_out_of_orderness if isinstance(cls.time, EventTime) else 0.0

    def timestamp(self, tup: Tuple) -> float:
        """The tuple's event time (same unit as the window sizes): by default value["ts"] of a dict value
        (where a source's event_time puts it, and where joins read it), else value[0]."""
        value = tup.value
        return value["ts"] if isinstance(value, dict) else value[0]

    def value(self, tup: Tuple) -> Any:
        """What the aggregate folds: by default, on event time, value[1] (a dict value: the dict itself, or its
        "value" when it is {"ts", "value"}, a source's wrapped value); on processing time, the whole value."""
        value = tup.value
        if isinstance(self.time, ProcessingTime):
            return value
        if isinstance(value, dict):
            return value["value"] if len(value) == 2 and "ts" in value and "value" in value else value
        return value[1]

    def open(self, context: Any) -> None:
        if self._esault_core is None:
            raise TopologyError(f"{type(self).__name__} is a WindowBolt without a window: set the class attribute "
                                "window = Tumbling(size), Sliding(size, slide) or Session(gap)")
        if not context.per_key:
            raise TopologyError(f"{type(self).__name__} is a WindowBolt: declare it with key_grouping(source), "
                                "windows are per key")
        self.window_state = self._esault_core.new_state()

    @classmethod
    def _spu_watermark(cls, local: dict[str, Any], now: float) -> float:
        """The SPU's watermark: its inputs' combined watermark when they all send one, else its greatest
        timestamp; minus the bound (event time). Or the job clock."""
        if isinstance(cls.time, ProcessingTime):
            return now
        inputs = local.get(SPU_LOCAL_KEY)
        if inputs is not None:
            return inputs.watermark - cls.time.max_out_of_orderness
        tracker = local.get(_TRACKER)
        return -math.inf if tracker is None else tracker.watermark

    @classmethod
    def esault_due_keys(cls, local: dict[str, Any], now: float) -> list[Any]:
        """The SPU asks on each tick which PEs to tick: the keys with a window due at its watermark."""
        due = local.get(_DUE)
        return due.pop_due(cls._spu_watermark(local, now)) if due is not None else []

    def _schedule(self) -> None:
        """Ask for ticks while windows are pending, and for a tick when the next one is due."""
        core = self._esault_core
        if not core.pending(self.window_state):
            self.want_ticks(False)
            return
        self.want_ticks(True)
        local = self.spu_local
        due = local.get(_DUE)
        if due is None:
            due = local[_DUE] = _DueKeys()
        due.schedule(self.key, core.due(self.window_state))

    def process(self, tup: Tuple) -> None:
        if isinstance(self.time, ProcessingTime):
            ts = self.now()
        else:
            ts = self.timestamp(tup)
            local = self.spu_local
            tracker = local.get(_TRACKER)
            if tracker is None:
                tracker = local[_TRACKER] = WatermarkTracker(self.time.max_out_of_orderness)
            tracker.observe(ts)
        for out in self._esault_core.add(self.window_state, ts, self.value(tup)):
            self.emit(self.key, out)
        self._schedule()

    def on_tick(self, now: float) -> None:
        self._advance(self._spu_watermark(self.spu_local, now))

    def _advance(self, watermark: float) -> None:
        for out in self._esault_core.advance(self.window_state, watermark):
            self.emit(self.key, out)
        self._schedule()

    def restore_state(self, state: dict[str, Any]) -> None:
        super().restore_state(state)
        self._schedule()  # a moved or restored key keeps firing on its new SPU

    def finish(self) -> None:
        """The input ended (Bolt.finish: under exactly_once at the final checkpoint's barrier, before the
        snapshot, once every source finished; without checkpoints at the stop): with flush_on_close, every
        pending window fires. A stop mid-stream fires nothing: the windows resume after a restart."""
        if self.flush_on_close and self.key is not None:
            self._advance(math.inf)


def _core_of(cls: type) -> Any:
    """The window core for a WindowBolt subclass; TopologyError naming the class and the fix."""
    name = cls.__name__
    try:
        assigner = check_assigner(f"{name}.window", cls.window)
        aggregate = aggregate_of(cls.aggregate)
    except ValueError as exc:
        raise TopologyError(f"{name}: {exc}") from None
    if not isinstance(cls.time, (EventTime, ProcessingTime)):
        raise TopologyError(f"{name}.time must be EventTime(max_out_of_orderness=..., allowed_lateness=...) or "
                            f"ProcessingTime() from esault.windows, got {cls.time!r}")
    lateness = cls.time.allowed_lateness if isinstance(cls.time, EventTime) else 0
    if cls.key_windows:
        if not isinstance(assigner, Sliding) or assigner.offset:
            raise TopologyError(f"{name}: key_windows = True needs window = Sliding(size, slide) without offset, "
                                f"got {assigner!r}")
        if lateness:
            raise TopologyError(f"{name}: key windows never revise a result, so they take no allowed_lateness "
                                f"(got {lateness}); use EventTime(allowed_lateness=0) or key_windows = False")
        try:
            return KeyWindows(assigner.size, assigner.slide, aggregate)
        except ValueError as exc:
            raise TopologyError(f"{name}: {exc}") from None
    return WindowSet(assigner, aggregate, lateness)
