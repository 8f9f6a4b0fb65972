"""The metrics exporter, scraped over real HTTP and parsed with prometheus_client's parser."""

from __future__ import annotations

import re
import socket
import threading
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from esault.errors import ConfigError
from esault.metrics import (
    REGISTRY,
    STATS,
    MetricsServer,
    SpuStats,
    SpuStatsCollector,
    StatsRegistry,
    count_dropped_frame,
    count_unknown_message,
    exposed_sample_names,
    forget_probe_latency,
    observe_probe_latency,
    observe_tuple_latency,
    record_scaling_event,
    register_stats_collector,
    set_workers,
    start_metrics_server,
)
from esault.metrics.registry import PROBE_LATENCY_BUCKETS, SPU_COUNTERS, SPU_GAUGES

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(server: MetricsServer) -> Samples:
    with urllib.request.urlopen(server.url, timeout=5) as response:
        assert response.status == 200
        text = response.read().decode("utf-8")
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = (sample.name, frozenset(sample.labels.items()))
            assert key not in samples, f"duplicate series {key} in the exposition"
            samples[key] = sample.value
    return samples


def spu_labels(topology: str, unit: str, spu: int) -> frozenset[tuple[str, str]]:
    return frozenset({"topology": topology, "unit": unit, "spu": str(spu)}.items())


def unit_labels(topology: str, unit: str) -> frozenset[tuple[str, str]]:
    return frozenset({"topology": topology, "unit": unit}.items())


def series(samples: Samples, name: str) -> dict[frozenset[tuple[str, str]], float]:
    return {labels: value for (sample_name, labels), value in samples.items() if sample_name == name}


@pytest.fixture
def stats() -> StatsRegistry:
    return StatsRegistry()


@pytest.fixture
def server(stats: StatsRegistry) -> Iterator[MetricsServer]:
    """An exporter on a private CollectorRegistry, so tests cannot see each other's SPUs."""
    with start_metrics_server(registry=CollectorRegistry(), stats=stats) as running:
        yield running


def make_stats(topology: str, unit: str, spu: int, **counts: int) -> SpuStats:
    stats = SpuStats(topology, unit, spu)
    for name, value in counts.items():
        setattr(stats, name, value)
    return stats


def test_every_spu_counter_is_exposed_with_topology_unit_and_spu_labels(stats, server):
    spu = make_stats(
        "wordcount", "count", 3, emitted=11, processed=12, acked=13, failed=14,
        replayed=15, user_errors=16, dead_letters=17, busy_us=2_500_000, shed=18, snapshot_us=125_000,
    )
    stats.register(spu)

    samples = scrape(server)

    expected = {
        "esault_tuples_emitted_total": 11,
        "esault_tuples_processed_total": 12,
        "esault_tuples_acked_total": 13,
        "esault_tuples_failed_total": 14,
        "esault_tuples_replayed_total": 15,
        "esault_user_errors_total": 16,
        "esault_dead_letters_total": 17,
        "esault_busy_seconds_total": 2.5,  # counted in microseconds, exported in seconds
        "esault_tuples_shed_total": 18,
        "esault_snapshot_seconds_total": 0.125,
    }
    assert {m.name for m in SPU_COUNTERS} == set(expected)
    for name, value in expected.items():
        assert series(samples, name) == {spu_labels("wordcount", "count", 3): value}, name


def test_counter_families_are_typed_counter_and_gauges_gauge(stats, server):
    stats.register(make_stats("t", "u", 0, processed=1, pes=2))
    with urllib.request.urlopen(server.url, timeout=5) as response:
        text = response.read().decode()
    types = {family.name: family.type for family in text_string_to_metric_families(text)}
    for metric in SPU_COUNTERS:
        assert types[metric.name.removesuffix("_total")] == "counter"
    for metric in SPU_GAUGES:
        assert types[metric.name] == "gauge"
    assert types["esault_spus"] == "gauge"


