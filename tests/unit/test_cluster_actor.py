"""The driver's cluster actor: a worker coming back under its own name, and status requests during a rollback.

A worker restarted after kill -9 (a restart policy) says hello under its old name.
A worker sends one hello in its life, and the postman delivers it only when the sender's Curve key is the
one bound to that name; so a hello under a connected name is a new incarnation: the old one is retired at
once (its SPUs recovered) and the new one admitted. A name declared dead may join again the same way.
"""

from __future__ import annotations

from typing import Any

from esault.cluster.processes import ClusterActor, WorkerRegistry
import threading
from types import SimpleNamespace

from esault.messages.cluster import PeerAddresses, PeerGone, StatusReply, StatusRequest, WorkerHeartbeat, WorkerHello
from esault.testing import wait_until


class FakeEndpoint:
    def __init__(self, postman: "FakePostman") -> None:
        self.postman = postman

    def disconnect(self, process: str) -> None:
        self.postman.connected.pop(process, None)
        self.postman.log.append(("disconnect", process))


class FakeKeys:
    def key_of(self, name: str) -> bytes:
        return f"key-of-{name}".encode()


class FakePostman:
    """Records what the cluster actor does; refuses a second connect like the real endpoint does."""

    address = "tcp://127.0.0.1:1"

    def __init__(self) -> None:
        self.connected: dict[str, str] = {}
        self.log: list[tuple[str, Any]] = []
        self.endpoint = FakeEndpoint(self)
        self.keys = FakeKeys()

    def connect(self, process: str, address: str) -> None:
        if self.connected.get(process, address) != address:
            raise RuntimeError(f"process {process!r} is already connected at {self.connected[process]!r}")
        self.connected[process] = address
        self.log.append(("connect", (process, address)))

    def send(self, process: str, actor: str, message: Any, timeout: float | None = None) -> None:
        self.log.append(("send", (process, actor, message)))

    def send_many(self, processes: Any, actor: str, message: Any, timeout: float | None = None) -> list:
        for process in processes:
            self.send(process, actor, message, timeout)
        return []


class FakeTopology:
    units: list = []


class FakeJob:
    stopped = False
    topology = FakeTopology()

    def __init__(self) -> None:
        self.replaced: list[set[int]] = []

    def replace_lost(self, spus: set[int]) -> list:
        self.replaced.append(set(spus))
        return []


def cluster(heartbeat_timeout: float = 600.0) -> tuple[ClusterActor, Any, FakePostman, WorkerRegistry, FakeJob]:
    postman, registry, job = FakePostman(), WorkerRegistry(), FakeJob()
    ref = ClusterActor.start(postman, registry, lambda: {"job": job}, heartbeat_timeout=heartbeat_timeout)
    return ref.proxy(), ref, postman, registry, job


def test_a_hello_under_a_connected_name_retires_the_old_incarnation_and_admits_the_new_one():
    _, ref, postman, registry, job = cluster()
    try:
        ref.ask(WorkerHello("w1", "tcp://10.0.0.1:4000", 100))
        ref.ask(WorkerHello("w2", "tcp://10.0.0.2:4000", 200))
        registry.placed("w1", 3)
        registry.placed("w1", 4)
        ref.ask(WorkerHello("w1", "tcp://10.0.0.1:5000", 101))  # restarted: a new pid and port
        assert job.replaced == [{3, 4}], "the old incarnation's SPUs are recovered at once"
        assert registry.workers == {"w1": "tcp://10.0.0.1:5000", "w2": "tcp://10.0.0.2:4000"}
        assert registry.spus_on["w1"] == set() and registry.pids["w1"] == 101 and registry.lost == []
        assert postman.connected["w1"] == "tcp://10.0.0.1:5000"
        assert ("send", ("w2", "control", PeerGone("w1"))) in postman.log, "the survivor drops the dead peer"
        last = [m for kind, (p, a, m) in [e for e in postman.log if e[0] == "send"] if p == "w2" and a == "host"][-1]
        assert isinstance(last, PeerAddresses) and last.peers["w1"] == ("tcp://10.0.0.1:5000", "key-of-w1")
        assert registry.pick() == "w1", "the new incarnation, with no SPU, takes the next one"
    finally:
        ref.stop()


def test_a_name_declared_dead_joins_again_and_its_beats_count_again():
    _, ref, postman, registry, job = cluster(heartbeat_timeout=0.2)
    try:
        ref.ask(WorkerHello("w1", "tcp://10.0.0.1:4000", 100))
        registry.placed("w1", 7)
        wait_until(lambda: registry.lost == ["w1"], 30, message="w1 declared dead after its silence")
        assert job.replaced == [{7}] and "w1" not in postman.connected
        ref.ask(WorkerHeartbeat("w1", []))
        assert registry.beats.get("w1", 0) == 0, "a beat from the dead incarnation is fenced"
        ref.ask(WorkerHello("w1", "tcp://10.0.0.1:5000", 101))
        assert registry.workers == {"w1": "tcp://10.0.0.1:5000"} and registry.lost == []
        ref.ask(WorkerHeartbeat("w1", []))
        assert registry.beats["w1"] == 1, "the new incarnation's beats count"
        assert job.replaced == [{7}], "joining again replaces nothing: the old one's SPUs were replaced already"
    finally:
        ref.stop()


class PickingPostman(FakePostman):
    """Notes, at each send, whether the worker it goes to could already be picked for an SPU."""

    def __init__(self, registry: WorkerRegistry) -> None:
        super().__init__()
        self.registry = registry
        self.pickable_when_sent: list[tuple[str, bool]] = []

    def send(self, process: str, actor: str, message: Any, timeout: float | None = None) -> None:
        if isinstance(message, PeerAddresses):
            self.pickable_when_sent.append((process, process in self.registry.workers))
        super().send(process, actor, message, timeout)


