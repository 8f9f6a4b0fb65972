"""The capacity keeper, deterministically: a scripted provider and clock, SPU counts the test sets."""

from __future__ import annotations

import pytest

from esault.cluster.capacity import Capacity
from esault.cluster.placement import Placement
from esault.cluster.providers.base import WorkerOrigin, WorkerProvider, WorkerRequest
from esault.errors import ConfigError, ResourceError, ScalingError


class ScriptedProvider(WorkerProvider):
    """Starts nothing: records what it was asked; the test makes the workers join."""

    kind = "scripted"

    def __init__(self, ceiling: int = 10, floor: int = 1, fails: bool = False) -> None:
        self.ceiling, self.floor, self.fails = ceiling, floor, fails
        self.requested: list[WorkerRequest] = []
        self.released: list[str] = []
        self.started: dict[str, float] = {}

    def cannot_grow(self, live: int) -> str | None:
        return None if live < self.ceiling else f"at its ceiling of {self.ceiling}"

    def request(self, request: WorkerRequest) -> None:
        if self.fails:
            raise ResourceError("no capacity left in the test")
        self.requested.append(request)
        self.started[request.name] = float(len(self.started) + 1)

    def release(self, worker: str) -> None:
        self.released.append(worker)

    def origin(self, worker: str) -> WorkerOrigin | None:
        return WorkerOrigin(self.kind, "node", self.started.get(worker, 0.0))


class Cluster:
    """SPU counts per worker, a clock, and the keeper over them."""

    def __init__(self, provider: ScriptedProvider, counts: dict[str, int], budget: int | None = 1, **kw) -> None:
        self.now = 0.0
        self.counts = dict(counts)
        self.retired: list[str] = []
        self.provider = provider
        self.keeper = Capacity(provider, lambda: dict(self.counts), self._retire, Placement(budget),
                               clock=lambda: self.now, **kw)

    def _retire(self, worker: str) -> None:
        self.retired.append(worker)
        del self.counts[worker]

    def join(self, worker: str, spus: int = 0) -> None:
        self.counts[worker] = spus
        self.keeper.joined(worker)


def test_room_on_the_workers_there_are_is_granted_at_once_and_nothing_is_asked_for():
    cluster = Cluster(ScriptedProvider(), {"w1": 0, "w2": 1})
    assert cluster.keeper.reserve(1, "split").result(0) is None
    assert cluster.provider.requested == []


def test_a_reservation_short_of_room_asks_for_the_workers_it_needs_and_is_granted_once_they_join():
    cluster = Cluster(ScriptedProvider(), {"w1": 1})
    room = cluster.keeper.reserve(2, "rescale")
    assert [r.reason for r in cluster.provider.requested] == ["rescale", "rescale"]
    assert set(cluster.keeper.pending) == {r.name for r in cluster.provider.requested}
    first, second = (r.name for r in cluster.provider.requested)
    cluster.join(first)
    assert not room.done()
    cluster.join(second)
    assert room.result(0) is None and cluster.keeper.pending == {}


def test_a_second_reservation_counts_the_workers_already_on_their_way():
    cluster = Cluster(ScriptedProvider(), {"w1": 1}, budget=2)
    cluster.keeper.reserve(1, "split a")
    assert len(cluster.provider.requested) == 0  # w1 has one slot left
    cluster.counts["w1"] = 2
    cluster.keeper.reserve(1, "split b")
    cluster.keeper.reserve(1, "split c")  # the worker split b asked for holds two
    assert len(cluster.provider.requested) == 1


def test_a_provider_at_its_ceiling_declines_at_once_with_its_reason_and_the_layout():
    cluster = Cluster(ScriptedProvider(ceiling=1), {"w1": 1})
    with pytest.raises(ScalingError, match=r"declined: split of u: 1 more worker.*w1: 1; 1 SPUs a worker.*"
                                           r"at its ceiling of 1; the job goes on at its layout"):
        cluster.keeper.reserve(1, "split of u").result(0)
    assert cluster.keeper.view()["declined"].startswith("declined: split of u")


def test_a_provider_that_cannot_start_a_worker_declines_with_its_error():
    cluster = Cluster(ScriptedProvider(fails=True), {"w1": 1})
    with pytest.raises(ScalingError, match="could not start a worker: no capacity left in the test"):
        cluster.keeper.reserve(1, "split").result(0)