def test_gauges_report_pes_queue_depth_and_inflight_of_live_spus(stats, server):
    stats.register(make_stats("t", "split", 0, pes=4, queue_depth=9, inflight=0))
    stats.register(make_stats("t", "spout", 1, pes=1, queue_depth=0, inflight=250))

    samples = scrape(server)

    assert series(samples, "esault_pes") == {
        spu_labels("t", "split", 0): 4, spu_labels("t", "spout", 1): 1,
    }
    assert series(samples, "esault_queue_depth") == {
        spu_labels("t", "split", 0): 9, spu_labels("t", "spout", 1): 0,
    }
    assert series(samples, "esault_inflight_tuples") == {
        spu_labels("t", "split", 0): 0, spu_labels("t", "spout", 1): 250,
    }


def test_counters_follow_the_live_ints_between_scrapes(stats, server):
    spu = make_stats("t", "count", 0)
    stats.register(spu)
    assert series(scrape(server), "esault_tuples_processed_total") == {spu_labels("t", "count", 0): 0}

    spu.processed += 41
    spu.processed += 1

    assert series(scrape(server), "esault_tuples_processed_total") == {spu_labels("t", "count", 0): 42}


def test_a_retired_spus_series_leave_the_exposition_once_it_stops(stats, server):
    keep = make_stats("t", "count", 0, processed=100, acked=7, pes=3, queue_depth=5)
    merged_away = make_stats("t", "count", 1, processed=60, acked=2, pes=2, queue_depth=1)
    stats.register(keep)
    stats.register(merged_away)
    assert {labels for (_, labels) in scrape(server) if ("spu", "1") in labels}, "SPU 1 is live: it has series"

    stats.retire(merged_away)
    after = scrape(server)

    # Counters and gauges alike: the spu label takes live SPU ids only.
    assert not [key for key in after if ("spu", "1") in key[1]], "a retired SPU still has series"
    assert series(after, "esault_tuples_processed_total") == {spu_labels("t", "count", 0): 100}
    assert series(after, "esault_tuples_acked_total") == {spu_labels("t", "count", 0): 7}
    assert series(after, "esault_pes") == {spu_labels("t", "count", 0): 3}
    assert series(after, "esault_queue_depth") == {spu_labels("t", "count", 0): 5}
    assert series(after, "esault_spus") == {unit_labels("t", "count"): 1}
    # What it counted is kept for the unit's totals (Job.status), not as a series.
    assert sum(s.processed for s in stats.totals()) == 160


def test_the_spu_label_takes_only_live_ids_after_many_splits_and_merges(stats, server):
    """A long job splits and merges often: the exposition's size follows the live SPUs."""
    live = {spu: make_stats("t", "count", spu, processed=1) for spu in range(4)}
    for spu_stats in live.values():
        stats.register(spu_stats)
    next_id = len(live)
    for step in range(200):
        gone = sorted(live)[step % len(live)]  # merge one away, split a new one off
        stats.retire(live.pop(gone))
        live[next_id] = make_stats("t", "count", next_id, processed=1)
        stats.register(live[next_id])
        next_id += 1

    samples = scrape(server)

    exposed = {dict(labels)["spu"] for (_, labels) in samples if dict(labels).get("topology") == "t"
               and "spu" in dict(labels)}
    assert exposed == {str(spu) for spu in live}
    assert len(samples) == len(live) * (len(SPU_COUNTERS) + len(SPU_GAUGES)) + 1  # + esault_spus
    assert sum(s.processed for s in stats.totals()) == next_id, "every SPU ever created processed 1"


def test_esault_spus_counts_the_live_spus_of_each_unit(stats, server):
    spus = [make_stats("wc", "count", i) for i in range(3)]
    for spu in spus:
        stats.register(spu)
    stats.register(make_stats("wc", "split", 0))
    stats.register(make_stats("other", "count", 0))
    assert series(scrape(server), "esault_spus") == {
        unit_labels("wc", "count"): 3,
        unit_labels("wc", "split"): 1,
        unit_labels("other", "count"): 1,
    }

    stats.retire(spus[2])
    stats.retire(spus[1])

    assert series(scrape(server), "esault_spus")[unit_labels("wc", "count")] == 1


