"""StatsRegistry keeps what retired SPUs counted without keeping the SPUs: bounded by the live ones.

Pure: a ManualClock drives the reporting window. The last test replays a
worker's heartbeats into the driver's real WorkerRegistry, the path by which a
worker-hosted SPU's final counts reach Job.status().
"""

from __future__ import annotations

import pytest

from esault.clock import ManualClock
from esault.metrics.stats import COUNTERS, GAUGES, REPORTS, RETIRED_SPU, SpuStats, StatsRegistry


def make_stats(unit: str, spu: int, topology: str = "t", **counts: int) -> SpuStats:
    stats = SpuStats(topology, unit, spu)
    for name, value in counts.items():
        setattr(stats, name, value)
    return stats


def unit_total(rows: list[SpuStats], unit: str, counter: str = "processed", topology: str = "t") -> int:
    return sum(getattr(s, counter) for s in rows if s.unit == unit and s.topology == topology)


def test_every_counter_and_gauge_of_spu_stats_is_classified():
    identity = {"topology", "unit", "spu"}
    assert set(SpuStats.__slots__) == identity | set(COUNTERS) | set(GAUGES) | set(REPORTS)
    assert set(make_stats("u", 0).as_dict()) == set(COUNTERS) | set(GAUGES)


def test_a_retired_spu_is_folded_into_its_units_retired_total():
    stats = StatsRegistry(ManualClock())
    keep = make_stats("count", 0, processed=100, acked=3, pes=5)
    gone = make_stats("count", 1, processed=60, emitted=6, user_errors=2, pes=4, queue_depth=7, inflight=1)
    stats.register(keep)
    stats.register(gone)

    stats.retire(gone)

    assert stats.live() == [keep]
    (retired,) = [s for s in stats.totals() if s.spu == RETIRED_SPU]
    assert (retired.topology, retired.unit) == ("t", "count")
    assert (retired.processed, retired.emitted, retired.user_errors) == (60, 6, 2)
    assert (retired.pes, retired.queue_depth, retired.inflight) == (0, 0, 0)
    assert (gone.pes, gone.queue_depth, gone.inflight) == (0, 0, 0), "a stopped SPU holds nothing"
    assert unit_total(stats.totals(), "count") == 160


def test_retired_totals_are_per_topology_and_unit_and_add_up():
    stats = StatsRegistry(ManualClock())
    spus = [make_stats("count", 0, processed=1), make_stats("count", 1, processed=10),
            make_stats("split", 2, processed=100), make_stats("count", 3, topology="other", processed=1000)]
    for spu in spus:
        stats.register(spu)
    for spu in spus:
        stats.retire(spu)

    retired = {(s.topology, s.unit): s.processed for s in stats.totals()}
    assert retired == {("t", "count"): 11, ("t", "split"): 100, ("other", "count"): 1000}
    assert stats.live() == []


def test_retiring_twice_or_an_unregistered_spu_counts_nothing_twice():
    stats = StatsRegistry(ManualClock())
    spu = make_stats("count", 0, processed=5)
    stats.register(spu)
    stats.retire(spu)
    stats.retire(spu)
    stats.retire(make_stats("count", 9, processed=1000))  # never registered here
    assert unit_total(stats.totals(), "count") == 5


def test_totals_are_snapshots_that_later_retirements_do_not_change():
    stats = StatsRegistry(ManualClock())
    first, second = make_stats("count", 0, processed=1), make_stats("count", 1, processed=2)
    stats.register(first)
    stats.register(second)
    stats.retire(first)
    before = stats.totals()

    stats.retire(second)

    assert unit_total(before, "count") == 3  # second was live then, retired total 1
    assert unit_total(stats.totals(), "count") == 3


def test_all_reports_a_retired_spu_with_its_final_counts_for_the_window_then_forgets_it():
    clock = ManualClock()
    stats = StatsRegistry(clock, report_retired_for=30.0)
    live, gone = make_stats("count", 0, processed=1), make_stats("count", 1, processed=2)
    stats.register(live)
    stats.register(gone)
    gone.processed = 42  # its last batch, after the previous heartbeat
    stats.retire(gone)

    clock.advance(29.9)
    assert {(s.spu, s.processed) for s in stats.all()} == {(0, 1), (1, 42)}

    clock.advance(0.1)
    assert {(s.spu, s.processed) for s in stats.all()} == {(0, 1)}
    assert unit_total(stats.totals(), "count") == 43, "totals keep it after the window"


def test_memory_is_bounded_by_live_spus_after_many_splits_and_merges():
    clock = ManualClock()
    stats = StatsRegistry(clock, report_retired_for=1.0)
    live = {spu: make_stats("count", spu) for spu in range(3)}
    for spu in live.values():
        stats.register(spu)
    next_id = len(live)
    for _ in range(1000):  # one merge and one split per step, 0.1 s apart
        gone = min(live)
        live[gone].processed += 1
        stats.retire(live.pop(gone))
        live[next_id] = make_stats("count", next_id)
        stats.register(live[next_id])
        next_id += 1
        clock.advance(0.1)

    assert len(stats.live()) == 3
    assert len(stats.totals()) == 3 + 1  # live SPUs and one retired total for the unit
    assert len(stats.all()) <= 3 + 10, "only SPUs retired within the 1 s window are still listed"
    assert unit_total(stats.totals(), "count") == 1000


def test_forget_topology_drops_its_live_retired_and_recent_spus():
    stats = StatsRegistry(ManualClock())
    gone, kept = make_stats("count", 0, processed=1), make_stats("count", 0, topology="kept", processed=2)
    stats.register(gone)
    stats.register(kept)
    stats.register(make_stats("split", 1))
    stats.retire(gone)

    stats.forget_topology("t")

    assert stats.live() == [kept] and stats.all() == [kept] and stats.totals() == [kept]


def test_a_negative_reporting_window_is_refused():
    with pytest.raises(ValueError, match="report_retired_for must be >= 0 seconds, got -1"):
        StatsRegistry(report_retired_for=-1)


def test_a_worker_hosted_spus_final_counts_reach_the_driver_after_the_worker_forgets_it():
    """The driver's WorkerRegistry keeps each SPU's last heartbeat row; the worker need not keep it."""
    from esault.cluster.processes import WorkerRegistry
    from esault.messages.cluster import WorkerHeartbeat

    clock = ManualClock()
    worker = StatsRegistry(clock, report_retired_for=30.0)
    driver = WorkerRegistry()

    def heartbeat() -> None:
        rows = [(s.topology, s.unit, s.spu, s.as_dict()) for s in worker.all()]
        driver.heartbeat(WorkerHeartbeat("w1", rows))
        clock.advance(0.2)

    spus = {spu: make_stats("count", spu) for spu in range(2)}
    for spu in spus.values():
        worker.register(spu)
    processed = 0
    next_id = 2
    for step in range(300):
        for spu in spus.values():
            spu.processed += 1
            processed += 1
        if step % 10 == 5:  # a split, and the next step a merge: SPUs come and go
            spus[next_id] = make_stats("count", next_id)
            worker.register(spus[next_id])
            next_id += 1
        if step % 10 == 6:
            worker.retire(spus.pop(min(spus)))
        heartbeat()
    for _ in range(200):  # 40 s of heartbeats: past the worker's window
        heartbeat()

    assert len(worker.all()) == len(spus), "the worker forgot its retired SPUs"
    assert unit_total(driver.stats_of("t"), "count") == processed
