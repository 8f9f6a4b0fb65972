"""BoltWaits: a bolt instance's waiting_for() becomes one gauge series, and Job.status()'s reader finds it."""

from esault.datapath.bolt_waits import WAITING_CHECK_INTERVAL, BoltWaits
from esault.dsl.bolt import Bolt
from esault.metrics.forwarded import ForwardedSamples, units_waiting
from esault.metrics.registry import BOLT_WAITING


class Sink(Bolt):
    def __init__(self) -> None:
        self.what: object = None

    def waiting_for(self):
        if isinstance(self.what, Exception):
            raise self.what
        return self.what


def _series(topology: str) -> list[tuple[str, str, str]]:
    return [(s.labels["unit"], s.labels["spu"], s.labels["waiting_for"]) for f in BOLT_WAITING.collect()
            for s in f.samples if s.labels["topology"] == topology]


def test_a_wait_is_one_series_until_the_instance_says_none():
    sink, errors = Sink(), []
    waits = BoltWaits("t-waits", 3, [("out", sink)], lambda *a, **k: errors.append(a))
    waits.read()
    assert _series("t-waits") == []
    sink.what = "broker b:9092 (publishing epoch 5)"
    waits.read()
    waits.read()
    assert _series("t-waits") == [("out", "3", "broker b:9092 (publishing epoch 5)")]
    assert [(u, s, w) for u, s, w, _ in units_waiting("t-waits", ForwardedSamples())] == \
        [("out", 3, "broker b:9092 (publishing epoch 5)")]
    sink.what = None
    waits.read()
    assert _series("t-waits") == [] and errors == []


def test_a_bolt_that_cannot_wait_is_not_read_and_keeps_no_deadline():
    waits = BoltWaits("t-plain", 1, [("count", Bolt())], lambda *a, **k: None)
    assert not waits.may_wait and waits.next_due(10.0) is None
    assert BoltWaits("t-plain", 1, [("out", Sink())], lambda *a, **k: None).next_due(10.0) == \
        10.0 + WAITING_CHECK_INTERVAL


def test_a_waiting_for_that_raises_is_reported_and_read_as_no_wait():
    sink, errors = Sink(), []
    waits = BoltWaits("t-raise", 2, [("out", sink)], lambda *a, **k: errors.append(a))
    sink.what = "broker b:9092 (publishing epoch 1)"
    waits.read()
    sink.what = RuntimeError("boom")
    waits.read()
    assert _series("t-raise") == [] and len(errors) == 1


def test_the_stop_clears_every_series_and_a_workers_forwarded_wait_is_found():
    sink = Sink()
    sink.what = "broker b:9092 (publishing epoch 2)"
    waits = BoltWaits("t-stop", 4, [("out", sink)], lambda *a, **k: None)
    waits.read()
    waits.clear()
    assert _series("t-stop") == []
    forwarded = ForwardedSamples()
    forwarded.update("worker-1", [("esault_bolt_waiting_since_seconds", "esault_bolt_waiting_since_seconds",
                                   {"topology": "t-stop", "unit": "out", "spu": "4", "waiting_for": "broker x"},
                                   1.0e9)])
    assert units_waiting("t-stop", forwarded) == [("out", 4, "broker x", 1.0e9)]
