"""A worker's own low-rate metrics, carried to the driver in heartbeats and served on its /metrics.

SPU counts already travel as SpuStats rows. What else a worker process observes on prometheus_client
objects -- frames its transport dropped, keys it refused, messages its actors did not understand,
the tuple latency of a spout placed on it -- would otherwise be scrapeable only from the worker's
own /metrics, which spawned workers do not serve. So the worker sends those samples (when they
changed, and every few seconds regardless, in case a beat was lost) and the driver serves them
next to its own, each with a ``process`` label naming the worker: one scrape target still has every
series, and sums over ``reason``/``actor``/``unit`` add the workers' counts in.

Bounded: the forwarded metrics have fixed label sets (reasons, actor classes, spout units, the partitions a Kafka source reads), and a
worker's samples leave the driver when the worker does.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any, Final

from prometheus_client.metrics_core import Metric
from prometheus_client.samples import Sample

from esault.metrics.registry import (
    AUTH_REJECTED, BOLT_WAITING, FRAMES_DROPPED, KAFKA_CONSUMER_LAG, SPOUT_WAITING, TUPLE_LATENCY, UNKNOWN_MESSAGES,
)

ForwardedRow = tuple[str, str, dict[str, str], float]
"""(family name, sample name, labels, value), as a WorkerHeartbeat carries it."""

FORWARDED_METRICS: Final = (FRAMES_DROPPED, AUTH_REJECTED, UNKNOWN_MESSAGES, TUPLE_LATENCY, KAFKA_CONSUMER_LAG,
                            SPOUT_WAITING, BOLT_WAITING)
"""What a worker forwards; everything else it observes on prometheus_client objects is driver-side."""

_LABELS: Final = {family.name: frozenset(metric._labelnames) | {"le"}
                   for metric in FORWARDED_METRICS for family in metric.describe()}
"""The label names each forwarded family may carry (le: a histogram bucket's)."""

MAX_ROWS_PER_WORKER: Final = 1000
"""A worker's samples beyond this are dropped: a misbehaving worker cannot grow the driver's /metrics."""

PROCESS_LABEL: Final = "process"
REFRESH_BEATS: Final = 25
"""A worker resends unchanged samples every this many heartbeats (5 s at 0.2 s): a lost beat heals."""


def process_samples(metrics: Iterable[Any] = FORWARDED_METRICS) -> list[ForwardedRow]:
    """This process's samples of the forwarded metrics (``_created`` timestamps left out)."""
    rows: list[ForwardedRow] = []
    for metric in metrics:
        for family in metric.collect():
            for sample in family.samples:
                if not sample.name.endswith("_created"):
                    rows.append((family.name, sample.name, dict(sample.labels), float(sample.value)))
    return rows


class SampleSender:
    """Worker side: what the next heartbeat carries -- the samples if they changed or are due, else []."""

    def __init__(self, refresh_beats: int = REFRESH_BEATS,
                 read: Any = process_samples) -> None:
        self._read = read
        self._refresh_beats = refresh_beats
        self._last: list[ForwardedRow] | None = None
        self._beats_since = 0

    def next_rows(self) -> list[ForwardedRow]:
        rows = self._read()
        self._beats_since += 1
        if rows == self._last and self._beats_since < self._refresh_beats:
            return []
        self._last, self._beats_since = rows, 0
        return rows


class ForwardedSamples:
    """Driver side: each worker's last reported samples; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_process: dict[str, list[ForwardedRow]] = {}

    def update(self, process: str, rows: list[ForwardedRow]) -> None:
        """Keep `rows` as `process`'s samples; an empty list means "unchanged" and is ignored.

        Only samples of the forwarded families with their own label names are kept, at most
        MAX_ROWS_PER_WORKER: the series a worker can add to the driver's /metrics stay bounded.
        """
        if not rows:
            return
        kept = [row for row in rows if row[0] in _LABELS and row[2].keys() <= _LABELS[row[0]]]
        with self._lock:
            self._by_process[process] = kept[:MAX_ROWS_PER_WORKER]

    def forget(self, process: str) -> None:
        with self._lock:
            self._by_process.pop(process, None)

    def by_family(self) -> dict[str, list[Sample]]:
        """Every worker's samples, labelled with its process name, grouped by family name."""
        with self._lock:
            snapshot = dict(self._by_process)
        families: dict[str, list[Sample]] = {}
        for process, rows in sorted(snapshot.items()):
            for family, name, labels, value in rows:
                families.setdefault(family, []).append(Sample(name, {**labels, PROCESS_LABEL: process}, value))
        return families


def units_waiting(topology: str, forwarded: ForwardedSamples | None = None) -> list[tuple[str, int, str, float]]:
    """(unit, spu, what it waits for, since when) of every waiting spout SPU and bolt unit of `topology`:
    this process's own (units in the driver) and its workers' (from their heartbeats). Job.status() shows
    them."""
    samples = [s for gauge in (SPOUT_WAITING, BOLT_WAITING) for family in gauge.collect() for s in family.samples]
    by_family = (forwarded or FORWARDED).by_family()
    samples += by_family.get(SPOUT_WAITING._name, []) + by_family.get(BOLT_WAITING._name, [])
    out = []
    for sample in samples:
        labels = sample.labels
        if labels.get("topology") == topology and labels.get("spu", "").lstrip("-").isdigit():
            out.append((labels.get("unit", ""), int(labels["spu"]), labels.get("waiting_for", ""), sample.value))
    return sorted(out)


def waiting_since(since: float) -> str:
    """A wait's start as status shows it: UTC to the second, ISO 8601 ('2026-11-26T08:30:01Z')."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(since))


FORWARDED = ForwardedSamples()
"""The driver's store (fed by WorkerRegistry.heartbeat); served by every metrics server of the process."""


class WithForwardedSamples:
    """A view of a CollectorRegistry whose families also carry the workers' forwarded samples.

    Appended to the driver's own family of the same name, so the exposition has one family per name
    (two would make Prometheus reject the scrape).
    """

    def __init__(self, registry: Any, forwarded: ForwardedSamples = FORWARDED) -> None:
        self.registry = registry
        self.forwarded = forwarded

    def collect(self) -> Iterator[Metric]:
        extra = self.forwarded.by_family()
        for family in self.registry.collect():
            samples = extra.pop(family.name, None)
            if samples:
                merged = Metric(family.name, family.documentation, family.type, family.unit)
                merged.samples = list(family.samples) + samples
                yield merged
            else:
                yield family

    def restricted_registry(self, names: Iterable[str]) -> Any:
        return WithForwardedSamples(self.registry.restricted_registry(names), self.forwarded)

