"""A source SPU's partition rows (esault.metrics.partition_status): what passes the check a report meets in
the SPU and again in the driver, how a worker's heartbeat carries them, and how `esault status` prints them."""

from __future__ import annotations

import logging

import pytest

from esault.cli import partition_lines
from esault.cluster.processes import WorkerRegistry
from esault.cluster.worker import heartbeat
from esault.messages.cluster import WorkerHeartbeat
from esault.metrics.partition_status import MAX_ROWS, as_dicts, checked_rows, describe, rows_of_dicts
from esault.metrics.stats import StatsRegistry, SpuStats

GOOD = ("orders", 2, 120, 200, 80, False)


def test_well_formed_rows_pass_sorted_by_topic_and_partition_with_nothing_dropped():
    report = [["orders", 3, 5, None, None, True], list(GOOD), ("events", 0, 0, 0, 0, False)]
    rows, dropped = checked_rows(report)
    assert dropped == 0
    assert rows == (("events", 0, 0, 0, 0, False), GOOD, ("orders", 3, 5, None, None, True))


@pytest.mark.parametrize("bad", [
    ["orders", 2, 120, 200, 80],  # a field short
    ["orders", 2, 120, 200, 80, False, "more"],
    [7, 2, 120, 200, 80, False],  # the topic no string
    ["", 2, 120, 200, 80, False],
    ["x" * 250, 2, 120, 200, 80, False],  # longer than Kafka allows
    ["\x1b[31mred", 2, 120, 200, 80, False],  # a terminal escape
    ["orders", -1, 120, 200, 80, False],
    ["orders", 2**31, 120, 200, 80, False],
    ["orders", True, 120, 200, 80, False],  # a bool is no partition number
    ["orders", 2, 1.5, 200, 80, False],
    ["orders", 2, 2**63, 200, 80, False],
    ["orders", 2, 120, -1, 80, False],
    ["orders", 2, 120, 200, "80", False],
    ["orders", 2, 120, 200, 80, 1],  # idle is a bool, not a number
    {"topic": "orders"},
    "orders[2]",
    None,
])
def test_a_malformed_row_is_dropped_and_counted_and_the_good_rows_still_pass(bad):
    rows, dropped = checked_rows([bad, list(GOOD)])
    assert rows == (GOOD,) and dropped == 1


def test_a_second_row_of_one_partition_rows_past_the_bound_and_a_report_that_is_no_list_are_dropped():
    assert checked_rows([list(GOOD), ["orders", 2, 0, 0, 0, False]]) == ((GOOD,), 1)
    many = [["t", p, 0, 0, 0, False] for p in range(MAX_ROWS + 5)]
    rows, dropped = checked_rows(many)
    assert len(rows) == MAX_ROWS and dropped == 5
    assert checked_rows({"orders": 2}) == ((), 1)
    assert checked_rows("orders") == ((), 1)


def test_rows_read_back_from_their_dicts_are_the_rows_and_describe_says_each_field():
    rows = (("orders", 0, 10, None, None, False), GOOD, ("orders", 3, 7, 9, 2, True))
    dicts = as_dicts(rows)
    assert dicts[1] == {"topic": "orders", "partition": 2, "offset": 120, "end_offset": 200, "lag": 80, "idle": False}
    assert rows_of_dicts(dicts) == rows
    assert rows_of_dicts([{"topic": "orders"}, *dicts]) == rows, "a dict missing fields is dropped"
    assert rows_of_dicts("not a list") == ()
    assert describe(GOOD) == "orders[2] offset 120, end 200, lag 80"
    assert describe(rows[0]) == "orders[0] offset 10, end ?, lag ?"
    assert describe(rows[2]) == "orders[3] offset 7, end 9, lag 2, idle"


def test_a_heartbeat_carries_partitions_only_for_a_source_that_has_them_and_retire_clears_them():
    registry = StatsRegistry(report_retired_for=0)
    bolt, spout = SpuStats("t", "count", 1), SpuStats("t", "src", 2)
    spout.partitions = (GOOD,)
    registry.register(bolt)
    registry.register(spout)
    assert heartbeat("w1", registry=registry).partitions == [("t", "src", 2, [GOOD])]
    assert heartbeat("w1", "other", registry=registry).partitions == []
    assert "partitions" not in spout.as_dict(), "the counts stay counts: the rows travel in a field of their own"
    registry.retire(spout)
    assert spout.partitions is None and heartbeat("w1", registry=registry).partitions == []


def test_a_heartbeat_sets_a_sources_checked_partitions_and_warns_of_the_malformed_rows_it_drops(caplog):
    """Nothing from a socket is trusted: the well-formed rows land on the SPU's stats, the rest are dropped,
    counted and warned of (once a minute per worker), and a row without partitions clears them."""
    caplog.set_level(logging.WARNING, logger="esault.cluster")
    registry = WorkerRegistry()
    registry.joined("w1", "tcp://127.0.0.1:1")
    report = [list(GOOD), ["orders", "3", 0, 0, 0, False], ["\x07", 1, 0, 0, 0, False]]
    registry.heartbeat(WorkerHeartbeat("w1", [("t", "src", 4, {"emitted": 5})], [], [("t", "src", 4, report)]))
    stats = registry.stats[("t", "src", 4)]
    assert stats.partitions == (GOOD,) and stats.emitted == 5
    assert registry.bad_counts == 2
    assert "2 malformed partition row(s) of SPU 4 ('src') dropped" in caplog.text
    caplog.clear()
    registry.heartbeat(WorkerHeartbeat("w1", [("t", "src", 4, {})], [], [("t", "src", 4, "garbage")]))
    assert stats.partitions == () and registry.bad_counts == 3
    assert "malformed" not in caplog.text, "warned once a minute per worker, not once a heartbeat"
    registry.heartbeat(WorkerHeartbeat("w1", [("t", "src", 4, {"emitted": 6})]))
    assert stats.partitions is None and registry.bad_counts == 3


def test_esault_status_prints_a_line_per_partition_and_each_spu_that_reads_none_and_nothing_for_other_units():
    unit = {"spus": {3: {"partitions": as_dicts([GOOD, ("orders", 0, 5, 5, 0, True)])},
                     1: {"partitions": []},
                     7: {"processed": 3},
                     "9\x1b": {"partitions": as_dicts([GOOD])}}}  # an SPU id that is no number: skipped
    assert partition_lines(unit) == ["SPU 1 reads no partition", "SPU 3 orders[0] offset 5, end 5, lag 0, idle",
                                     "SPU 3 orders[2] offset 120, end 200, lag 80"]
    assert partition_lines({"spus": {1: {"emitted": 4}}}) == []
    assert partition_lines({"spus": "nonsense"}) == []
