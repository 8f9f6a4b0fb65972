"""Parts of the event-time tests on a real broker: seeded clicks, a source instance slowed on purpose, windows,
and the oracle every test compares with (pure functions of the records' timestamps).

Worker processes import these by module name (tests/system is on their path).
"""

from __future__ import annotations

import collections
import random
import threading
from typing import Any

from esault import Bolt
from esault.connectors import KafkaSource
from esault.windows import EventTime, Session, Tumbling, WindowBolt, is_late  # noqa: F401 - is_late for the tests

BASE_MS = 1_700_000_000_000
BOUND_MS = 2_500
"""The windows' max_out_of_orderness: every partition below is within 2 s of disorder."""
DISORDER_MS = 2_000

_PAUSE = threading.Event()  # never set: wait() on it paces a source (a timed pause, not synchronisation)


class Click:
    """One record: its user (the key), partition, position in the partition and event time (ms)."""

    __slots__ = ("user", "partition", "index", "ts")

    def __init__(self, user: str, partition: int, index: int, ts: int) -> None:
        self.user, self.partition, self.index, self.ts = user, partition, index, ts

    def record(self) -> tuple[str, str, int, int]:
        """(key, value, partition, timestamp) for KafkaBroker.produce."""
        return self.user, f"{self.partition}:{self.index}", self.partition, self.ts


def clicks(total: int, partitions: int = 4, users: int = 20, step_ms: int = 10, disorder_ms: int = DISORDER_MS,
           seed: int = 52, start_ms: int = BASE_MS, first_index: int = 0) -> list[Click]:
    """`total` clicks over `partitions`, each partition's timestamps rising by `step_ms` a record with up to
    `disorder_ms` of jitter (so within that bound of disorder), users drawn at random."""
    rng = random.Random(seed)
    out = []
    for i in range(total):
        p = i % partitions
        j = first_index + i // partitions
        out.append(Click(f"u{rng.randrange(users)}", p, j, start_ms + j * step_ms + rng.randrange(disorder_ms + 1)))
    return out


class PacedKafkaSource(KafkaSource):
    """A KafkaSource whose instance `slow` waits `pace` seconds before each read: it falls far behind the
    others in event time, as a slow consumer or a loaded worker would."""

    def __init__(self, slow: int = 0, pace: float = 0.0, **params: Any) -> None:
        super().__init__(**params)
        self.slow, self.pace = slow, pace
        self._me = -1

    def open(self, context: Any) -> None:
        super().open(context)
        self._me = context.instance

    def next_tuple(self) -> None:
        if self._me == self.slow and self.pace:
            _PAUSE.wait(self.pace)
        super().next_tuple()


class Parse(Bolt):
    """A bolt between the source and the windows (it re-keys nothing): it forwards the watermarks it combines."""

    def process(self, tup: Any) -> None:
        self.emit(tup.key, tup.value)


class ClickCounts(WindowBolt):
    """Clicks per user per second of event time (the value's "ts", KafkaSource event_time="timestamp")."""

    window = Tumbling(size=1_000)
    aggregate = "count"
    time = EventTime(max_out_of_orderness=BOUND_MS)
    flush_on_close = True

    def value(self, tup: Any) -> Any:
        return 1


SESSION_GAP_MS = 300


class ClickSessions(WindowBolt):
    """Each user's sessions (clicks less than SESSION_GAP_MS apart), counted."""

    window = Session(gap=SESSION_GAP_MS)
    aggregate = "count"
    time = EventTime(max_out_of_orderness=BOUND_MS)
    flush_on_close = True

    def value(self, tup: Any) -> Any:
        return 1


def source_params(bootstrap: str, topic: str, **more: Any) -> dict[str, Any]:
    return {"topic": topic, "bootstrap": bootstrap, "key": "utf-8", "value": "utf-8", "event_time": "timestamp",
            "end": "end", **more}


# --- the oracle ----------------------------------------------------------------------------------


def late_in_input(records: list[Click], bound: int = BOUND_MS) -> set[tuple[int, int]]:
    """(partition, index) of every record later than the bound in its own partition: its timestamp is below
    the greatest one before it in the partition's order, minus the bound."""
    newest: dict[int, int] = {}
    late = set()
    for c in sorted(records, key=lambda c: (c.partition, c.index)):
        seen = newest.get(c.partition)
        if seen is not None and c.ts < seen - bound:
            late.add((c.partition, c.index))
        newest[c.partition] = c.ts if seen is None else max(seen, c.ts)
    return late


def tumbling_counts(records: list[Click], size: int, late: set[tuple[int, int]]) -> dict[tuple[str, int], int]:
    """(user, window start) -> clicks in [start, start + size), late ones left out."""
    out: collections.Counter = collections.Counter()
    for c in records:
        if (c.partition, c.index) not in late:
            out[(c.user, c.ts - c.ts % size)] += 1
    return dict(out)


def session_counts(records: list[Click], gap: int, late: set[tuple[int, int]]) -> dict[tuple[str, int, int], int]:
    """(user, start, end) -> clicks of each session: a click opens [ts, ts + gap), sessions that overlap or
    touch merge."""
    by_user: dict[str, list[int]] = collections.defaultdict(list)
    for c in records:
        if (c.partition, c.index) not in late:
            by_user[c.user].append(c.ts)
    out = {}
    for user, stamps in by_user.items():
        stamps.sort()
        start, end, n = stamps[0], stamps[0] + gap, 0
        for ts in stamps:
            if ts > end:
                out[(user, start, end)] = n
                start, n = ts, 0
            end = max(end, ts + gap)
            n += 1
        out[(user, start, end)] = n
    return out


def windows_of(outputs: list[tuple[Any, Any]], sessions: bool = False) -> tuple[dict, list]:
    """The window results a collector got, keyed as the oracle keys them, and the late tuples; a window that
    fired twice (an update) shows as a list of its results."""
    got: dict[Any, Any] = {}
    late = []
    for key, value in outputs:
        if is_late(value):
            late.append((key, value))
            continue
        name = (key, value["start"], value["end"]) if sessions else (key, value["start"])
        got[name] = value["result"] if name not in got else [got[name], value["result"]]
    return got, late


def differences(got: dict, expected: dict, limit: int = 5) -> str:
    """What differs between two window tables, for an assertion message."""
    wrong = [k for k in expected if got.get(k) != expected[k]]
    extra = [k for k in got if k not in expected]
    return (f"{len(wrong)} of {len(expected)} windows wrong (e.g. "
            f"{[(k, got.get(k), expected[k]) for k in wrong[:limit]]}), {len(extra)} unexpected "
            f"(e.g. {[(k, got[k]) for k in extra[:limit]]})")


END_MARK_MS = 4_000_000_000_000
"""A record stamped this late ends a read with end={"timestamp": END_MARK_MS}: a test ends the job when it chooses."""


def end_marks(partitions: int = 4) -> list[tuple[str, str, int, int]]:
    return [("end", "end", p, END_MARK_MS) for p in range(partitions)]


def from_topic(records: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    """(key, value) of each record a KafkaSink wrote (utf-8 keys, json values)."""
    import json

    return [(r["key"].decode(), json.loads(r["value"])) for r in records]