def test_esault_spus_is_zero_for_a_unit_whose_spus_are_all_retired(stats, server):
    only = make_stats("wc", "sink", 0, processed=8)
    stats.register(only)
    stats.retire(only)

    samples = scrape(server)

    assert series(samples, "esault_spus") == {unit_labels("wc", "sink"): 0}
    assert series(samples, "esault_tuples_processed_total") == {}


def test_a_forgotten_topology_leaves_the_exposition(stats, server):
    stats.register(make_stats("gone", "count", 0, processed=1))
    stats.register(make_stats("kept", "count", 0, processed=2))

    stats.forget_topology("gone")

    assert series(scrape(server), "esault_tuples_processed_total") == {spu_labels("kept", "count", 0): 2}


def test_scrapes_during_concurrent_splits_and_merges_never_fail_and_show_only_live_spus(stats, server):
    """An actor thread counts and replaces SPUs while the HTTP thread scrapes."""
    stop = threading.Event()
    steps = [0]
    live = [make_stats("t", "count", i) for i in range(20)]

    def actor_thread() -> None:
        for spu in live:
            stats.register(spu)
        next_id = len(live)
        while not stop.is_set() and steps[0] < 300_000:
            live[steps[0] % 20].processed += 1
            steps[0] += 1
            if steps[0] % 1000 == 0:  # merge one SPU away, split a new one in
                slot = (steps[0] // 1000) % 20
                stats.retire(live[slot])
                live[slot] = make_stats("t", "count", next_id)
                next_id += 1
                stats.register(live[slot])

    thread = threading.Thread(target=actor_thread, name="actor")
    thread.start()
    try:
        for _ in range(5):
            samples = scrape(server)
            spus = series(samples, "esault_tuples_processed_total")
            assert len(spus) in (19, 20), f"expected the 20 live SPUs (19 mid-replacement), got {len(spus)}"
            assert series(samples, "esault_spus").get(unit_labels("t", "count"), 20) in (19, 20)
    finally:
        stop.set()
        thread.join(10)
    assert not thread.is_alive()
    exposed = {dict(labels)["spu"] for labels in series(scrape(server), "esault_tuples_processed_total")}
    assert exposed == {str(spu.spu) for spu in live}
    assert sum(s.processed for s in stats.totals()) == steps[0]


def test_registering_the_stats_collector_twice_is_a_no_op():
    registry = CollectorRegistry()
    stats = StatsRegistry()
    first = register_stats_collector(registry, stats)
    second = register_stats_collector(registry, stats)
    assert first is second
    assert isinstance(first, SpuStatsCollector)

    with start_metrics_server(registry=registry, stats=stats) as one, \
            start_metrics_server(registry=registry, stats=stats) as two:
        stats.register(make_stats("t", "u", 0, processed=3))
        assert scrape(one) == scrape(two)


def test_a_second_stats_registry_on_the_same_collector_registry_is_refused():
    registry = CollectorRegistry()
    register_stats_collector(registry, StatsRegistry())
    with pytest.raises(ValueError, match="already serves another StatsRegistry"):
        register_stats_collector(registry, StatsRegistry())


def test_port_zero_picks_a_free_port_and_stop_releases_it():
    server = start_metrics_server(registry=CollectorRegistry(), stats=StatsRegistry())
    assert server.host == "127.0.0.1"
    assert 0 < server.port <= 65535
    assert server.url == f"http://127.0.0.1:{server.port}/metrics"
    assert server.target == f"127.0.0.1:{server.port}"

    server.stop()
    server.stop()  # idempotent

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", server.port))  # the port is free again


def test_a_wildcard_bind_advertises_a_loopback_url():
    with start_metrics_server("0.0.0.0", 0, registry=CollectorRegistry(), stats=StatsRegistry()) as server:
        assert server.url == f"http://127.0.0.1:{server.port}/metrics"
        scrape(server)


def test_metrics_bind_loopback_by_default_in_the_config_the_exporter_and_the_cli():
    """/metrics shows topology and unit names: only an explicit --metrics-host opens it to a network."""
    import inspect

    from esault.cli import build_parser
    from esault.config import JobConfig

    assert JobConfig().metrics_host == "127.0.0.1"
    assert JobConfig.load(environ={}).metrics_host == "127.0.0.1"
    assert inspect.signature(start_metrics_server).parameters["host"].default == "127.0.0.1"
    # `esault run` leaves it to the config (None = no override); `esault worker` has its own default.
    assert build_parser().parse_args(["run", "topology.py"]).metrics_host is None
    assert build_parser().parse_args(["worker", "--driver", "127.0.0.1:5555"]).metrics_host == "127.0.0.1"


def test_a_default_metrics_server_listens_on_loopback_only():
    with start_metrics_server(registry=CollectorRegistry(), stats=StatsRegistry()) as server:
        host, port = server._httpd.socket.getsockname()[:2]
        assert (host, port) == ("127.0.0.1", server.port)


def non_loopback_ipv4() -> str | None:
    """An IPv4 address of this machine other than 127.x (the one its default route leaves from)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        try:
            udp.connect(("192.0.2.1", 9))  # TEST-NET-1: no packet is sent, the kernel only picks a route
        except OSError:
            return None
        address = udp.getsockname()[0]
    return None if address.startswith("127.") or address == "0.0.0.0" else address


def can_connect(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as client:
        client.settimeout(5)
        try:
            client.connect((host, port))
        except OSError:  # ConnectionRefusedError: nothing listens on that address and port
            return False
        return True


def test_a_default_metrics_server_answers_on_127_0_0_1_only():
    """Tried on 127.0.0.2 (another loopback address: always there on Linux, so this never skips) and on
    the machine's own non-loopback address when it has one."""
    addresses = ["127.0.0.2"] + [a for a in [non_loopback_ipv4()] if a]
    # The control: on a wildcard bind every address does reach /metrics, so a refusal below
    # is the 127.0.0.1 bind at work, not an address nothing can reach.
    with start_metrics_server("0.0.0.0", 0, registry=CollectorRegistry(), stats=StatsRegistry()) as wildcard:
        for address in addresses:
            assert can_connect(address, wildcard.port), f"control failed: {address}:{wildcard.port} unreachable"

    with start_metrics_server(registry=CollectorRegistry(), stats=StatsRegistry()) as server:
        assert can_connect("127.0.0.1", server.port)
        for address in addresses:
            assert not can_connect(address, server.port), (
                f"a default metrics server answered on {address}:{server.port}; it must bind 127.0.0.1 only"
            )


def test_a_port_in_use_is_reported_with_the_fix():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError, match=rf"cannot serve metrics on 127\.0\.0\.1:{port}: .*--metrics-port"):
            start_metrics_server(port=port, registry=CollectorRegistry(), stats=StatsRegistry())


