"""Every Prometheus metric esault exposes, defined once.

Two kinds of metric live here:

* Per-SPU tuple counts and gauges (``SPU_COUNTERS``, ``SPU_GAUGES``,
  ``esault_spus``). The runtime does not touch prometheus_client for these: it
  adds to plain ints on a :class:`~esault.metrics.stats.SpuStats` and the
  :class:`~esault.metrics.collector.SpuStatsCollector` reads them at scrape time.
* Low-rate metrics (probe latency, tuple latency, scaling events, workers,
  dropped frames, unknown messages), defined below as prometheus_client objects
  on :data:`REGISTRY`. The runtime calls the small helpers at the bottom
  (``observe_probe_latency`` ...), never the objects directly, so label names
  and their order stay in this one file.

Labels are bounded: topology, unit, spu id, action, reason, actor. Never put a
tuple key, a value or an exception message in a label.

All helpers are thread-safe (prometheus_client locks internally) and cheap
enough for a few calls per probe period, not per tuple.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Final, Literal, NamedTuple

from prometheus_client import REGISTRY as _PROCESS_REGISTRY
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

REGISTRY: Final[CollectorRegistry] = _PROCESS_REGISTRY
"""The registry ``start_metrics_server`` serves: prometheus_client's process-wide
default, so its process/GC collectors and the Spark sink's metrics (which may
pass ``registry=REGISTRY`` or rely on the default) are served too."""

SPU_LABELS: Final = ("topology", "unit", "spu")
UNIT_LABELS: Final = ("topology", "unit")

PROBE_LATENCY_BUCKETS: Final = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)
"""1 ms .. 10 s: MAX_LATENCY is typically 10 ms .. 1 s, so it falls mid-range."""

TUPLE_LATENCY_BUCKETS: Final = PROBE_LATENCY_BUCKETS + (30.0,)
"""As the probe buckets, plus 30 s: the default message_timeout."""


class SpuMetric(NamedTuple):
    """One series family the SpuStats collector builds from a SpuStats attribute."""

    name: str
    attribute: str
    documentation: str
    scale: float = 1.0  # exported value = attribute * scale (microseconds counted, seconds exported)


SPU_COUNTERS: Final = (
    SpuMetric("esault_tuples_emitted_total", "emitted",
              "Tuples emitted by the SPU (for a spout SPU: the topology's input)."),
    SpuMetric("esault_tuples_processed_total", "processed",
              "Tuples whose execute() returned in the SPU, successfully or not (0 for spouts)."),
    SpuMetric("esault_tuples_acked_total", "acked",
              "Tuple trees reported complete to the SPU's spout task."),
    SpuMetric("esault_tuples_failed_total", "failed",
              "Spout SPU: tuple trees that failed or timed out. Bolt SPU: tuples the bolt failed."),
    SpuMetric("esault_tuples_replayed_total", "replayed",
              "Tuples re-emitted by a spout after a failure or timeout."),
    SpuMetric("esault_user_errors_total", "user_errors",
              "Exceptions raised by user code; each fails one tuple, never the SPU."),
    SpuMetric("esault_dead_letters_total", "dead_letters",
              "Tuples given up on after max_retries and written to the dead-letter store."),
    SpuMetric("esault_busy_seconds_total", "busy_us",
              "Seconds the bolt SPU spent processing batches (not waiting): rate() of it is its busy fraction.",
              1e-6),
    SpuMetric("esault_tuples_shed_total", "shed",
              "Tuples a bolt dropped on purpose under overload (a stream join's load shedding): never silent."),
    SpuMetric("esault_snapshot_seconds_total", "snapshot_us",
              "Seconds the bolt SPU's own thread spent encoding checkpoint snapshots (the part of a checkpoint "
              "that takes the processing thread's time; writing is on another thread).", 1e-6),
)
"""Counters, labelled topology/unit/spu, for live SPUs only: a retired SPU's series end when it
stops (its counts live on in its unit's retired total, esault.metrics.stats.StatsRegistry.totals)."""

SPU_GAUGES: Final = (
    SpuMetric("esault_pes", "pes", "Processing elements (one per live key group) in the SPU."),
    SpuMetric("esault_queue_depth", "queue_depth", "Spout SPUs: tuples held back by max_spout_pending."),
    SpuMetric("esault_backlog", "backlog", "Bolt SPUs: messages (mostly batches) waiting in the mailbox; spout SPUs: tuples their source "
              "has ready but not emitted (Spout.backlog(), e.g. Kafka lag)."),
    SpuMetric("esault_inflight_tuples", "inflight",
              "Spout tuples emitted and not yet acked or failed (spout SPUs)."),
    SpuMetric("esault_inflight_trees", "trees",
              "Tuple trees (one per spout round) the spout SPU started and that are not yet complete or failed."),
)
"""Gauges, labelled topology/unit/spu, reported for live SPUs only."""

SPUS_METRIC: Final = SpuMetric(
    "esault_spus", "", "Live SPUs of the unit in this process (sum over instances for the unit)."
)
"""Gauge labelled topology/unit, counted from the live SpuStats."""


PROBE_LATENCY: Final = Histogram(
    "esault_probe_latency_seconds",
    "Latency probe round trip through one SPU (input router, PE, output router).",
    labelnames=SPU_LABELS,
    buckets=PROBE_LATENCY_BUCKETS,
    registry=REGISTRY,
)
TUPLE_LATENCY: Final = Histogram(
    "esault_tuple_latency_seconds",
    "Time from a spout emitting a tuple to its tuple tree completing (acked).",
    labelnames=UNIT_LABELS,
    buckets=TUPLE_LATENCY_BUCKETS,
    registry=REGISTRY,
)
SCALING_EVENTS: Final = Counter(
    "esault_scaling_events_total",
    "Completed SPU splits and merges, by unit, action and reason.",
    labelnames=("topology", "unit", "action", "reason"),
    registry=REGISTRY,
)
WORKERS: Final = Gauge(
    "esault_workers",
    "Worker processes (resources) the driver currently holds.",
    registry=REGISTRY,
)
FRAMES_DROPPED: Final = Counter(
    "esault_frames_dropped_total",
    "Malformed or undeliverable frames dropped by the transport, by reason.",
    labelnames=("reason",),
    registry=REGISTRY,
)
AUTH_REJECTED: Final = Counter(
    "esault_auth_rejected_total",
    "Connections or messages refused for their key, by reason (no_curve, unknown_key, handshake, "
    "not_permitted).",
    labelnames=("reason",),
    registry=REGISTRY,
)
UNKNOWN_MESSAGES: Final = Counter(
    "esault_unknown_messages_total",
    "Messages an actor did not understand (logged and dropped), by actor class.",
    labelnames=("actor",),
    registry=REGISTRY,
)

CHECKPOINTS: Final = Counter(
    "esault_checkpoints_total",
    "Checkpoints by outcome (completed, failed); failed ones are retried by the next.",
    labelnames=("topology", "outcome"),
    registry=REGISTRY,
)

CHECKPOINT_FAILURES_IN_A_ROW: Final = Gauge(
    "esault_checkpoint_failures_in_a_row",
    "Checkpoints failed since the last completed one; the job stops once it exceeds tolerable_checkpoint_failures.",
    labelnames=("topology",),
    registry=REGISTRY,
)

CHECKPOINT_DURATION: Final = Histogram(
    "esault_checkpoint_duration_seconds",
    "Time from triggering a checkpoint to recording it complete (every SPU's snapshot durable).",
    labelnames=("topology",),
    buckets=PROBE_LATENCY_BUCKETS + (30.0, 60.0),
    registry=REGISTRY,
)

RECOVERIES: Final = Counter(
    "esault_recoveries_total",
    "Rollbacks of every SPU to the last completed checkpoint (a worker died, or a checkpoint got stuck).",
    labelnames=("topology",),
    registry=REGISTRY,
)

RECOVERY_PAUSE: Final = Histogram(
    "esault_recovery_pause_seconds",
    "Time a rollback took: discarding every SPU and relaunching them restored.",
    labelnames=("topology",),
    buckets=PROBE_LATENCY_BUCKETS + (30.0, 60.0),
    registry=REGISTRY,
)

KAFKA_CONSUMER_LAG: Final = Gauge(
    "esault_kafka_consumer_lag",
    "Records of a Kafka partition a KafkaSource has not emitted yet (high watermark - next offset), "
    "per topic and partition.",
    labelnames=("topology", "unit", "topic", "partition"),
    registry=REGISTRY,
)
"""Bounded: one series per partition a source instance reads, removed when the instance stops or rolls
back (its partitions leave with it); a worker forwards at most MAX_ROWS_PER_WORKER samples, and a
source reading more than MAX_LAG_SERIES partitions exports the MAX_LAG_SERIES with the most lag."""

def _waiting_gauge(role: str, example: str) -> Gauge:
    """The gauge of a spout's or a bolt's waits outside esault: one shape, one series per waiting instance."""
    return Gauge(f"esault_{role}_waiting_since_seconds",
                 f"Unix time since which a {role} SPU's instance waits for something outside esault "
                 f"({role.capitalize()}.waiting_for(), e.g. {example}); absent while it does not wait.",
                 labelnames=("topology", "unit", "spu", "waiting_for"), registry=REGISTRY)


SPOUT_WAITING: Final = _waiting_gauge("spout", "a Kafka broker that stopped answering")
"""Bounded: at most one series per spout SPU, removed once it stops waiting or stops (what it waits for is
the source's own short text, cut to MAX_WAITING_TEXT characters)."""

BOLT_WAITING: Final = _waiting_gauge("bolt", "a KafkaSink's transaction held by a broker that stopped answering")
"""Bounded as SPOUT_WAITING: at most one series per bolt unit an SPU runs (its own, a chained one's)."""

MAX_WAITING_TEXT: Final = 200

MAX_LAG_SERIES: Final = 200
"""Per source instance: partitions beyond this many are summed in esault_backlog only."""

SCALING_ACTIONS: Final = ("split", "merge", "assign_workload", "assign_resource", "rescale", "assign_logic")
SCALING_REASONS: Final = ("overload", "underload", "manual", "controller")
"""The reasons the runtime is expected to use; kept small so the label stays bounded."""

ScalingAction = Literal["split", "merge", "assign_workload", "assign_resource", "rescale", "assign_logic"]


class SinkMetric(NamedTuple):
    name: str
    type: str


SINK_METRICS: Final = (
    SinkMetric("esault_sink_rows_committed_total", "counter"),
    SinkMetric("esault_sink_batches_total", "counter"),
    SinkMetric("esault_sink_commit_seconds", "histogram"),
    SinkMetric("esault_sink_rows_rejected_total", "counter"),
    SinkMetric("esault_sink_commit_failures_total", "counter"),
)
"""Defined in spark_sink/metrics.py (labels topology, table), not here; named
here only so dashboards and tests can check the names they use."""


def _sample_names(name: str, metric_type: str) -> tuple[str, ...]:
    if metric_type == "counter":
        base = name[: -len("_total")] if name.endswith("_total") else name
        return (base + "_total",)
    if metric_type == "histogram":
        return (name + "_bucket", name + "_sum", name + "_count")
    return (name,)


def exposed_sample_names() -> frozenset[str]:
    """Every sample name esault exposes (histograms as _bucket/_sum/_count).

    Read from the registered objects and collector tables, so a renamed metric
    cannot silently disagree with this list. Includes the Spark sink's names.
    """
    names: set[str] = set()
    for metric in (PROBE_LATENCY, TUPLE_LATENCY, SCALING_EVENTS, WORKERS,
                   FRAMES_DROPPED, AUTH_REJECTED, UNKNOWN_MESSAGES,
                   CHECKPOINTS, CHECKPOINT_DURATION, RECOVERIES, RECOVERY_PAUSE, KAFKA_CONSUMER_LAG,
                   SPOUT_WAITING, BOLT_WAITING):
        for family in metric.describe():
            names.update(_sample_names(family.name, family.type))
    for spu_metric in SPU_COUNTERS:
        names.update(_sample_names(spu_metric.name, "counter"))
    for spu_metric in SPU_GAUGES + (SPUS_METRIC,):
        names.add(spu_metric.name)
    for sink in SINK_METRICS:
        names.update(_sample_names(sink.name, sink.type))
    return frozenset(names)


def _seconds(value: float) -> float:
    """Clamp to >= 0: a cross-process latency can come out slightly negative
    when two hosts' clocks disagree; a negative observation would corrupt _sum."""
    if math.isnan(value):
        return 0.0
    return value if value > 0.0 else 0.0


def observe_probe_latency(topology: str, unit: str, spu: int, seconds: float) -> None:
    """Record one probe's round trip through SPU ``spu`` of ``unit`` (monitor actor)."""
    PROBE_LATENCY.labels(topology, unit, str(spu)).observe(_seconds(seconds))


def forget_probe_latency(topology: str, unit: str, spu: int) -> None:
    """Drop the probe histogram of an SPU that left ``unit`` (monitor actor, after a merge or at stop).

    Keeps the ``spu`` label of esault_probe_latency_seconds to live SPUs; a no-op
    for an SPU that was never probed.
    """
    try:
        PROBE_LATENCY.remove(topology, unit, str(spu))
    except KeyError:
        pass


def observe_tuple_latency(topology: str, unit: str, seconds: float) -> None:
    """Record one completed tuple tree; ``unit`` is the spout unit that emitted it."""
    TUPLE_LATENCY.labels(topology, unit).observe(_seconds(seconds))


def record_scaling_event(topology: str, unit: str, action: ScalingAction, reason: str) -> None:
    """Count one completed split, merge, assign_workload or assign_resource of ``unit`` (after the routes are installed).

    ``reason`` should be one of SCALING_REASONS; Grafana draws it on the
    SPUs-per-unit panel as an annotation.
    """
    if action not in SCALING_ACTIONS:
        raise ValueError(
            f"record_scaling_event: action must be one of {', '.join(SCALING_ACTIONS)}, got {action!r} "
            f"(unit {unit!r} of topology {topology!r}); "
            "write record_scaling_event(t, u, 'split', 'overload'), not (t, u, 'overload', 'split')"
        )
    if not reason:
        raise ValueError(
            f"record_scaling_event: reason must be a non-empty word such as "
            f"{', '.join(SCALING_REASONS)}; got {reason!r}"
        )
    SCALING_EVENTS.labels(topology, unit, action, reason).inc()


def set_workers(n: int) -> None:
    """Set the number of worker processes the driver holds (driver only)."""
    if n < 0:
        raise ValueError(f"set_workers: a worker count cannot be negative, got {n!r}")
    WORKERS.set(n)


def count_dropped_frame(reason: str) -> None:
    """Count one dropped frame; ``reason`` is a short fixed word (e.g. 'decode', 'unknown_type')."""
    FRAMES_DROPPED.labels(reason).inc()


def count_auth_rejected(reason: str) -> None:
    """Count one connection or message refused for its key; ``reason`` is a short fixed word."""
    AUTH_REJECTED.labels(reason).inc()


def count_unknown_message(actor: str) -> None:
    """Count one message an actor did not handle; ``actor`` is its class name, e.g. 'SpuActor'."""
    UNKNOWN_MESSAGES.labels(actor).inc()


# --- zero series: a labelled series exists (at 0) before its first event ----------------------
# Prometheus's rate()/increase() cannot see the first increment of a counter series that appears
# with value 1, and a panel over a series that does not exist yet shows "No data" rather than 0.
# So each process creates, at start, the series whose label values it knows: bounded, fixed sets.

AUTOMATIC_SCALING: Final = (("split", "overload"), ("merge", "underload"))
"""The (action, reason) pairs the built-in latency controller records for the units it controls."""


def init_frame_drop_series(reasons: Iterable[str]) -> None:
    """Create esault_frames_dropped_total{reason} at 0 for each reason this process's transport can drop for."""
    for reason in reasons:
        FRAMES_DROPPED.labels(reason)


def init_auth_rejected_series(reasons: Iterable[str]) -> None:
    """Create esault_auth_rejected_total{reason} at 0 for each reason this process can refuse a key for."""
    for reason in reasons:
        AUTH_REJECTED.labels(reason)


def init_unknown_message_series(actor: str) -> None:
    """Create esault_unknown_messages_total{actor} at 0 (an actor class, when an instance starts)."""
    UNKNOWN_MESSAGES.labels(actor)


def init_scaling_series(topology: str, unit: str) -> None:
    """Create the automatic split/merge series of a unit the latency controller controls, at 0."""
    for action, reason in AUTOMATIC_SCALING:
        SCALING_EVENTS.labels(topology, unit, action, reason)


def init_checkpoint_series(topology: str) -> None:
    """Create a checkpointing job's checkpoint (completed, failed) and recovery series, at 0."""
    for outcome in ("completed", "failed"):
        CHECKPOINTS.labels(topology, outcome)
    CHECKPOINT_DURATION.labels(topology)
    CHECKPOINT_FAILURES_IN_A_ROW.labels(topology).set(0)
    RECOVERIES.labels(topology)
    RECOVERY_PAUSE.labels(topology)


def record_checkpoint(topology: str, completed: bool, seconds: float, failures_in_a_row: int = 0) -> None:
    """Count one checkpoint; a completed one's duration goes to the histogram."""
    CHECKPOINTS.labels(topology, "completed" if completed else "failed").inc()
    CHECKPOINT_FAILURES_IN_A_ROW.labels(topology).set(failures_in_a_row)
    if completed:
        CHECKPOINT_DURATION.labels(topology).observe(_seconds(seconds))


def record_recovery(topology: str, seconds: float) -> None:
    """Count one rollback and how long it paused the job."""
    RECOVERIES.labels(topology).inc()
    RECOVERY_PAUSE.labels(topology).observe(_seconds(seconds))


def set_kafka_lag(topology: str, unit: str, lags: dict[tuple[str, int], int],
                  exported: set[tuple[str, int]]) -> set[tuple[str, int]]:
    """Export one source instance's lag per partition; returns the partitions now exported.

    ``exported`` is what the previous call returned: partitions no longer among the MAX_LAG_SERIES with
    the most lag (or no longer read) lose their series, so the count stays bounded.
    """
    top = sorted(lags, key=lambda tp: (-lags[tp], tp))[:MAX_LAG_SERIES]
    for topic, partition in top:
        KAFKA_CONSUMER_LAG.labels(topology, unit, topic, str(partition)).set(lags[(topic, partition)])
    now = set(top)
    forget_kafka_lag(topology, unit, exported - now)
    return now


def forget_kafka_lag(topology: str, unit: str, partitions: Iterable[tuple[str, int]]) -> None:
    """Remove the lag series of partitions a source instance no longer reads (it stopped or rolled back)."""
    for topic, partition in partitions:
        try:
            KAFKA_CONSUMER_LAG.remove(topology, unit, topic, str(partition))
        except KeyError:
            pass


def set_waiting(gauge: Gauge, topology: str, unit: str, spu: int, waiting_for: str, since: float) -> None:
    """Unit ``unit`` in SPU ``spu`` waits for ``waiting_for`` since ``since`` (unix seconds): one series, its
    last text, in `gauge` (SPOUT_WAITING for a source, BOLT_WAITING for a bolt)."""
    clear_waiting(gauge, topology, unit, spu)
    gauge.labels(topology, unit, str(spu), waiting_for[:MAX_WAITING_TEXT]).set(since)


def clear_waiting(gauge: Gauge, topology: str, unit: str, spu: int) -> None:
    """Unit ``unit`` in SPU ``spu`` no longer waits (or stopped): its series in `gauge` goes."""
    for family in gauge.collect():
        for sample in family.samples:
            labels = sample.labels
            if (labels["topology"], labels["unit"], labels["spu"]) == (topology, unit, str(spu)):
                try:
                    gauge.remove(topology, unit, str(spu), labels["waiting_for"])
                except KeyError:
                    pass