def test_a_joining_worker_is_told_its_peers_keys_before_it_can_be_picked_for_an_spu():
    """A rollback may place an SPU on a worker the moment it joins; the worker's host handles the driver's
    messages in order, so PeerAddresses must go before it is pickable, or a peer sending to that SPU meets
    a Curve handshake that refuses it (the restarted-worker hang seen in CI)."""
    registry = WorkerRegistry()
    postman = PickingPostman(registry)
    ref = ClusterActor.start(postman, registry, lambda: {"job": FakeJob()}, heartbeat_timeout=600.0)
    try:
        ref.ask(WorkerHello("w1", "tcp://10.0.0.1:4000", 100))
        ref.ask(WorkerHello("w2", "tcp://10.0.0.2:4000", 200))
        ref.ask(WorkerHello("w1", "tcp://10.0.0.1:5000", 101))  # restarted
        told_first = [pickable for process, pickable in postman.pickable_when_sent if process == "w1"]
        assert told_first == [False, True, False], "each incarnation of w1 learns its peers before it is pickable"
        last_to_w1 = [m for kind, (p, a, m) in [e for e in postman.log if e[0] == "send"]
                      if p == "w1" and isinstance(m, PeerAddresses)][-1]
        assert last_to_w1.peers["w2"] == ("tcp://10.0.0.2:4000", "key-of-w2")
    finally:
        ref.stop()


class BusyJob(FakeJob):
    """A job whose status() blocks, as it does while a rollback keeps its unit actors busy."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def status(self) -> dict:
        self.release.wait(60)
        return {"state": "running"}


class Client:
    def __init__(self) -> None:
        self.address = SimpleNamespace(process="status-1-1")
        self.replies: list = []

    def tell(self, message: object) -> None:
        self.replies.append(message)


def test_a_status_request_during_a_rollback_does_not_hold_up_heartbeats_and_is_answered_after_it():
    """A rollback waits for SPU answers that only the cluster actor handles: a status asked on the actor
    deadlocked with it, and the heartbeats queued behind got every worker declared dead."""
    postman, registry, job = FakePostman(), WorkerRegistry(), BusyJob()
    ref = ClusterActor.start(postman, registry, lambda: {"job": job}, heartbeat_timeout=600.0)
    try:
        ref.ask(WorkerHello("w1", "tcp://10.0.0.1:4000", 100))
        client = Client()
        ref.ask(StatusRequest(1, client, "tcp://10.0.0.9:1"))
        ref.ask(WorkerHeartbeat("w1", []), timeout=10)
        assert registry.beats["w1"] == 1, "the heartbeat was handled while the status waited"
        assert client.replies == []
        job.release.set()
        reply = wait_until(lambda: client.replies and client.replies[0], 30, message="the status reply")
        assert isinstance(reply, StatusReply) and reply.jobs == {"job": {"state": "running"}}
        assert reply.workers == {"w1": "tcp://10.0.0.1:4000"}
    finally:
        job.release.set()
        ref.stop()


def test_a_peers_death_and_its_addresses_travel_on_one_lane_so_a_rejoin_is_never_overtaken():
    """The driver sends a restarted worker's old incarnation PeerGone, then PeerAddresses naming the new one.
    Lanes are FIFO each, the control lane goes first: on different lanes the addresses overtook the death,
    and the survivor dropped its new connection (the compose cluster's rejoin hung)."""
    from esault.cluster.lanes import CONTROL_LANE

    assert PeerGone in CONTROL_LANE and PeerAddresses in CONTROL_LANE


def test_a_local_worker_process_that_ends_is_declared_dead_at_once_unless_told_to_exit_or_an_older_incarnation():
    from esault.cluster.exit_watch import WorkerProcessExited

    _, ref, postman, registry, job = cluster()  # heartbeat_timeout 600 s: only the exit can declare a death
    try:
        for name, pid in (("w1", 100), ("w2", 200), ("w3", 300)):
            ref.ask(WorkerHello(name, f"tcp://10.0.0.1:{pid}", pid))
        registry.placed("w1", 3)
        registry.placed("w2", 4)
        ref.ask(WorkerProcessExited("w1", 99, -9))  # an earlier incarnation of w1: the joined one lives
        ref.ask(WorkerProcessExited("w2", 200, 0))
        registry.leaving.add("w3")  # told to exit: its end is expected
        ref.ask(WorkerProcessExited("w3", 300, 0))
        assert registry.lost == ["w2"] and job.replaced == [{4}], (registry.lost, job.replaced)
        assert "w2" not in postman.connected and sorted(registry.workers) == ["w1", "w3"]
        ref.ask(WorkerProcessExited("w1", 100, -9))
        assert registry.lost == ["w2", "w1"] and job.replaced == [{4}, {3}]
    finally:
        ref.stop()


def test_a_local_worker_that_ends_before_its_hello_is_handled_is_declared_dead_as_it_joins():
    from esault.cluster.exit_watch import WorkerProcessExited

    _, ref, postman, registry, job = cluster()
    try:
        ref.ask(WorkerProcessExited("w1", 100, 1))  # its end overtook its hello
        ref.ask(WorkerHello("w1", "tcp://10.0.0.1:4000", 100))
        assert registry.lost == ["w1"] and "w1" not in registry.workers
        ref.ask(WorkerHello("w1", "tcp://10.0.0.1:5000", 101))  # a new incarnation joins and stays
        assert registry.workers == {"w1": "tcp://10.0.0.1:5000"}
    finally:
        ref.stop()
