"""A worker acks only its own SPUs' checkpoints: the driver's postman refuses an ack for another worker's SPU.

One worker's ack for an SPU placed on another could complete a checkpoint without that SPU's state (issue 51
batched acks by worker; the driver now checks each batch against where it placed the SPUs)."""

from __future__ import annotations

import pytest

from esault.cluster.authority import ack_refusal
from esault.cluster.postman import Postman
from esault.cluster.processes import WorkerRegistry
from esault.messages.checkpoints import CheckpointAck, CheckpointAcks
from esault.transport.trust import Identity, Role


def ack(spu: int) -> CheckpointAck:
    return CheckpointAck(4, spu, "count", 0)


class Box:
    actor_urn = "box"

    def __init__(self) -> None:
        self.got: list = []

    def tell(self, message) -> None:
        self.got.append(message)


@pytest.fixture
def driver():
    registry = WorkerRegistry()
    registry.spus_on = {"w1": {3}, "w2": {5, 6}}
    postman = Postman("driver", bind="tcp://127.0.0.1:0")
    postman.ack_host = registry.host_of
    box = Box()
    postman.register("t/checkpoints", box)
    try:
        yield postman, box
    finally:
        postman.close()


def test_a_workers_acks_of_its_own_spus_are_delivered(driver):
    postman, box = driver
    w2 = Identity("k2", Role.WORKER, "w2")
    postman._deliver("t/checkpoints", CheckpointAcks((ack(5), ack(6))), w2, 16)
    postman._deliver("t/checkpoints", ack(6), w2, 16)
    assert box.got == [CheckpointAcks((ack(5), ack(6))), ack(6)]


@pytest.mark.parametrize("message", [CheckpointAcks((ack(5), ack(3))), ack(3)], ids=["batch", "single"])
def test_an_ack_for_another_workers_spu_is_refused_whole_and_counted(driver, message):
    postman, box = driver
    before = postman.refused.get("not_permitted", 0)
    postman._deliver("t/checkpoints", message, Identity("k2", Role.WORKER, "w2"), 16)
    assert box.got == []
    assert postman.refused.get("not_permitted", 0) == before + 1


def test_the_driver_and_an_spu_gone_since_its_ack_left_are_let_through(driver):
    postman, box = driver
    postman._deliver("t/checkpoints", ack(3), Identity("kd", Role.DRIVER, "driver"), 16)  # the driver may
    postman._deliver("t/checkpoints", ack(99), Identity("k2", Role.WORKER, "w2"), 16)  # placed nowhere now
    assert box.got == [ack(3), ack(99)]


def test_the_rule_names_the_spu_and_both_workers():
    hosts = {3: "w1"}
    why = ack_refusal("w2", ack(3), lambda spu, sender: hosts.get(spu))
    assert why == "it acks SPU 3, which runs on worker 'w1', not on 'w2'"
    assert ack_refusal("w1", CheckpointAcks((ack(3),)), lambda spu, sender: hosts.get(spu)) is None