@pytest.mark.parametrize("port", [-1, 65536, "9100", True])
def test_an_invalid_port_is_refused(port):
    with pytest.raises(ConfigError, match="metrics port must be 0-65535"):
        start_metrics_server(port=port, registry=CollectorRegistry(), stats=StatsRegistry())


def test_the_default_server_serves_the_process_stats_and_runtime_metrics():
    topology = "test-default-server"
    spu = make_stats(topology, "count", 0, processed=7)
    STATS.register(spu)
    try:
        observe_probe_latency(topology, "count", 0, 0.004)
        observe_tuple_latency(topology, "spout", 0.2)
        record_scaling_event(topology, "count", "split", "overload")
        with start_metrics_server() as server:
            samples = scrape(server)
    finally:
        STATS.forget_topology(topology)

    assert samples[("esault_tuples_processed_total", spu_labels(topology, "count", 0))] == 7
    assert samples[("esault_probe_latency_seconds_count", spu_labels(topology, "count", 0))] >= 1
    assert samples[("esault_tuple_latency_seconds_count", unit_labels(topology, "spout"))] >= 1
    scaling = frozenset({"topology": topology, "unit": "count", "action": "split", "reason": "overload"}.items())
    assert samples[("esault_scaling_events_total", scaling)] >= 1
    assert ("esault_workers", frozenset()) in samples


