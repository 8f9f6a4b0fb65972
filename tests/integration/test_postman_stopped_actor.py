"""A message for an actor that stopped after it registered (a spout SPU a rollback replaced, say) is counted
and dropped: it neither raises on the I/O thread nor warns on every rollback."""

from __future__ import annotations

import logging
import threading

import pykka
import pytest
from prometheus_client import REGISTRY

from esault.cluster.postman import Postman
from esault.messages.acking import RangeGrant


class Inbox(pykka.ThreadingActor):
    def __init__(self, got: list, arrived: threading.Event) -> None:
        super().__init__()
        self.got, self.arrived = got, arrived

    def on_receive(self, message):
        self.got.append(message)
        self.arrived.set()


def dropped() -> float:
    return REGISTRY.get_sample_value("esault_frames_dropped_total", {"reason": "actor_stopped"}) or 0.0


@pytest.fixture
def postman():
    postman = Postman("w-stopped")
    try:
        yield postman
    finally:
        postman.close()
        pykka.ActorRegistry.stop_all()


def test_a_message_for_a_stopped_actor_is_counted_once_at_info_and_the_live_ones_still_get_theirs(postman, caplog):
    got: list = []
    arrived = threading.Event()
    live = postman.start_and_register("live", lambda: Inbox.start(got, arrived))
    gone = postman.start_and_register("gone", lambda: Inbox.start([], threading.Event()))
    gone.stop()
    before = dropped()
    grant = RangeGrant(1, 0, 10)
    with caplog.at_level(logging.DEBUG, logger="esault"):
        for _ in range(3):
            postman.mailbox_for(postman.address_of(gone)).tell(grant)  # _deliver, as for a frame from a peer
        postman.mailbox_for(postman.address_of(live)).tell(grant)
    assert arrived.wait(10), "the live actor's message was not delivered"
    assert got == [grant]
    assert postman.refused.get("actor_stopped") == 3
    assert dropped() - before == 3
    records = [r for r in caplog.records if "not delivered, the actor had stopped" in r.getMessage()]
    assert [r.levelno for r in records] == [logging.INFO, logging.DEBUG, logging.DEBUG]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
