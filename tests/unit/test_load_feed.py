"""LoadFeed: SPU counters (local or relayed) become TagPartitioner reports; windows close on time."""

from __future__ import annotations

import pytest

from esault.metrics.stats import SpuStats, StatsRegistry
from esault.routing.output_router import OutputRouter
from esault.datapath.load_feed import REPORT_SECONDS, LoadFeed, RemoteLoads, tag_load_rows
from esault.messages.handoff import RouteSpec


def feed_for(grouping: str = "tag"):
    router = OutputRouter(1, "src", [RouteSpec("agg", grouping, None, {10: object(), 11: object()}, 1)])
    registry, remote = StatsRegistry(), RemoteLoads()
    return router.routes[0].partitioner, registry, remote, LoadFeed("job", router, registry, 0.0, 1.0, remote)


def stats(spu: int, busy_us: int, processed: int, backlog: int = 0) -> SpuStats:
    s = SpuStats("job", "agg", spu)
    s.busy_us, s.processed, s.backlog = busy_us, processed, backlog
    return s


def test_local_counters_give_the_mean_time_per_tuple_since_the_last_reading():
    partitioner, registry, _, feed = feed_for()
    local = stats(10, 0, 0)
    registry.register(local)
    local.busy_us, local.processed = 2000, 10
    feed.on_tick(0.0)
    assert partitioner.time[10] == pytest.approx(0.0002)
    local.busy_us, local.processed, local.backlog = 2000 + 8000, 20, 3
    feed.on_tick(REPORT_SECONDS)
    assert partitioner.time[10] == pytest.approx(0.0002 + 0.3 * (0.0008 - 0.0002))
    assert partitioner.queued[10] == 3  # 3 batches x 1 tuple (nothing sent yet to size batches)


def test_a_relayed_row_is_reported_once_and_local_counters_win_over_it():
    partitioner, registry, remote, feed = feed_for()
    remote.replace([("job", "agg", 11, 5000, 10, 2), ("job", "agg", 10, 1, 1, 0), ("other", "agg", 11, 9, 9, 9)])
    registry.register(stats(10, 1000, 10))
    feed.on_tick(0.0)
    assert partitioner.time == {10: pytest.approx(0.0001), 11: pytest.approx(0.0005)}
    partitioner.choose("k")  # a local +1 on one of them
    before = dict(partitioner.queued)
    feed.on_tick(REPORT_SECONDS)  # the same relayed row again: not reported again
    assert partitioner.queued[11] == before[11]


def test_remote_loads_drop_malformed_rows_and_forget_spus_the_driver_no_longer_lists():
    remote = RemoteLoads()
    remote.replace([("job", "agg", 11, 1, 1, 0), ("bad",), "x"])
    assert remote.rows() == [("job", "agg", 11, 1, 1, 0)]
    remote.replace([])
    assert remote.rows() == []


def test_driver_rows_cover_only_the_tag_grouped_units():
    rows = tag_load_rows([stats(10, 5, 6, 7), SpuStats("job", "count", 3)], {("job", "agg")})
    assert rows == [("job", "agg", 10, 5, 6, 7)]


def test_the_heavy_key_window_closes_every_window_seconds_and_pkg_takes_no_reports():
    partitioner, registry, _, feed = feed_for("partial_key")
    registry.register(stats(10, 9000, 1))
    feed.on_tick(0.0)
    assert partitioner.time[10] == 1.0 and partitioner.window == 0
    feed.on_tick(1.0)
    assert partitioner.window == 1