def value(name: str, labels: dict[str, str] | None = None) -> float:
    found = REGISTRY.get_sample_value(name, labels or {})
    return 0.0 if found is None else found


def test_observe_probe_latency_lands_in_the_bucket_of_its_latency():
    labels = {"topology": "t-probe", "unit": "count", "spu": "2"}
    le_5ms = value("esault_probe_latency_seconds_bucket", {**labels, "le": "0.005"})
    le_2_5ms = value("esault_probe_latency_seconds_bucket", {**labels, "le": "0.0025"})

    observe_probe_latency("t-probe", "count", 2, 0.003)

    assert value("esault_probe_latency_seconds_bucket", {**labels, "le": "0.005"}) == le_5ms + 1
    assert value("esault_probe_latency_seconds_bucket", {**labels, "le": "0.0025"}) == le_2_5ms


def test_forget_probe_latency_removes_the_histogram_of_an_spu_that_left():
    kept = {"topology": "t-forget", "unit": "count", "spu": "1"}
    gone = {"topology": "t-forget", "unit": "count", "spu": "2"}
    observe_probe_latency("t-forget", "count", 1, 0.003)
    observe_probe_latency("t-forget", "count", 2, 0.003)
    assert REGISTRY.get_sample_value("esault_probe_latency_seconds_count", gone) == 1

    forget_probe_latency("t-forget", "count", 2)
    forget_probe_latency("t-forget", "count", 2)  # twice, or never probed: a no-op
    forget_probe_latency("t-forget", "count", 99)

    assert REGISTRY.get_sample_value("esault_probe_latency_seconds_count", gone) is None
    assert REGISTRY.get_sample_value("esault_probe_latency_seconds_count", kept) == 1
    forget_probe_latency("t-forget", "count", 1)


def test_probe_buckets_span_one_millisecond_to_ten_seconds():
    assert PROBE_LATENCY_BUCKETS[0] == 0.001
    assert PROBE_LATENCY_BUCKETS[-1] == 10.0
    assert list(PROBE_LATENCY_BUCKETS) == sorted(PROBE_LATENCY_BUCKETS)


def test_a_negative_latency_from_clock_skew_is_recorded_as_zero():
    labels = {"topology": "t-skew", "unit": "spout"}
    observe_tuple_latency("t-skew", "spout", -0.5)
    assert value("esault_tuple_latency_seconds_sum", labels) == 0.0
    assert value("esault_tuple_latency_seconds_count", labels) == 1


def test_record_scaling_event_counts_by_action_and_reason():
    split = {"topology": "t-scale", "unit": "count", "action": "split", "reason": "overload"}
    merge = {"topology": "t-scale", "unit": "count", "action": "merge", "reason": "underload"}
    record_scaling_event("t-scale", "count", "split", "overload")
    record_scaling_event("t-scale", "count", "split", "overload")
    record_scaling_event("t-scale", "count", "merge", "underload")
    assert value("esault_scaling_events_total", split) == 2
    assert value("esault_scaling_events_total", merge) == 1


def test_record_scaling_event_rejects_swapped_action_and_reason():
    expected = r"action must be one of split, merge, assign_workload, assign_resource, rescale, assign_logic, got 'overload'.*not \(t, u, 'overload', 'split'\)"
    with pytest.raises(ValueError, match=expected):
        record_scaling_event("t", "count", "overload", "split")  # type: ignore[arg-type]


