"""The per-key window state machine: accumulators by window, fired by the watermark, purged after lateness.

A WindowSet is the configuration (assigner, aggregate, allowed lateness) and
is shared by every key; each key's state is a plain dict (new_state()) that
is PE state: msgpack-serialisable, so it moves with its key on split/merge and
enters checkpoints. Every method takes that state and returns what to emit.

Semantics (as in Flink's event-time windows with the default trigger):
- window [start, end) fires once the key's watermark reaches end;
- it is kept until the watermark reaches end + allowed_lateness; a tuple for
  it meanwhile updates the accumulator and fires it again with update=True;
- a tuple all of whose windows are past end + allowed_lateness is late: it
  goes to the side output, the windows do not change.
- a window that merges (a session) closes one step later: it fires, and is
  purged, only once the watermark is strictly past end (+ allowed_lateness).
  A tuple within the bound may carry the watermark itself as its timestamp,
  and a session ending exactly there touches it, so must still be open to
  merge with it (a fixed window ending there cannot hold that tuple).
A key's watermark only grows (advance()), so a key that moves to an SPU whose
watermark is behind never fires a window twice or takes a late tuple in.
"""

from __future__ import annotations

import math
from typing import Any

from esault.aggregates import Aggregate
from esault.windows.assigners import Assigner

Output = dict[str, Any]
"""A window result {"start", "end", "result", "update"} or a late tuple {"late", "timestamp"}."""


def result_output(start: float, end: float, result: Any, update: bool) -> Output:
    return {"start": start, "end": end, "result": result, "update": update}


def late_output(ts: float, value: Any) -> Output:
    return {"late": value, "timestamp": ts}


def _start(output: Output) -> Any:
    return output["start"]


class WindowSet:
    """Windows of one kind for every key; per-key state in plain dicts.

    State: {"wm": the key's watermark, "due": the least watermark at which
    something fires or is purged, "w": {start: [end, acc, fired]}}. add() is
    O(windows per tuple) (size/slide for sliding windows, plus merged sessions);
    advance() is O(1) until something is due, then O(windows of the key).
    """

    def __init__(self, assigner: Assigner, aggregate: Aggregate, allowed_lateness: float = 0) -> None:
        self.assigner = assigner
        self.aggregate = aggregate
        self.lateness = allowed_lateness
        self._over = _passed if assigner.merging else _reached
        """_over(bound, watermark): a window ending at `bound` is over (fires, or is purged past its lateness)."""

    @staticmethod
    def new_state() -> dict[str, Any]:
        return {"wm": -math.inf, "due": math.inf, "w": {}}

    def add(self, state: dict[str, Any], ts: float, value: Any) -> list[Output]:
        """Fold one tuple into its windows; returns late updates or the late tuple itself."""
        if self.assigner.merging:
            return self._add_session(state, ts, value)
        wm, lateness, windows, agg = state["wm"], self.lateness, state["w"], self.aggregate
        out: list[Output] = []
        accepted = False
        for start in self.assigner.starts(ts):
            end = self.assigner.end(start)
            if end + lateness <= wm:
                continue  # purged: this window is over for good
            accepted = True
            window = windows.get(start)
            if window is None:
                window = windows[start] = [end, agg.create(), False]
                self._due(state, end)
            window[1] = agg.add(window[1], value)
            if end <= wm:  # complete already: a late tuple within the allowed lateness fires it (again)
                out.append(result_output(start, end, agg.result(window[1]), window[2]))
                window[2] = True
                self._due(state, end + lateness)
        if not accepted:
            out.append(late_output(ts, value))
        return out

    def _add_session(self, state: dict[str, Any], ts: float, value: Any) -> list[Output]:
        wm, windows, agg = state["wm"], state["w"], self.aggregate
        start, end = ts, self.assigner.end(ts)
        touched = [s for s, w in windows.items() if s <= end and start <= w[0]]  # overlapping or touching
        if not touched and _passed(end + self.lateness, wm):  # (a kept session it touches is not over)
            return [late_output(ts, value)]
        acc = agg.add(agg.create(), value)
        fired = False
        for other in touched:
            o_end, o_acc, o_fired = windows.pop(other)
            start, end = min(start, other), max(end, o_end)
            acc = agg.merge(acc, o_acc)
            fired = fired or o_fired
        windows[start] = [end, acc, False]
        if _passed(end, wm):  # a complete session (late, within the allowed lateness): it fires at once
            windows[start][2] = True
            self._due(state, end + self.lateness)
            return [result_output(start, end, agg.result(acc), fired)]
        self._due(state, end)
        return []

    @staticmethod
    def _due(state: dict[str, Any], when: float) -> None:
        if when < state["due"]:
            state["due"] = when

    def advance(self, state: dict[str, Any], watermark: float) -> list[Output]:
        """Raise the key's watermark; fire the windows it completes, purge those past their lateness."""
        if watermark <= state["wm"]:
            return []
        state["wm"] = watermark
        if watermark < state["due"]:
            return []
        out: list[Output] = []
        due = math.inf
        windows, agg, lateness, over = state["w"], self.aggregate, self.lateness, self._over
        for start, window in list(windows.items()):  # O(windows of the key); sorted output below
            end = window[0]
            if not window[2] and over(end, watermark):
                window[2] = True
                out.append(result_output(start, end, agg.result(window[1]), False))
            if over(end + lateness, watermark):
                del windows[start]
            else:
                due = min(due, end + lateness if window[2] else end)
        state["due"] = due
        if len(out) > 1:
            out.sort(key=_start)
        return out

    @staticmethod
    def due(state: dict[str, Any]) -> float:
        """The least watermark at which advance() may have something to do (inf: nothing); a session due at
        its end acts only once the watermark is past it."""
        return state["due"]

    def pending(self, state: dict[str, Any]) -> bool:
        """True while the key holds windows (it needs watermark advances)."""
        return bool(state["w"])


def _reached(bound: float, watermark: float) -> bool:
    """A fixed window ending at `bound` is over once the watermark reaches it: no tuple within the bound can
    belong to it any more."""
    return bound <= watermark


def _passed(bound: float, watermark: float) -> bool:
    """A session ending at `bound` is over only once the watermark is past it: a tuple at the watermark
    itself (within the bound) still touches it."""
    return bound < watermark
