"""WorkerRegistry: a launcher waiting for an SPU's start gives up the moment its worker is declared dead."""

from __future__ import annotations

import threading

import pytest

from esault.cluster.processes import WorkerRegistry
from esault.errors import WorkerLost
from esault.messages.cluster import SpuStarted, WorkerHeartbeat


def waiting(registry: WorkerRegistry, spu: int, worker: str) -> tuple[threading.Thread, list]:
    outcome: list = []

    def run() -> None:
        try:
            outcome.append(registry.wait_started(spu, 600.0, worker))
        except Exception as exc:  # noqa: BLE001 - the outcome under test
            outcome.append(exc)
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def test_a_start_wait_raises_worker_lost_as_soon_as_the_worker_is_removed():
    registry = WorkerRegistry()
    registry.joined("w1", "tcp://127.0.0.1:1")
    registry.placed("w1", 5)
    registry.expect_start(5)
    thread, outcome = waiting(registry, 5, "w1")
    assert registry.remove("w1") == {5}
    thread.join(30)
    assert not thread.is_alive(), "the wait did not end when its worker was removed (it would sit out 600 s)"
    assert isinstance(outcome[0], WorkerLost) and "w1 died before SPU 5 started" in str(outcome[0])


def test_another_workers_death_does_not_end_the_wait_and_the_answer_still_arrives():
    registry = WorkerRegistry()
    registry.joined("w1", "tcp://127.0.0.1:1")
    registry.joined("w2", "tcp://127.0.0.1:2")
    registry.expect_start(5)
    thread, outcome = waiting(registry, 5, "w1")
    registry.remove("w2")  # wakes the waiter, which must go on waiting: it ends with the answer, not an error
    answer = SpuStarted(5, 4242, "")
    registry.started(answer)
    thread.join(30)
    assert outcome == [answer]


def test_a_start_wait_for_an_already_dead_worker_raises_at_once():
    registry = WorkerRegistry()
    registry.expect_start(7)
    with pytest.raises(WorkerLost, match="w9 died"):
        registry.wait_started(7, 600.0, "w9")


def test_a_stop_request_ends_when_its_worker_is_declared_dead_and_not_when_another_one_is():
    """Issue 26: a rollback stopping the SPUs of a worker that died meanwhile waited 60 s per SPU."""
    registry = WorkerRegistry()
    registry.joined("w1", "tcp://127.0.0.1:1")
    registry.joined("w2", "tcp://127.0.0.1:2")
    on_w1, on_w2 = registry.expect_stop(1, "w1"), registry.expect_stop(2, "w2")
    registry.remove("w2")
    assert on_w2.is_set() and not on_w1.is_set()
    assert registry.expect_stop(3, "w2").is_set(), "a stop for a worker already gone needs no answer"
    registry.stopped(1)
    assert on_w1.is_set()
    assert registry.lost == ["w2"]


def test_a_heartbeat_sets_only_counts_and_gauges_and_drops_what_no_count_can_be():
    """Nothing in a frame is authority: a name that is the SPU's identity or no field at all, or a value that
    is no count, is dropped and counted; the beat's real counts still land."""
    registry = WorkerRegistry()
    registry.joined("w1", "tcp://127.0.0.1:1")
    counts = {"processed": 7, "unit": "other", "spu": 99, "__class__": 1, "nosuch": 3, "emitted": "9", "acked": -1,
              "queue_depth": 2}
    registry.heartbeat(WorkerHeartbeat("w1", [("t", "count", 4, counts)]))
    stats = registry.stats[("t", "count", 4)]
    assert (stats.unit, stats.spu, stats.processed, stats.queue_depth) == ("count", 4, 7, 2)
    assert (stats.emitted, stats.acked) == (0, 0)
    assert registry.bad_counts == 6


def test_a_lost_name_that_joins_again_is_live_with_no_spus_and_no_longer_lost():
    registry = WorkerRegistry()
    registry.joined("w1", "tcp://127.0.0.1:1")
    registry.joined("w2", "tcp://127.0.0.1:2")
    registry.placed("w1", 5)
    registry.placed("w2", 6)
    assert registry.remove("w1") == {5}
    registry.joined("w1", "tcp://127.0.0.1:3")  # a new incarnation under the same name
    assert registry.lost == [] and registry.workers["w1"] == "tcp://127.0.0.1:3"
    assert registry.spus_on["w1"] == set(), "the dead incarnation's SPUs are not the new one's"
    assert registry.pick() == "w1"
    assert registry.remove("w1") == set() and registry.lost == ["w1"], "and it can be lost again"


def beat(registry: WorkerRegistry, worker: str) -> None:
    registry.heartbeat(WorkerHeartbeat(worker, [], []))


def test_fresh_reports_are_asked_for_after_the_count_is_taken_so_the_answers_end_the_wait():
    """Each worker answers a ReportNow with two beats; they count only if the wait took its count first."""
    registry = WorkerRegistry()
    for worker in ("w1", "w2"):
        registry.joined(worker, "tcp://127.0.0.1:1")
        beat(registry, worker)  # beats before the call do not count
    asked: list[str] = []

    def answer(worker: str) -> None:
        asked.append(worker)
        beat(registry, worker)
        beat(registry, worker)
    registry.ask_report = answer
    assert registry.await_fresh_reports(30.0), "the answers to the question did not end the wait"
    assert sorted(asked) == ["w1", "w2"]


def test_fresh_reports_wait_for_a_worker_that_does_not_answer_and_skip_one_told_to_exit():
    registry = WorkerRegistry()
    for worker in ("w1", "w2", "w3"):
        registry.joined(worker, "tcp://127.0.0.1:1")
    registry.leaving.add("w3")  # shutting down: it is not asked, and not waited for
    asked: list[str] = []

    def answer(worker: str) -> None:
        asked.append(worker)
        if worker == "w1":
            beat(registry, worker)
            beat(registry, worker)
    registry.ask_report = answer
    assert not registry.await_fresh_reports(0.3), "w2 sent nothing after the call"
    assert sorted(asked) == ["w1", "w2"]
