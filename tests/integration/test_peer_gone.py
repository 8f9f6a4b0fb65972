"""A peer declared dead must not block anyone: PeerGone, handed to a worker's control mailbox by its postman."""

from __future__ import annotations

import queue
import threading

import pytest

from esault.cluster.postman import Postman
from esault.messages.cluster import PeerGone, ReportNow
from esault.messages.handoff import EpochMarker
from esault.testing import wait_until
from esault.transport.address import Address
from esault.transport.keys import KeyPair
from esault.transport.trust import Identity, Role
from worker_host import worker_host


@pytest.fixture
def host():
    with worker_host(control=True) as (postman, _, driver):
        yield postman, driver


def fill_until_blocked(postman: Postman, to: Address) -> queue.Queue:
    """Queue frames for a peer nobody serves until send blocks; a thread then waits in send."""
    with pytest.raises(TimeoutError):  # zmq's queue, then the endpoint's, fill up: send would block
        for i in range(100_000):
            postman.endpoint.send(to, EpochMarker(i, 1), timeout=0.2)
    outcome: queue.Queue = queue.Queue()

    def blocked() -> None:
        try:
            postman.endpoint.send(to, EpochMarker(-1, 1))
            outcome.put("sent")
        except Exception as exc:  # noqa: BLE001 - what releases it is the point
            outcome.put(exc)

    threading.Thread(target=blocked, daemon=True).start()
    return outcome


def test_peer_gone_from_the_driver_releases_a_sender_blocked_on_the_dead_peer_and_revokes_it(host):
    postman, driver = host
    dead = KeyPair.generate()
    postman.admit_peer("w9", "tcp://127.0.0.1:1", dead.public)  # nothing listens: frames pile up
    outcome = fill_until_blocked(postman, Address("w9", "spu-3"))
    assert outcome.empty()
    postman._deliver("control", PeerGone("w9"), driver, 16)  # as the endpoint hands it over
    assert isinstance(outcome.get(timeout=10), ConnectionError)
    wait_until(lambda: postman.keys.identity(dead.public.decode()) is None, 10, message="its key revoked")
    with pytest.raises(LookupError):
        postman.endpoint.send(Address("w9", "spu-3"), EpochMarker(0, 1))


def test_peer_gone_from_a_worker_is_refused(host):
    postman, _ = host
    other = KeyPair.generate()
    postman.admit_peer("w2", "tcp://127.0.0.1:1", other.public)
    victim = KeyPair.generate()
    postman.admit_peer("w9", "tcp://127.0.0.1:1", victim.public)
    postman._deliver("control", PeerGone("w9"), Identity(other.public.decode(), Role.WORKER, "w2"), 16)
    assert postman.refused.get("not_permitted") == 1
    postman.endpoint.send(Address("w9", "spu-3"), EpochMarker(0, 1), timeout=5.0)  # still connected
    assert postman.keys.identity(victim.public.decode()) is not None


def test_report_now_from_the_driver_is_answered_at_once_with_two_heartbeats_and_refused_from_a_worker(
        host, monkeypatch):
    postman, driver = host
    sent: list = []
    monkeypatch.setattr(postman, "send", lambda to, actor, message, timeout=None: sent.append((to, actor, message)))
    postman._deliver("control", ReportNow(), driver, 16)  # as the endpoint hands it over
    assert [(to, actor, type(m).__name__) for to, actor, m in sent] == [("driver", "cluster", "WorkerHeartbeat")] * 2
    assert all(m.process == "w1" and m.samples == [] for _, _, m in sent), "the samples are the periodic beat's"
    other = KeyPair.generate()
    postman.admit_peer("w2", "tcp://127.0.0.1:1", other.public)
    postman._deliver("control", ReportNow(), Identity(other.public.decode(), Role.WORKER, "w2"), 16)
    assert postman.refused.get("not_permitted") == 1 and len(sent) == 2
