"""Aligned checkpoints (docs/CHECKPOINTS.md): the checkpoint coordinator, spout SPUs and SPUs.

Frozen, slotted dataclasses; docstrings read "sender -> receiver: what it means".
This package imports nothing else of esault's (tests/unit/test_import_graph.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class TriggerCheckpoint:
    """checkpoint coordinator -> spout SPU: record your position and send Barrier(epoch) on every output
    channel at your next round boundary; `final` stops the spout after it (stop-with-checkpoint).
    `may_finish` (final only; not in a job restored after its input ended): a spout whose source had
    finished says so in its barrier, and the bolts' finish() runs."""

    epoch: int
    final: bool = False
    may_finish: bool = False


@dataclass(frozen=True, slots=True)
class CheckpointStart:
    """checkpoint coordinator -> bolt SPU: checkpoint `epoch` is aligned over barriers from exactly these
    upstream SPUs (the layout is frozen while a checkpoint runs: reconfigurations wait for it). `final`: the
    spouts end at its barriers (a stop): nothing should be emitted after them (a join chain stays quiet)."""

    epoch: int
    upstream: frozenset[int]
    final: bool = False


@dataclass(frozen=True, slots=True)
class Barrier:
    """upstream SPU -> SPU, in band after its data: everything `sender` sent before belongs to epochs <= `epoch`.
    `end_of_input` (the final epoch only): the sender's input ended, nothing follows this barrier (its sources
    finished before the stop); a bolt whose every input says so calls its PEs' finish() before sealing."""

    epoch: int
    sender: int
    end_of_input: bool = False


@dataclass(frozen=True, slots=True)
class CheckpointAck:
    """SPU -> checkpoint coordinator: its snapshot of `epoch` is durable (`position`: a spout's, else None);
    or, with `error`, it is not. `fatal`: no retry can succeed (a state that cannot be encoded): the job fails,
    whatever the epoch (-1: a state lost outside a checkpoint, when its key moved)."""

    epoch: int
    spu_id: int
    unit: str
    instance: int
    position: Any = None
    error: str = ""
    fatal: bool = False
    input_ended: bool = False  # a spout's, at the final epoch: its source had finished (nothing follows)
    rows: int = 0  # state rows it wrote into the job's checkpoint store for `epoch` (the coordinator counts them)


@dataclass(frozen=True, slots=True)
class CheckpointAcks:
    """A worker -> checkpoint coordinator: the CheckpointAcks of several of its SPUs in one frame (one a worker
    and checkpoint, not one an SPU: esault/checkpoint/ack_batcher.py)."""

    acks: tuple[CheckpointAck, ...]


@dataclass(frozen=True, slots=True)
class CheckpointComplete:
    """checkpoint coordinator -> every SPU: `epoch` is recorded durably; sinks publish what they staged for it."""

    epoch: int


@dataclass(frozen=True, slots=True)
class Abandon:
    """unit -> SPU: a rollback discards you: drop what you hold, publish nothing, skip close(); a stop follows."""
