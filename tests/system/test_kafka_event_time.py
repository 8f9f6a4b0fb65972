"""Event time across source instances on a real broker (Tansu): watermarks per partition and per input channel.

Every test computes, from the records' own timestamps, which records are late in their partition (none here:
each partition is within 2 s of disorder, the windows' bound is 2.5 s) and each window's exact contents, and
compares what the job emitted with that: nothing late that was not late in the input, nothing fired early
(a window fired early misses records, which then come late or fire it again).
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

from esault import JobConfig, LocalCluster, TopologyBuilder
from esault.testing import CollectorBolt, collected, reset_collected, run_to_completion, wait_until

sys.path.insert(0, str(Path(__file__).resolve().parent))
import event_time_parts as parts  # noqa: E402

pytestmark = pytest.mark.system


@pytest.fixture(autouse=True)
def _fresh_collectors():
    reset_collected()
    yield
    reset_collected()


def clicks_topology(name: str, bootstrap: str, sources: int, window: type, windows: int = 2, pace: float = 0.02,
                    max_records: int = 100, **source: object) -> TopologyBuilder:
    b = TopologyBuilder(name)
    b.set_spout("clicks", parts.PacedKafkaSource, sources,
                params=parts.source_params(bootstrap, "clicks", slow=0, pace=pace, max_records=max_records,
                                           **source))
    b.set_bolt("windows", window, windows, pe_idle_timeout=None, elastic=False).key_grouping("clicks")
    b.set_bolt("out", CollectorBolt).shuffle_grouping("windows")
    return b


def assert_exact(outputs: list, records: list, sessions: bool) -> None:
    late_input = parts.late_in_input(records)
    assert not late_input, "the input itself has late records: the test's data is wrong"
    if sessions:
        expected = parts.session_counts(records, parts.SESSION_GAP_MS, late_input)
    else:
        expected = parts.tumbling_counts(records, 1_000, late_input)
    got, late = parts.windows_of(outputs, sessions)
    assert not late, f"{len(late)} records counted late that were on time in their partition, e.g. {late[:3]}"
    assert got == expected, parts.differences(got, expected)


@pytest.mark.parametrize(("sources", "window"), [(2, "tumbling"), (4, "sessions"), (2, "sessions"),
                                                 (4, "tumbling")])
def test_a_slow_source_instance_makes_no_record_late_and_no_window_fire_early(kafka_broker, sources, window):
    """Four partitions read by 2 or 4 instances, instance 0 held back (it reads 100 records every 20 ms, the
    others as fast as they can): the window SPUs' watermark is the minimum over the instances, each the minimum
    over its partitions. (Before watermarks per channel, 2 instances with max_skew=100: 2,413 of 8,000 records
    late, 485 of 1,619 windows wrong.)"""
    records = parts.clicks(8_000, users=20 if window == "tumbling" else 200)
    kafka_broker.create_topic("clicks", 4)
    kafka_broker.produce("clicks", [c.record() for c in records])
    cls = parts.ClickCounts if window == "tumbling" else parts.ClickSessions
    b = clicks_topology(f"clicks-{sources}-{window}", kafka_broker.bootstrap, sources, cls, max_skew=100)
    result = run_to_completion(b, timeout=120)
    assert_exact(result["out"], records, sessions=window == "sessions")
