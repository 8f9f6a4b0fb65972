"""Enrollment: what the shared replica key may do, and what the driver hands out for it."""

from __future__ import annotations

import pytest

from esault.cluster.authority import refusal
from esault.cluster.enrollment import Enrollments
from esault.errors import ConfigError
from esault.messages.cluster import Enrolled, EnrollRequest, StatusRequest, WorkerHeartbeat, WorkerHello
from esault.transport.address import Address
from esault.transport.keys import KeyPair
from esault.transport.trust import Identity, KeyRing, Role

ENROLLEE = Identity("E" * 40, Role.ENROLL, "enroll-1-1-ab")


def request(n: int = 1) -> EnrollRequest:
    return EnrollRequest(n, Address(f"enroll-1-{n}-ab", "status"), f"tcp://127.0.0.1:{6000 + n}")


def test_an_enrollment_key_may_only_ask_the_cluster_actor_to_enroll():
    assert refusal(ENROLLEE, "cluster", request()) is None
    for actor, message in [("cluster", WorkerHello("w9", "tcp://127.0.0.1:1", 1)),
                           ("cluster", StatusRequest(1, Address("s", "status"), "tcp://127.0.0.1:2")),
                           ("host", request())]:
        assert refusal(ENROLLEE, actor, message) == "an enrollment key may only send EnrollRequest to the driver"


def test_only_the_driver_may_send_an_enrollment_answer():
    worker = Identity("W" * 40, Role.WORKER, "w1")
    assert refusal(worker, "status", Enrolled(1, "replica-1", "p", "s", "")) == "only the driver may send Enrolled"


def test_each_grant_is_a_fresh_name_and_key_pair_admitted_as_a_worker_that_its_hello_binds():
    ring = KeyRing(KeyPair.generate(), "driver", Role.DRIVER)
    enrollments = Enrollments(ring, limit=5)
    first, second = enrollments.grant(request(1)), enrollments.grant(request(2))
    assert (first.name, second.name) == ("replica-1", "replica-2") and first.public != second.public
    assert ring.identity(first.public).role is Role.WORKER
    assert ring.bind(first.name, first.public) is None
    assert ring.bind(first.name, second.public) == "the name 'replica-1' belongs to another key"
    hello = WorkerHeartbeat("replica-2", [])
    assert refusal(Identity(second.public, Role.WORKER, "replica-1"), "cluster", hello).startswith(
        "WorkerHeartbeat names process 'replica-2'")


def test_a_name_already_bound_is_skipped():
    ring = KeyRing(KeyPair.generate(), "driver", Role.DRIVER)
    other = KeyPair.generate()
    ring.admit(other.public, Role.WORKER, "replica-1")
    assert Enrollments(ring).grant(request()).name == "replica-2"


def test_past_the_limit_requests_are_answered_with_the_reason_and_no_key():
    enrollments = Enrollments(KeyRing(KeyPair.generate(), "driver", Role.DRIVER), limit=1)
    enrollments.grant(request(1))
    refused = enrollments.grant(request(2))
    assert refused.public == refused.secret == "" and "handed out its 1 enrollments" in refused.error


def test_the_shared_key_names_each_request_afresh():
    ring = KeyRing(KeyPair.generate(), "driver", Role.DRIVER)
    shared = KeyPair.generate()
    ring.admit(shared.public, Role.ENROLL)
    assert ring.bind("enroll-1-1-aa", shared.public) is None
    assert ring.bind("enroll-7-1-bb", shared.public) is None  # another replica, the same key
    assert ring.key_of("enroll-7-1-bb") == shared.public


@pytest.mark.parametrize("limit", [-1, 1.5, "8"])
def test_a_bad_limit_is_refused(limit):
    with pytest.raises(ConfigError, match="max_enrollments must be a whole number >= 0"):
        Enrollments(KeyRing(KeyPair.generate(), "driver", Role.DRIVER), limit)
