"""OutputRouter.flush to an SPU whose process died: its batches are dropped (acking replays them) but counted as
emitted, the first loud, the rest quiet: a dead downstream must not print a warning every flush until it is
replaced, nor its loss go uncounted."""

from __future__ import annotations

import logging
from typing import Any

from esault.messages.handoff import RouteSpec
from esault.routing.output_router import OutputRouter


class Gone:
    def tell(self, message: Any) -> None:
        raise LookupError("no connection to process 'w1'")


class Mailbox:
    def __init__(self) -> None:
        self.got: list[Any] = []

    def tell(self, message: Any) -> None:
        self.got.append(message)


def test_each_unreachable_spu_warns_once_and_counts_every_tuple_it_lost(caplog):
    alive = Mailbox()
    router = OutputRouter(1, "src", [RouteSpec("relay", "shuffle", None, {5: Gone(), 6: alive}, 1)])
    caplog.set_level(logging.DEBUG, logger="esault.routing")
    for _ in range(3):
        for k in range(10):  # shuffle: the round robin takes the pending pairs over both SPUs at the flush
            router.routes[0].buffer_for(k).extend((k, k))
        emitted, _ = router.flush()
        # The lost ones count as emitted: the job's totals then show them as never processed, which is how
        # guarantee "none" reports a loss (else a job that lost them would end as a full success).
        assert emitted == 10
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "SPU 5 unreachable" in warnings[0].getMessage()
    assert router.dropped_to == {5: 15}
    assert sum(len(batch.keys) for batch in alive.got) == 15  # the reachable one lost nothing
