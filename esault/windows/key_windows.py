"""Key windows: dense sliding windows computed only where a key's result changes (PAPER_NOTES section 7).

Sliding windows of `size` every `slide` (m = size / slide windows overlap)
put each tuple into m windows: a native engine creates and folds m window
accumulators per tuple. But consecutive windows of one key differ only when
a tuple enters (its pane becomes the window's newest) or leaves (its pane
was the window's oldest). Key windows evaluate a key only at those change
points - at most 2 per tuple, 2n in all - and emit one result per change
point, valid for every window from there up to the key's next result. When a
key's data has all left, they emit its empty result once (empty=True).

Windows are numbered by j: window j is [j*slide, j*slide + size) and holds
panes j .. j+m-1, pane p being [p*slide, (p+1)*slide). A tuple's value is
folded into its pane's accumulator (add); a window's result merges its
non-empty panes with a two-stack sliding aggregation (merge only, O(1)
amortised per pane entering and leaving), so a key's cost is O(its tuples),
independent of m. It needs merge(a, b) to leave b unchanged.

Late tuples: a tuple is late when a window holding it was already evaluated
(or is due: its first window ended at or before the key's watermark). Key
windows never revise a result, so there is no allowed lateness; native
sliding windows would still fold it into its later windows.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from typing import Any

from esault.aggregates import Aggregate
from esault.windows.window_set import Output, late_output


def _first(pair: list) -> Any:
    return pair[0]


class KeyWindows:
    """Key-window evaluation of Sliding(size, slide) for every key; per-key state in plain dicts.

    State: {"wm": key watermark, "j": last evaluated window or None,
    "panes": [[p, acc], ...] by p, not yet in a window, "back": [[p, acc], ...] with
    "back_acc" their merge, "front": [[p, acc of p and every younger front pane], ...]
    oldest last}.
    """

    def __init__(self, size: float, slide: float, aggregate: Aggregate) -> None:
        m = size / slide
        if abs(m - round(m)) > 1e-9 or round(m) < 1:
            raise ValueError(f"key windows need size a whole multiple of slide, got size={size}, slide={slide}")
        self.size, self.slide, self.m = size, slide, int(round(m))
        self.aggregate = aggregate

    def new_state(self) -> dict[str, Any]:
        return {"wm": -math.inf, "j": None, "panes": [], "back": [], "back_acc": self.aggregate.create(),
                "front": []}

    def pane(self, ts: float) -> int:
        return math.floor(ts / self.slide)

    def add(self, state: dict[str, Any], ts: float, value: Any) -> list[Output]:
        """Fold one tuple into its pane; O(1). Returns [late tuple] when its windows are already out."""
        p = self.pane(ts)
        if (p + 1) * self.slide <= state["wm"]:
            return [late_output(ts, value)]
        panes = state["panes"]
        agg = self.aggregate
        if panes and panes[-1][0] < p:  # in order: the common case
            panes.append([p, agg.add(agg.create(), value)])
            return []
        i = bisect_left(panes, p, key=_first)
        if i < len(panes) and panes[i][0] == p:
            panes[i][1] = agg.add(panes[i][1], value)
        else:
            panes.insert(i, [p, agg.add(agg.create(), value)])
        return []

    def next_change(self, state: dict[str, Any]) -> int | None:
        """The next window whose contents differ from the last evaluated one."""
        candidates = []
        if state["front"]:
            candidates.append(state["front"][-1][0] + 1)
        elif state["back"]:
            candidates.append(state["back"][0][0] + 1)
        if state["panes"]:
            candidates.append(state["panes"][0][0] - self.m + 1)
        return min(candidates) if candidates else None

    def advance(self, state: dict[str, Any], watermark: float) -> list[Output]:
        """Raise the key's watermark; emit the result of each change point whose window it completes."""
        if watermark <= state["wm"]:
            return []
        state["wm"] = watermark
        out: list[Output] = []
        while True:
            j = self.next_change(state)
            if j is None or j * self.slide + self.size > watermark:
                return out
            out.append(self._evaluate(state, j))

    def _evaluate(self, state: dict[str, Any], j: int) -> Output:
        agg = self.aggregate
        front, back = state["front"], state["back"]
        while True:  # panes older than window j leave
            if not front and back:
                self._flip(state)
            if front and front[-1][0] < j:
                front.pop()
            else:
                break
        panes = state["panes"]
        last = j + self.m - 1
        entering = 0
        for p, acc in panes:  # panes of window j enter, oldest first
            if p > last:
                break
            back.append([p, acc])
            state["back_acc"] = agg.merge(state["back_acc"], acc)
            entering += 1
        del panes[:entering]
        state["j"] = j
        start = j * self.slide
        if front or back:
            total = agg.merge(agg.merge(agg.create(), front[-1][1]), state["back_acc"]) if front \
                else state["back_acc"]
            return {"start": start, "end": start + self.size, "result": agg.result(total), "empty": False}
        return {"start": start, "end": start + self.size, "result": agg.result(agg.create()), "empty": True}

    def _flip(self, state: dict[str, Any]) -> None:
        """Move the back stack to the front, computing suffix merges (youngest first). O(panes moved)."""
        agg = self.aggregate
        front, back = state["front"], state["back"]  # in place: callers hold these lists
        acc = None
        for p, pane_acc in reversed(back):
            acc = pane_acc if acc is None else agg.merge(pane_acc, acc)
            front.append([p, acc])
        back.clear()
        state["back_acc"] = agg.create()

    def due(self, state: dict[str, Any]) -> float:
        """The least watermark at which advance() emits (inf: nothing pending)."""
        j = self.next_change(state)
        return math.inf if j is None else j * self.slide + self.size

    def pending(self, state: dict[str, Any]) -> bool:
        """True while the key holds panes (more results will come as the watermark advances)."""
        return bool(state["panes"] or state["front"] or state["back"])

    def live_accumulators(self, state: dict[str, Any]) -> int:
        """Accumulators held for the key (the benchmark's memory measure)."""
        return len(state["panes"]) + len(state["front"]) + len(state["back"]) + 1
