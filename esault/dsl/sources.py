"""Ready-made spouts for common sources."""

from __future__ import annotations

import os
from typing import Any

from esault.dsl.context import TopologyContext
from esault.dsl.spout import Spout
from esault.errors import TopologyError


class TextFileSpout(Spout):
    """Emits the lines of a text file as (None, line) tuples, in chunks tracked by their byte offset.

    Each next_tuple() reads `chunk_lines` lines and emits them with
    emit_batch() under one msg_id: the chunk's byte offset. A failed chunk is
    re-read from the file at that offset, so nothing but offsets is kept in
    memory however many chunks are in flight. Lines keep no trailing newline.
    With parallelism n, instance i reads the i-th of n byte ranges, each
    starting after a newline, so every line is read by exactly one instance.
    params: path, chunk_lines (default 64), encoding (default utf-8).
    """

    def __init__(self, path: str, chunk_lines: int = 64, encoding: str = "utf-8") -> None:
        if not isinstance(chunk_lines, int) or isinstance(chunk_lines, bool) or chunk_lines < 1:
            raise TopologyError(f"TextFileSpout: chunk_lines must be a whole number >= 1, got {chunk_lines!r}")
        self.path = str(path)
        self.chunk_lines = chunk_lines
        self.encoding = encoding
        self._file: Any = None
        self._end = 0  # this instance reads the lines that start before this byte
        self._pending: dict[int, int] = {}  # chunk offset -> its line count
        self.replayed = 0

    def open(self, context: TopologyContext) -> None:
        if not os.path.isfile(self.path):
            raise TopologyError(f"TextFileSpout: no file at {self.path!r}; pass params={{'path': ...}} naming "
                                "a readable text file")
        self._file = open(self.path, "rb")  # noqa: SIM115 - closed in close()
        size = os.path.getsize(self.path)
        i, n = context.instance, context.instances
        start, self._end = size * i // n, size * (i + 1) // n
        if start > 0:  # the line that straddles `start` belongs to the previous range
            self._file.seek(start - 1)
            self._file.readline()

    def next_tuple(self) -> None:
        offset = self._file.tell()
        lines = self._read(self.chunk_lines) if offset < self._end else []
        if not lines:
            self.finish()
            return
        self._pending[offset] = len(lines)
        self.emit_batch([None] * len(lines), lines, msg_id=offset)

    def _read(self, count: int) -> list[str]:
        file, end, encoding = self._file, self._end, self.encoding
        readline = file.readline
        position = file.tell()
        lines = []
        for _ in range(count):
            if position >= end:
                break
            raw = readline()
            if not raw:
                break
            position += len(raw)
            lines.append(raw.rstrip(b"\r\n").decode(encoding, "replace"))
        return lines

    def ack(self, msg_id: Any) -> None:
        self._pending.pop(msg_id, None)

    def drop(self, msg_id: Any) -> None:
        self._pending.pop(msg_id, None)

    def fail(self, msg_id: Any) -> None:
        count = self._pending.get(msg_id)
        if count is None:
            return
        resume = self._file.tell()
        self._file.seek(msg_id)
        lines = self._read(count)
        self._file.seek(resume)
        self.replayed += 1
        self.emit_batch([None] * len(lines), lines, msg_id=msg_id)

    def snapshot_position(self) -> int:
        """The byte offset of the next line to read."""
        return self._file.tell()

    def restore_position(self, position: int) -> None:
        self._file.seek(int(position))
        self._pending.clear()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
