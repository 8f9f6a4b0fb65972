"""BarrierAligner: a bolt SPU's checkpoint participation, the one part bolt and chain-join SPUs both use.

It owns the epoch's `Alignment` (esault.checkpoint.alignment): the coordinator's
CheckpointStart says which upstream SPUs send barrier e, a channel whose barrier
came is held until every expected one came, and a CheckpointStart of a later
epoch waits for the current one. What an SPU kind does once aligned is its
`EpochSeal`: a bolt SPU is ready at once, a chain SPU once its links are quiet;
then it seals (snapshot, barrier on) and the held messages run, in arrival order.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Protocol

from esault.checkpoint.alignment import Alignment
from esault.messages.checkpoints import Barrier, CheckpointStart

log = logging.getLogger("esault.spu")


class EpochSeal(Protocol):
    """What differs per SPU kind when an epoch aligned."""

    def ready_to_seal(self, epoch: int) -> bool:
        """Every barrier of `epoch` is in: may the SPU seal it now? (False: it calls check() again later.)"""

    def seal_epoch(self, epoch: int, final: bool, input_ended: bool = False) -> None:
        """Snapshot `epoch` and pass its barrier on; `final`: the job stops at it (no input follows);
        `input_ended`: the final epoch, and every upstream's input had ended (the PEs finish first)."""


class BarrierAligner:
    """One per bolt SPU; only its actor thread touches it. O(1) per barrier and per held message.

    `align` is read on the hot path (once per batch): a batch from a held channel waits in it.
    """

    __slots__ = ("align", "final_epoch", "_expect", "_seal", "_run", "_who", "_over")

    def __init__(self, seal: EpochSeal, run: Callable[[Any], None], who: str,
                 over: Callable[[], None] = lambda: None) -> None:
        self.align: Alignment | None = None
        self.final_epoch: int | None = None  # the final checkpoint's epoch (a stop): the input ends at its barrier
        self._expect: dict[int, frozenset[int]] = {}  # CheckpointStart that came before its epoch's alignment
        self._seal = seal
        self._run = run  # runs a held message as if it arrived now
        self._who = who  # "topology 'x': bolt 'y' SPU 3", for the log
        self._over = over  # no alignment is open any more (the mailbox answers ForwardMarkers again)

    def _alignment(self, epoch: int) -> Alignment:
        align = self.align
        if align is None:
            align = self.align = Alignment(epoch, self._expect.pop(epoch, None))
        return align

    def on_checkpoint_start(self, msg: CheckpointStart) -> None:
        if msg.final:
            self.final_epoch = msg.epoch
        align = self.align
        if align is not None and align.epoch != msg.epoch:
            self._expect[msg.epoch] = msg.upstream  # a later epoch: after the current one aligns
            return
        self._alignment(msg.epoch).expect(msg.upstream)
        self.check()

    def on_barrier(self, msg: Barrier) -> None:
        align = self.align
        if align is not None and align.epoch != msg.epoch:
            if align.holds(msg.sender):  # the sender's next epoch: it waits with its data
                align.hold(msg)
            else:
                log.warning("%s dropped a stale barrier %d from SPU %d (aligning %d)",
                            self._who, msg.epoch, msg.sender, align.epoch)
            return
        self._alignment(msg.epoch).barrier(msg.sender, msg.end_of_input)
        self.check()

    def check(self) -> None:
        """Seal the epoch if it aligned and the SPU is ready; then the held channels' messages run."""
        align = self.align
        if align is None or not align.complete or not self._seal.ready_to_seal(align.epoch):
            return
        self.align = None
        final = align.epoch == self.final_epoch
        self._seal.seal_epoch(align.epoch, final, final and align.input_ended)
        for held in align.release():  # in arrival order
            self._run(held)
        if self.align is None:
            self._over()