def test_record_scaling_event_rejects_an_empty_reason():
    with pytest.raises(ValueError, match="reason must be a non-empty word"):
        record_scaling_event("t", "count", "merge", "")


def test_set_workers_sets_the_gauge_and_refuses_negative_counts():
    set_workers(3)
    assert value("esault_workers") == 3
    set_workers(0)
    assert value("esault_workers") == 0
    with pytest.raises(ValueError, match="cannot be negative, got -1"):
        set_workers(-1)


def test_dropped_frames_and_unknown_messages_are_counted_by_reason_and_actor():
    before_frames = value("esault_frames_dropped_total", {"reason": "decode"})
    before_unknown = value("esault_unknown_messages_total", {"actor": "SpuActor"})
    count_dropped_frame("decode")
    count_unknown_message("SpuActor")
    assert value("esault_frames_dropped_total", {"reason": "decode"}) == before_frames + 1
    assert value("esault_unknown_messages_total", {"actor": "SpuActor"}) == before_unknown + 1


def test_every_metric_name_is_esault_snake_case():
    names = exposed_sample_names()
    assert names
    for name in names:
        assert re.fullmatch(r"esault_[a-z0-9]+(_[a-z0-9]+)*", name), name


def test_the_sink_metrics_the_dashboard_may_use_are_the_ones_spark_sink_defines():
    import spark_sink.metrics as sink_metrics

    from esault.metrics.registry import SINK_METRICS

    defined = {
        (family.name, family.type)
        for metric in (sink_metrics.ROWS_COMMITTED, sink_metrics.BATCHES, sink_metrics.COMMIT_SECONDS,
                       sink_metrics.ROWS_REJECTED, sink_metrics.COMMIT_FAILURES)
        for family in metric.describe()
    }
    listed = {(sink.name.removesuffix("_total"), sink.type) for sink in SINK_METRICS}
    assert listed == defined


def test_the_sink_metrics_are_served_by_the_default_exporter():
    import spark_sink.metrics as sink_metrics

    sink_metrics.SinkMetrics("test-sink-served", "words").rows_committed.inc(5)
    with start_metrics_server() as server:
        samples = scrape(server)
    labels = frozenset({"topology": "test-sink-served", "table": "words"}.items())
    assert samples[("esault_sink_rows_committed_total", labels)] == 5


def exists(name: str, labels: dict[str, str] | None = None) -> bool:
    return REGISTRY.get_sample_value(name, labels or {}) is not None


def test_a_checkpointing_jobs_checkpoint_and_recovery_series_exist_at_zero_before_the_first_checkpoint():
    from esault.metrics.registry import init_checkpoint_series

    assert not exists("esault_checkpoints_total", {"topology": "t-zero-ckpt", "outcome": "failed"})
    init_checkpoint_series("t-zero-ckpt")
    for outcome in ("completed", "failed"):
        assert exists("esault_checkpoints_total", {"topology": "t-zero-ckpt", "outcome": outcome})
        assert value("esault_checkpoints_total", {"topology": "t-zero-ckpt", "outcome": outcome}) == 0
    assert value("esault_recoveries_total", {"topology": "t-zero-ckpt"}) == 0
    assert exists("esault_recoveries_total", {"topology": "t-zero-ckpt"})
    assert exists("esault_checkpoint_duration_seconds_count", {"topology": "t-zero-ckpt"})
    assert exists("esault_recovery_pause_seconds_count", {"topology": "t-zero-ckpt"})


def test_a_controlled_units_automatic_split_and_merge_series_exist_at_zero_and_then_count():
    from esault.metrics.registry import init_scaling_series

    split = {"topology": "t-zero-scale", "unit": "count", "action": "split", "reason": "overload"}
    merge = {"topology": "t-zero-scale", "unit": "count", "action": "merge", "reason": "underload"}
    init_scaling_series("t-zero-scale", "count")
    assert exists("esault_scaling_events_total", split) and exists("esault_scaling_events_total", merge)
    assert value("esault_scaling_events_total", split) == 0
    record_scaling_event("t-zero-scale", "count", "split", "overload")
    assert value("esault_scaling_events_total", split) == 1
    assert value("esault_scaling_events_total", merge) == 0


