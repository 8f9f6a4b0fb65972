"""Page views per user over a sliding minute, on event time, with key windows.

Run it:  esault run examples/windows.py
Clicks carry their own timestamps (ms), out of order by up to 2 s; a few users
click a lot, most rarely. `views` counts each user's clicks in the last 60 s,
every second (60 windows per click natively; key windows compute a user only
when a click enters or leaves the minute). `latest` keeps each user's current
count and the late clicks, written to <data_dir>/windows.json at the end.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from esault import Bolt, ReplayingSpout, TopologyBuilder
from esault.windows import EventTime, Sliding, WindowBolt, is_late


class ClickSpout(ReplayingSpout):
    """`total` seeded clicks: (user, [ts_ms, page]); 1 in 500 arrives 10 s late (past the bound)."""

    def __init__(self, total: int = 50_000, seed: int = 7) -> None:
        super().__init__()
        self.total, self.seed, self.position = total, seed, 0

    def click(self, i: int) -> tuple[str, list]:
        rnd = random.Random(self.seed * 1_000_003 + i)  # the same click at the same position, in any process
        user = f"user{rnd.randrange(5)}" if rnd.random() < 0.6 else f"user{5 + rnd.randrange(5000)}"
        ts = i * 10 - rnd.randint(0, 2_000) - (10_000 if rnd.random() < 0.002 else 0)
        return user, [ts, f"/page{rnd.randrange(50)}"]

    def next_tuple(self) -> None:
        for i in range(self.position, min(self.position + 100, self.total)):
            self.emit(*self.click(i), msg_id=i)
        self.position = min(self.position + 100, self.total)
        if self.position == self.total:
            self.finish()

    def snapshot_position(self) -> int:
        return self.position

    def restore_position(self, position: int) -> None:
        self.position = int(position)


class ViewsPerMinute(WindowBolt):
    """Clicks per user in the last 60 s, every second, as key windows."""

    window = Sliding(size=60_000, slide=1_000)
    aggregate = "count"
    time = EventTime(max_out_of_orderness=2_000)
    key_windows = True
    flush_on_close = True  # a bounded input: its last windows fire when the job stops


class LatestViews(Bolt):
    """One instance: each user's latest per-minute count, and the late clicks; written at close()."""

    def open(self, context: Any) -> None:
        self.path = str(Path(context.data_dir) / "windows.json")  # state must be plain data
        self.views: dict[str, int] = {}
        self.peak: dict[str, int] = {}
        self.late = 0
        self.results = 0

    def process(self, tup: Any) -> None:
        if is_late(tup.value):
            self.late += 1
            return
        self.results += 1
        count = 0 if tup.value["empty"] else tup.value["result"]
        self.views[tup.key] = count
        self.peak[tup.key] = max(self.peak.get(tup.key, 0), count)

    def close(self) -> None:
        Path(self.path).write_text(json.dumps({"peak": self.peak, "late": self.late, "results": self.results}))


def build_topology(total: int = 50_000, seed: int = 7, parallelism: int = 2):
    b = TopologyBuilder("windows")
    b.set_spout("clicks", ClickSpout, params={"total": total, "seed": seed})
    b.set_bolt("views", ViewsPerMinute, parallelism).key_grouping("clicks")
    b.set_bolt("latest", LatestViews).global_grouping("views")
    return b.build()


def summarize(job: Any) -> str:
    """Printed by `esault run`: the busiest users' peak views per minute, results and late clicks."""
    path = Path(job.data_dir) / "windows.json"
    if not path.exists():
        return "windows: no results written"
    data = json.loads(path.read_text())
    top = sorted(data["peak"].items(), key=lambda kv: (-kv[1], kv[0]))[:5]
    lines = [f"windows: {data['results']} key-window results for {len(data['peak'])} users, "
             f"{data['late']} late clicks (side output); peak views per minute:"]
    lines += [f"  {user:<10} {views}" for user, views in top]
    return "\n".join(lines)
