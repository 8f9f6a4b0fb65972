"""The ack server (a real actor): one unreachable spout never keeps the others' tree outcomes from them."""

from __future__ import annotations

import queue
from types import SimpleNamespace

from esault.clock import SystemClock
from esault.datapath.acker import AckServerActor
from esault.messages.acking import AckInit, FailPending, GetPending, RegisterOwner, TreesDone


class DeadWorkerMailbox:
    """What a RemoteMailbox of a dead worker does: the endpoint has no connection to it any more."""

    def tell(self, message) -> None:
        raise LookupError("Endpoint('driver') has no connection to process 'w1'")


class QueueMailbox:
    def __init__(self) -> None:
        self.got: queue.Queue = queue.Queue()

    def tell(self, message) -> None:
        self.got.put(message)


def test_fail_pending_reaches_live_spouts_when_one_spouts_worker_is_gone():
    job = SimpleNamespace(clock=SystemClock(), config=SimpleNamespace(message_timeout=300.0))
    acker = AckServerActor.start(job)
    try:
        live = QueueMailbox()
        for owner, mailbox in ((1, DeadWorkerMailbox()), (2, live), (3, DeadWorkerMailbox())):
            acker.tell(RegisterOwner(owner, mailbox))
            acker.tell(AckInit(owner, [(owner * 100, 7)]))
        assert acker.ask(GetPending()) == 3
        acker.tell(FailPending("worker w1 died"))
        done = live.got.get(timeout=30)
        assert isinstance(done, TreesDone) and [(root, ok) for root, ok, *_ in done.outcomes] == [(200, False)]
        assert acker.ask(GetPending()) == 0
    finally:
        acker.stop()
