"""Processing: the one part that differs between a keyed bolt SPU and a join-chain SPU.

A bolt SPU (`esault.datapath.bolt_spu.BoltSpuActor`) is one actor class made of
parts; every part but this one is the same for every bolt. The processing part
turns a DataBatch into output and state, and owns what that state needs at a
tick, a checkpoint and a key hand-off:

- `KeyedProcessing` (`keyed.py`): PEs per key (or one instance), the receiver's
  side of a hand-off (held tuples, state chunks, MarkerSeen), PE snapshots and
  restores, when PEs tick (`PeTicks`, paused while keys arrive) and the
  idle-expiry scan.
- `ChainProcessing` (`chain_spu.py`): one S2J chain worker (`ChainNode`), its
  links to the neighbouring SPUs, flush rounds, tail changes, chain snapshots
  (and its instance's ticks, if it asked).

The runtime picks it from the declaration (`esault.datapath.actors`). The actor
calls each hook in one place; a hook runs on the actor's thread, never
concurrently with another.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol

from esault.checkpoint.snapshots import Snapshot
from esault.messages.data import DataBatch
from esault.messages.handoff import PeersLost, PrepareReceive
from esault.migration.handoff import GiverHandoff

Handlers = dict[type, Callable[[Any], Any]]


class Processing(Protocol):
    """What a bolt SPU's actor asks of its processing part. Built once, as `kind(spu)`, in the actor's
    `__init__` after every shared part exists (the PE table, output router, stats, barriers, giver).
    A kind may name its mailbox class as `inbox` (default: ControlFirstInbox)."""

    def install(self, handlers: Handlers) -> None:
        """Once, at construction: add this kind's own messages to the actor's message -> handler table, and
        wrap the handlers of messages that must wait for it (a chain SPU's entries wait for its neighbours)."""

    def process_data(self, msg: DataBatch) -> None:
        """One input batch (not held by a checkpoint's alignment): process it, flush its output, ack it.
        The hot path: the actor times it and counts the backlog around this call."""

    def on_tick(self, now: float) -> None:
        """A Tick (the load feed already ran): time-driven work (`spu.ticks.tick(now)` for the PEs that asked,
        whenever the kind allows it; idle expiry; flush rounds)."""

    def restore(self, epoch: int) -> None:
        """At start: take this SPU's part of completed checkpoint `epoch` (the actor restores the chained
        stages after it; an exception fails the SPU's start)."""

    def ready_to_seal(self, epoch: int) -> bool:
        """Every barrier of `epoch` is in: may the SPU seal it now? False: something calls
        `spu.barriers.check()` again later (a chain SPU, once its links are quiet)."""

    def end_input(self) -> None:
        """The final checkpoint (a stop) aligned and is about to be sealed: no input follows."""

    def finish_input(self) -> None:
        """Every upstream's input ended (at the final checkpoint's barrier, or at the stop without checkpoints):
        each instance's finish(), before the snapshot; what it emits joins the last checkpoint."""

    def snapshot(self, snapshot: Snapshot) -> None:
        """Add this SPU's state to `snapshot`'s rows (the actor flushed first, then adds the chained
        stages', passes the barrier on and writes it)."""

    def sealed(self, epoch: int, final: bool) -> None:
        """Epoch `epoch`'s barrier left; `final`: the job stops at it."""

    def give(self, giving: GiverHandoff, receivers: dict[int, Any]) -> None:
        """A giver whose upstream all switched: hand the moved ranges off; `receivers`: SPU id -> mailbox."""

    def on_prepare_receive(self, msg: PrepareReceive) -> None:
        """This SPU receives in reconfiguration `msg.reconfig_id`: get ready, answer Prepared."""

    def cancel(self, reconfig_id: int) -> None:
        """The reconfiguration is called off before the switch: forget its receiving side."""

    def routes_installed(self) -> None:
        """This SPU's output routes changed (a downstream unit's SPUs changed)."""

    def peers_lost(self, msg: PeersLost) -> None:
        """SPUs died with their worker in reconfiguration `msg.reconfig_id` (no exactly_once): wait for none."""


class PartOfSpu:
    """What both processing parts keep of their actor, as references of their own (a per-tuple loop then
    loads nothing through the actor): the job, names, the PE table and its services, stats, faults, the
    router, the unit and the flush. `spu` is the BoltSpuActor (typed loosely: its module imports the parts)."""

    def __init__(self, spu: Any) -> None:
        self.spu = spu
        self.job = spu.job
        self.unit_name = spu.unit_name
        self.spu_id = spu.spu_id
        self.pes = spu.pes
        self.services = spu.services
        self.ticks = spu.ticks
        self.stats = spu.stats
        self.faults = spu.faults
        self.router = spu.router
        self.unit_ref = spu.unit_ref
        self.flush = spu.flush
        self.count_sent = spu.count_sent
