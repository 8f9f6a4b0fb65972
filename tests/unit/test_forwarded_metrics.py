"""A worker's own low-rate metrics: what its heartbeat carries, and how the driver serves them."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from esault.metrics.forwarded import (MAX_ROWS_PER_WORKER, ForwardedSamples, SampleSender, WithForwardedSamples,
                                      process_samples)


def test_the_sender_sends_samples_when_they_change_or_are_due_and_nothing_otherwise():
    current = [("f", "f_total", {"reason": "a"}, 0.0)]
    sender = SampleSender(refresh_beats=3, read=lambda: list(current))
    assert sender.next_rows() == current  # first beat: everything
    assert sender.next_rows() == []  # unchanged
    current[0] = ("f", "f_total", {"reason": "a"}, 1.0)
    assert sender.next_rows() == current  # changed
    assert sender.next_rows() == [] and sender.next_rows() == []
    assert sender.next_rows() == current  # third unchanged beat: sent again, in case a beat was lost


def test_process_samples_leave_out_created_timestamps():
    registry = CollectorRegistry()
    counter = Counter("t_fwd", "doc", ["reason"], registry=registry)
    counter.labels("a").inc(2)
    assert process_samples([counter]) == [("t_fwd", "t_fwd_total", {"reason": "a"}, 2.0)]


def exposition(view) -> dict[str, list]:
    text = generate_latest(view).decode()
    assert text.count("# TYPE esault_frames_dropped_total counter") == 1, \
        "one family per name, or Prometheus rejects the scrape"
    return {family.name: family.samples for family in text_string_to_metric_families(text)}


def dropped(reason: str, value: float) -> tuple:
    return ("esault_frames_dropped", "esault_frames_dropped_total", {"reason": reason}, value)


def test_the_driver_serves_each_workers_samples_in_its_own_family_with_a_process_label():
    registry = CollectorRegistry()  # stands in for the driver's: its own esault_frames_dropped family
    Counter("esault_frames_dropped", "doc", ["reason"], registry=registry).labels("a").inc()
    forwarded = ForwardedSamples()
    view = WithForwardedSamples(registry, forwarded)
    forwarded.update("worker-1", [dropped("a", 5.0)])
    forwarded.update("worker-2", [dropped("b", 7.0)])
    forwarded.update("worker-2", [])  # "unchanged": the last samples stay

    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for s in exposition(view)["esault_frames_dropped"]}
    assert samples[("esault_frames_dropped_total", (("reason", "a"),))] == 1
    assert samples[("esault_frames_dropped_total", (("process", "worker-1"), ("reason", "a")))] == 5
    assert samples[("esault_frames_dropped_total", (("process", "worker-2"), ("reason", "b")))] == 7

    forwarded.forget("worker-1")  # a worker that left: its series end
    labels = [s.labels for s in exposition(view)["esault_frames_dropped"] if s.name == "esault_frames_dropped_total"]
    assert {"reason": "a", "process": "worker-1"} not in labels
    assert {"reason": "b", "process": "worker-2"} in labels


def test_a_worker_cannot_add_other_families_other_labels_or_unbounded_series():
    forwarded = ForwardedSamples()
    forwarded.update("w", [
        ("esault_tuples_processed", "esault_tuples_processed_total", {"unit": "x"}, 1.0),  # not forwarded
        ("esault_frames_dropped", "esault_frames_dropped_total", {"reason": "a", "key": "secret"}, 1.0),
        dropped("a", 2.0),
    ] + [dropped(f"r{i}", 0.0) for i in range(MAX_ROWS_PER_WORKER + 50)])
    families = forwarded.by_family()
    assert set(families) == {"esault_frames_dropped"}
    assert len(families["esault_frames_dropped"]) == MAX_ROWS_PER_WORKER
    assert all(set(s.labels) == {"reason", "process"} for s in families["esault_frames_dropped"])
    assert families["esault_frames_dropped"][0].value == 2.0
