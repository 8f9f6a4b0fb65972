"""Prometheus metrics: every metric defined once (registry), SpuStats -> series
(collector), and the /metrics endpoint (exporter). See docs/OBSERVABILITY.md."""

from esault.metrics.collector import SpuStatsCollector, register_stats_collector
from esault.metrics.exporter import MetricsServer, start_metrics_server
from esault.metrics.registry import (
    REGISTRY,
    SCALING_REASONS,
    count_dropped_frame,
    count_unknown_message,
    exposed_sample_names,
    forget_probe_latency,
    observe_probe_latency,
    observe_tuple_latency,
    record_scaling_event,
    set_workers,
)
from esault.metrics.stats import RETIRED_SPU, STATS, SpuStats, StatsRegistry

__all__ = [
    "REGISTRY",
    "RETIRED_SPU",
    "SCALING_REASONS",
    "STATS",
    "MetricsServer",
    "SpuStats",
    "SpuStatsCollector",
    "StatsRegistry",
    "count_dropped_frame",
    "count_unknown_message",
    "exposed_sample_names",
    "forget_probe_latency",
    "observe_probe_latency",
    "observe_tuple_latency",
    "record_scaling_event",
    "register_stats_collector",
    "set_workers",
    "start_metrics_server",
]