def test_drop_rejection_and_unknown_message_series_exist_at_zero_for_the_label_values_given():
    from esault.metrics.registry import (init_auth_rejected_series, init_frame_drop_series,
                                         init_unknown_message_series)

    init_frame_drop_series(("t_zero_reason_a", "t_zero_reason_b"))
    init_auth_rejected_series(("t_zero_auth",))
    init_unknown_message_series("TZeroActor")
    assert value("esault_frames_dropped_total", {"reason": "t_zero_reason_b"}) == 0
    assert exists("esault_frames_dropped_total", {"reason": "t_zero_reason_a"})
    assert exists("esault_auth_rejected_total", {"reason": "t_zero_auth"})
    assert exists("esault_unknown_messages_total", {"actor": "TZeroActor"})


def test_an_endpoint_exposes_every_reason_it_can_drop_a_frame_for_at_zero():
    from esault.transport.endpoint import ENDPOINT_DROP_REASONS, Endpoint
    from esault.transport.wire import FRAME_ERROR_REASONS

    endpoint = Endpoint("t-zero-endpoint", lambda *args: None)
    try:
        missing = [r for r in FRAME_ERROR_REASONS + ENDPOINT_DROP_REASONS
                   if not exists("esault_frames_dropped_total", {"reason": r})]
        assert not missing
        assert all(exists("esault_auth_rejected_total", {"reason": r})
                   for r in ("handshake", "no_curve", "unknown_key"))
    finally:
        endpoint.close()


def test_a_workers_server_leaves_out_what_the_driver_exports_for_it_even_with_the_collector_registered():
    topology = "test-no-spu-series"
    STATS.register(make_stats(topology, "count", 0, processed=7))
    register_stats_collector()  # as a driver in the same process would have
    try:
        record_scaling_event(topology, "count", "split", "overload")
        count_dropped_frame("decode")
        with start_metrics_server(worker=True) as server:
            samples = scrape(server)
    finally:
        STATS.forget_topology(topology)

    spu_names = {m.name for m in SPU_COUNTERS + SPU_GAUGES} | {"esault_spus"}
    assert not [key for key in samples if key[0] in spu_names]
    assert not [key for key in samples if key[0] == "esault_frames_dropped_total"], "forwarded by heartbeat"
    scaling = frozenset({"topology": topology, "unit": "count", "action": "split", "reason": "overload"}.items())
    assert samples[("esault_scaling_events_total", scaling)] >= 1
    assert [key for key in samples if key[0].startswith("python_gc_")]


def test_esault_worker_serves_metrics_without_its_spus_series(monkeypatch):
    """A worker's SPUs are on the driver's /metrics (heartbeats); on its own too, sums would count them twice."""
    import esault.cli as cli
    import esault.cluster.credentials as credentials
    import esault.cluster.worker as worker

    topology = "test-worker-metrics"
    STATS.register(make_stats(topology, "count", 3, processed=5))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    served: list[Samples] = []

    def fake_run_worker(*args, **kwargs) -> int:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
        served.append({(s.name, frozenset(s.labels.items())): s.value
                       for family in text_string_to_metric_families(text) for s in family.samples})
        return 0

    monkeypatch.setattr(credentials.WorkerKeys, "from_files", staticmethod(lambda *args: object()))
    monkeypatch.setattr(worker, "run_worker", fake_run_worker)
    try:
        assert cli.main(["worker", "--driver", "127.0.0.1:5555", "--secret-key", "k", "--driver-key", "d",
                         "--metrics-port", str(port)]) == 0
    finally:
        STATS.forget_topology(topology)
    assert served, "the worker did not run"
    assert not [key for key in served[0] if key[0].startswith("esault_tuples_") or key[0] == "esault_spus"]
    assert ("esault_workers", frozenset()) in served[0]
