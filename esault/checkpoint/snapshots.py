"""SnapshotWriter: an SPU's checkpoint writes, on a thread of their own, so the data path never waits for a disk.

The SPU encodes its dirty state on its own thread (PE state is not
thread-safe), then hands the encoded rows here and goes on processing. This
thread writes them to the job's CheckpointStore, waits for the sinks'
pre-commit futures, and only then sends the CheckpointAck: an ack always
means "durable".
"""

from __future__ import annotations

import logging
import queue
import threading
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from esault.checkpoint.backends import CheckpointStorage
from esault.errors import GuaranteeBroken
from esault.messages.checkpoints import CheckpointAck
from esault.thread_names import os_named

log = logging.getLogger("esault.checkpoint")


@dataclass
class Snapshot:
    """One SPU's part of one checkpoint: (bucket, entries) rows per unit name, futures to wait for, the ack."""

    ack: CheckpointAck
    rows: dict[str, list[tuple[int, bytes]]] = field(default_factory=dict)
    waits: list[Future] = field(default_factory=list)
    deferred: bool = False
    """Its keyed states are still being encoded (datapath/pending_snapshot.py): the barrier leaves
    without it, and the SPU submits it when the last key is in."""

    def refuse(self, error: str) -> None:
        """Some state this snapshot must hold is missing: nothing is written, the ack fails its checkpoint
        for good (`fatal`), and the job with it."""
        self.ack = replace(self.ack, error=error, fatal=True)
        self.rows.clear()
        self.waits.clear()


class SnapshotWriter:
    """Writes Snapshots in order and acks each to `coordinator` (a mailbox); one thread per SPU."""

    def __init__(self, open_store: Callable[[], CheckpointStorage], coordinator: Any, name: str,
                 wait_timeout: float = 60.0) -> None:
        self._open_store = open_store
        self._coordinator = coordinator
        self._wait_timeout = wait_timeout
        self._queue: "queue.Queue[Snapshot | None]" = queue.Queue()
        self._discard = threading.Event()
        self._thread = threading.Thread(target=os_named(self._run), name=name, daemon=True)
        self._thread.start()

    def submit(self, snapshot: Snapshot) -> None:
        self._queue.put(snapshot)

    def close(self, discard: bool, timeout: float = 30.0) -> None:
        """Stop after the queued snapshots (or dropping them, on a rollback); waits up to `timeout`."""
        if discard:
            self._discard.set()
        self._queue.put(None)
        self._thread.join(timeout)

    def _run(self) -> None:
        store: CheckpointStorage | None = None
        try:
            while True:
                snapshot = self._queue.get()
                if snapshot is None:
                    return
                if self._discard.is_set():
                    continue
                if store is None:
                    store = self._open_store()
                self._coordinator.tell(self._write(store, snapshot))
        except Exception:  # noqa: BLE001 - the coordinator times the checkpoint out and retries
            log.exception("checkpoint writer %s stopped", self._thread.name)
        finally:
            if store is not None:
                store.close()

    def _write(self, store: CheckpointStorage, snapshot: Snapshot) -> CheckpointAck:
        ack = snapshot.ack
        if ack.error:  # refused: its checkpoint fails without a row of it in the store
            return ack
        try:
            for unit, rows in snapshot.rows.items():
                store.write_states(unit, ack.epoch, ack.spu_id, rows)
            for future in snapshot.waits:
                future.result(self._wait_timeout)
        except Exception as exc:  # noqa: BLE001 - reported in the ack: the checkpoint fails, not the SPU
            log.error("checkpoint %d: %s SPU %d could not make its snapshot durable: %r",
                      ack.epoch, ack.unit, ack.spu_id, exc)
            # A broken guarantee (a sink's lost transaction) fails the job: a retry would only repeat it.
            return CheckpointAck(ack.epoch, ack.spu_id, ack.unit, ack.instance, ack.position,
                                 f"{type(exc).__name__}: {exc}", fatal=isinstance(exc, GuaranteeBroken))
        return replace(ack, rows=sum(len(rows) for rows in snapshot.rows.values()))
