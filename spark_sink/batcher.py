"""Batcher: buffers rows and seals them into batches by row count or age.

Pure and single-threaded (the committer wraps it in a lock). Rows are kept
per partition value because a batch must hold one partition value only (it is
published by one directory rename); a flush seals every partition's rows at
once, so memory is bounded by batch_rows unsealed rows.

Costs: add() is O(1); seal() is O(partitions buffered).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from esault.errors import ConfigError
from spark_sink.layout import batch_id as make_batch_id


@dataclass(slots=True)
class Batch:
    """Sealed rows of one partition value, with their anchors; id = <writer>.<seq>."""

    seq: int
    batch_id: str
    partition: tuple[Any, ...]
    rows: list[dict[str, Any]]
    anchors: list[Any]
    sealed_at: float
    attempts: int = 0


@dataclass(slots=True)
class _Buffer:
    rows: list[dict[str, Any]] = field(default_factory=list)
    anchors: list[Any] = field(default_factory=list)


def check_settings(batch_rows: int, batch_seconds: float | None) -> None:
    """Raise ConfigError naming a bad batching setting."""
    if not isinstance(batch_rows, int) or isinstance(batch_rows, bool) or batch_rows < 1:
        raise ConfigError(f"batch_rows must be a whole number >= 1, got {batch_rows!r}")
    if batch_seconds is not None and (
        not isinstance(batch_seconds, (int, float)) or isinstance(batch_seconds, bool) or batch_seconds <= 0
    ):
        raise ConfigError(f"batch_seconds must be seconds > 0 or None (count only), got {batch_seconds!r}")


class Batcher:
    """Seals a flush when batch_rows rows are buffered or the oldest is batch_seconds old.

    Batch ids are '<writer>.<seq>' with seq counting up from first_seq, one per
    sealed batch, in seal order; the writer's commit log supplies first_seq so a
    restarted writer never reuses an id.
    """

    def __init__(
        self,
        batch_rows: int,
        batch_seconds: float | None,
        writer: str,
        first_seq: int = 0,
        make_id: Callable[[str, int], str] = make_batch_id,
    ) -> None:
        check_settings(batch_rows, batch_seconds)
        self.batch_rows = batch_rows
        self.batch_seconds = batch_seconds
        self.writer = writer
        self.next_seq = first_seq
        self._make_id = make_id
        self._buffers: dict[tuple[Any, ...], _Buffer] = {}
        self._rows = 0
        self._oldest: float | None = None

    @property
    def buffered_rows(self) -> int:
        return self._rows

    def add(self, partition: tuple[Any, ...], row: dict[str, Any], anchor: Any, now: float) -> bool:
        """Buffer one row; True when a flush is due because batch_rows are buffered.

        now matters only for the first row after a seal (the age of a flush is
        the age of its oldest row), so callers may skip reading the clock otherwise.
        """
        buf = self._buffers.get(partition)
        if buf is None:
            buf = self._buffers[partition] = _Buffer()
        buf.rows.append(row)
        buf.anchors.append(anchor)
        if self._oldest is None:
            self._oldest = now
        self._rows += 1
        return self._rows >= self.batch_rows

    def deadline(self) -> float | None:
        """When the buffered rows become due by age (None: nothing buffered or no age limit)."""
        if self._oldest is None or self.batch_seconds is None:
            return None
        return self._oldest + self.batch_seconds

    def due(self, now: float) -> bool:
        if self._rows >= self.batch_rows:
            return True
        deadline = self.deadline()
        return deadline is not None and now >= deadline

    def pending_batches(self) -> int:
        """How many batches seal() would return now."""
        return len(self._buffers)

    def seal(self, now: float) -> list[Batch]:
        """Every buffered row as batches, one per partition value in first-seen order."""
        out = []
        for partition, buf in self._buffers.items():
            seq = self.next_seq
            self.next_seq += 1
            out.append(Batch(seq, self._make_id(self.writer, seq), partition, buf.rows, buf.anchors, now))
        self._buffers = {}
        self._rows = 0
        self._oldest = None
        return out

    def check_invariants(self) -> None:
        total = sum(len(b.rows) for b in self._buffers.values())
        assert total == self._rows, f"row count {self._rows} != buffered {total}"
        assert all(len(b.rows) == len(b.anchors) > 0 for b in self._buffers.values()), "row/anchor mismatch"
        assert (self._oldest is None) == (self._rows == 0), "oldest timestamp out of sync"