def test_no_join_within_worker_wait_declines_naming_the_pending_worker_and_a_late_join_is_not_lost():
    cluster = Cluster(ScriptedProvider(), {"w1": 1}, worker_wait=10.0)
    room = cluster.keeper.reserve(1, "split")
    (asked,) = cluster.provider.requested
    cluster.now = 9.9
    cluster.keeper.tick()
    assert not room.done()
    cluster.now = 10.0
    cluster.keeper.tick()
    with pytest.raises(ScalingError, match=rf"no room for 1 new SPU\(s\) within worker_wait=10s .*not joined: {asked.name}"):
        room.result(0)
    cluster.join(asked.name)  # it came after all: an ordinary idle worker now
    assert asked.name not in cluster.keeper.pending and cluster.counts[asked.name] == 0


def test_a_worker_that_never_joins_is_given_up_after_the_join_timeout():
    cluster = Cluster(ScriptedProvider(), {"w1": 1}, worker_wait=5.0, join_timeout=20.0)
    cluster.keeper.reserve(1, "split")
    (asked,) = cluster.provider.requested
    cluster.now = 20.1
    cluster.keeper.tick()
    assert cluster.keeper.pending == {} and cluster.provider.released == [asked.name]


def test_idle_workers_above_the_floor_are_given_back_after_release_after_newest_first():
    cluster = Cluster(ScriptedProvider(floor=1), {"w1": 1, "w2": 1}, release_after=30.0)
    cluster.keeper.reserve(2, "rescale")
    a, b = (r.name for r in cluster.provider.requested)
    cluster.join(a, 1)
    cluster.join(b, 1)
    cluster.counts["w1"] = 0
    cluster.keeper.tick()  # w1 idle from now
    cluster.counts[a] = cluster.counts[b] = 0
    cluster.now = 10.0
    cluster.keeper.tick()  # a and b idle from 10
    cluster.now = 39.9
    cluster.keeper.tick()
    assert cluster.retired == ["w1"]  # idle 39.9 s; a and b only 29.9 s
    cluster.now = 40.0
    cluster.keeper.tick()
    assert cluster.retired == ["w1", b, a]  # the floor of 1 keeps w2, the busy one
    assert cluster.provider.released == ["w1", b, a]


def test_a_worker_busy_again_before_release_after_is_kept():
    cluster = Cluster(ScriptedProvider(floor=0), {"w1": 0}, release_after=5.0)
    cluster.keeper.tick()
    cluster.now = 4.0
    cluster.counts["w1"] = 1
    cluster.keeper.tick()
    cluster.counts["w1"] = 0
    cluster.now = 8.0
    cluster.keeper.tick()
    assert cluster.retired == []  # idle again only since 8.0
    cluster.now = 13.0
    cluster.keeper.tick()
    assert cluster.retired == ["w1"]


def test_nothing_is_given_back_while_a_reservation_waits_for_room():
    cluster = Cluster(ScriptedProvider(floor=0), {"w1": 0, "w2": 1}, release_after=1.0, budget=1)
    cluster.counts["w1"] = 1
    cluster.keeper.reserve(1, "split")
    cluster.counts["w1"] = 0
    cluster.now = 5.0
    cluster.keeper.tick()  # the reservation is granted by w1's free slot before anything is released
    assert cluster.retired == []


@pytest.mark.parametrize("name, value", [("worker_wait", -1), ("release_after", "soon"), ("join_timeout", True)])
def test_bad_timings_are_refused_naming_the_setting(name, value):
    with pytest.raises(ConfigError, match=f"{name} must be seconds >= 0"):
        Capacity(ScriptedProvider(), dict, lambda w: None, **{name: value})


def test_shutdown_fails_the_waiting_reservations():
    cluster = Cluster(ScriptedProvider(), {"w1": 1})
    room = cluster.keeper.reserve(1, "split")
    cluster.keeper.shutdown()
    with pytest.raises(ScalingError, match="shuts down"):
        room.result(0)


def test_a_worker_that_ends_before_it_joins_is_asked_for_again_then_the_reservation_is_declined():
    cluster = Cluster(ScriptedProvider(), {"w1": 1})
    room = cluster.keeper.reserve(1, "split")
    for attempt in range(3):
        cluster.keeper.lost(cluster.provider.requested[-1].name)  # a Ray node that died under the actor
        assert len(cluster.provider.requested) == attempt + 2 and not room.done()
        assert "again:" in cluster.provider.requested[-1].reason
    cluster.keeper.lost(cluster.provider.requested[-1].name)
    with pytest.raises(ScalingError, match=r"split: the worker\(s\) asked for ended before they joined, 4 times"):
        room.result(0)
    assert len(cluster.provider.requested) == 4


def test_the_death_of_a_joined_worker_asks_for_nothing():
    cluster = Cluster(ScriptedProvider(), {"w1": 1, "w2": 0})
    cluster.keeper.lost("w2")
    assert cluster.provider.requested == []
