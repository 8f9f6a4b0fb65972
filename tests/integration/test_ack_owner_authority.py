"""Where a spout SPU is, a worker learns from the driver only: OwnerAt is a driver command, and a FindOwner
must name the asking worker's own process (the answer goes there). A real worker host and postman."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from esault.cluster.authority import refusal
from esault.datapath.ack_router import AckRouter
from esault.messages.acking import FindOwner, OwnerAt, OwnerGone
from esault.testing import wait_until
from esault.transport.address import Address
from esault.transport.keys import KeyPair
from esault.transport.trust import Identity, Role
from worker_host import worker_host


def identity(role: Role, name: str) -> Identity:
    return Identity(KeyPair.generate().public.decode(), role, name)


def test_a_find_owner_naming_another_process_is_refused_and_one_naming_the_sender_passes():
    w1 = identity(Role.WORKER, "w1")
    assert refusal(w1, "acker@wc", FindOwner(3, "w1")) is None
    why = refusal(w1, "acker@wc", FindOwner(3, "w2"))
    assert why is not None and "names process 'w2'" in why and "'w1'" in why


def test_an_owner_gone_may_name_only_a_spout_mailbox_in_the_senders_own_process():
    w1 = identity(Role.WORKER, "w1")
    assert refusal(w1, "acker@wc", OwnerGone(3, Address("w1", "spu-3"))) is None
    why = refusal(w1, "acker@wc", OwnerGone(3, Address("w2", "spu-3")))
    assert why is not None and "process 'w2'" in why and "'w1'" in why
    assert refusal(w1, "acker@wc", OwnerGone(3, None)) is not None


def test_owner_at_is_a_driver_command():
    assert refusal(identity(Role.DRIVER, "driver"), "host", OwnerAt("wc", 3, None)) is None
    why = refusal(identity(Role.WORKER, "w2"), "host", OwnerAt("wc", 3, None))
    assert why is not None and "only the driver may send OwnerAt" in why


@pytest.fixture
def host():
    with worker_host() as running:
        yield running


def test_the_host_hands_the_drivers_answer_to_the_jobs_ack_router_and_refuses_a_workers(host):
    postman, ref, driver = host
    job = SimpleNamespace(acker=None, process="w1")
    job.acks = AckRouter(job)
    ref.proxy().jobs.get()["wc"] = job
    spout = Address("w2", "spu-3")
    other = KeyPair.generate()
    postman.admit_peer("w2", "tcp://127.0.0.1:1", other.public)
    postman._deliver("host", OwnerAt("wc", 3, Address("w2", "spu-9")), Identity(other.public.decode(), Role.WORKER,
                                                                               "w2"), 16)
    assert postman.refused.get("not_permitted") == 1
    postman._deliver("host", OwnerAt("wc", 3, spout), driver, 16)  # as the endpoint hands it over
    wait_until(lambda: job.acks.owners.get(3) == spout, 10, message="the owner learned")
    postman._deliver("host", OwnerAt("other-job", 4, spout), driver, 16)  # a job not here: nothing to tell
    ref.proxy().jobs.get()  # a barrier: the host handled it
    assert 4 not in job.acks.owners
