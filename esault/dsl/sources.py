"""Ready-made spouts for common sources."""

from __future__ import annotations

import os
from typing import Any

from esault.dsl.context import TopologyContext
from esault.dsl.spout import Spout
from esault.errors import TopologyError
from esault.reliability.shared_ranges import Range, coalesce, parse_ranges


class TextFileSpout(Spout):
    """Emits the lines of a text file as (None, line) tuples, in chunks tracked by their byte offset.

    Each next_tuple() reads `chunk_lines` lines and emits them with
    emit_batch() under one msg_id: the chunk's byte offset. A failed chunk is
    re-read from the file at that offset, so nothing but offsets is kept in
    memory however many chunks are in flight. Lines keep no trailing newline.

    Who reads what. A block of bytes [a, b) owns the lines that start in it
    (a reader seeks a - 1 and skips to the next line start), so every line is
    read once however the file is cut.
    - shared (the default with several instances): the instances lease blocks
      of `block_bytes` (at least size / 4096) from the job as each becomes
      free (Spout.request_range), so an instance on a busier process reads
      less and none idles at the end. Its position is the byte ranges it has
      read; the merge hook unites them, and a restore leases the rest again
      (a replaced instance's blocks, at_least_once, are leased again whole).
    - static (shared=False, or one instance): instance i of n reads the i-th
      of n equal byte ranges; its position is its byte offset.
    params: path, chunk_lines (default 64), encoding (default utf-8), shared
    (None: as above), block_bytes (default 1 MiB).
    """

    def __init__(self, path: str, chunk_lines: int = 64, encoding: str = "utf-8", shared: bool | None = None,
                 block_bytes: int = 1 << 20) -> None:
        if not isinstance(chunk_lines, int) or isinstance(chunk_lines, bool) or chunk_lines < 1:
            raise TopologyError(f"TextFileSpout: chunk_lines must be a whole number >= 1, got {chunk_lines!r}")
        if shared is not None and not isinstance(shared, bool):
            raise TopologyError(f"TextFileSpout: shared must be True, False or None (automatic), got {shared!r}")
        if not isinstance(block_bytes, int) or isinstance(block_bytes, bool) or block_bytes < 1:
            raise TopologyError(f"TextFileSpout: block_bytes must be a whole number >= 1, got {block_bytes!r}")
        self.path = str(path)
        self.chunk_lines = chunk_lines
        self.encoding = encoding
        self.shared = shared
        self.block_bytes = block_bytes
        self._file: Any = None
        self._size = 0
        self._end = 0  # this instance reads the lines that start before this byte (its range or block)
        self._pending: dict[int, int] = {}  # chunk offset -> its line count
        self.replayed = 0
        # shared mode
        self._sharing = False
        self._restored: list[Range] = []  # what every instance of this launch restored as read
        self._done: list[Range] = []  # what this instance has read (with _restored), but the current block
        self._block_start: int | None = None  # the current block's first byte; None: no current block
        self._next: Range | None = None  # the block leased for after the current one
        self._asked = False  # a request is out
        self._no_more = False  # the job said every block is leased

    def open(self, context: TopologyContext) -> None:
        if not os.path.isfile(self.path):
            raise TopologyError(f"TextFileSpout: no file at {self.path!r}; pass params={{'path': ...}} naming "
                                "a readable text file")
        self._file = open(self.path, "rb")  # noqa: SIM115 - closed in close()
        self._size = size = os.path.getsize(self.path)
        self._block = max(self.block_bytes, -(-size // 4096))  # a position then holds a few thousand ranges
        self._instance, self._instances = i, n = context.instance, context.instances
        self._sharing = self.shared if self.shared is not None else n > 1
        if self._sharing:
            return  # next_tuple() leases the first block (after restore_position(), if any)
        start, self._end = size * i // n, size * (i + 1) // n
        self._seek_line(start)

    def _seek_line(self, start: int) -> None:
        """To the first line that starts at or after byte `start` (the line across `start` is the previous
        block's)."""
        if start > 0:
            self._file.seek(start - 1)
            self._file.readline()
        else:
            self._file.seek(0)

    def next_tuple(self) -> None:
        if self._sharing and not self._next_block_ready():
            return
        offset = self._file.tell()
        lines = self._read(self.chunk_lines, self._end) if offset < self._end else []
        if not lines:
            if self._sharing:
                self._done = coalesce([*self._done, (self._block_start, offset)])
                self._block_start = None
                return
            self.finish()
            return
        self._pending[offset] = len(lines)
        self.emit_batch([None] * len(lines), self.values(lines), msg_id=offset)

    def values(self, lines: list[str]) -> list:
        """The tuple values of a chunk's lines: the lines. A subclass may map them (stamp them, parse them);
        a replayed chunk goes through it again."""
        return lines

    def _next_block_ready(self) -> bool:
        """Shared mode: a current block to read from (starting the leased one), asking for the one after it
        ahead of time; False while a lease is awaited or when the file is done (then finished)."""
        if self._block_start is None:
            if self._next is None:
                if self._no_more:
                    self.finish()
                elif not self._asked:
                    self._ask()
                return False
            (start, self._end), self._next = self._next, None
            self._block_start = start
            self._seek_line(start)
        if self._next is None and not self._asked and not self._no_more:
            self._ask()
        return True

    def _ask(self) -> None:
        self._asked = True
        self.request_range(self._size, [list(r) for r in self._restored], self._block)

    def on_range(self, start: int | None, end: int | None, error: str) -> None:
        self._asked = False
        if error:
            raise TopologyError(f"TextFileSpout {self.path!r}: the job refused a block: {error}")
        if start is None or end is None:
            self._no_more = True
        else:
            self._next = (start, end)

    def _read(self, count: int, end: int) -> list[str]:
        file, encoding = self._file, self.encoding
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
        lines = self._read(count, self._size + 1)  # the chunk's own line count bounds it
        self._file.seek(resume)
        self.replayed += 1
        self.emit_batch([None] * len(lines), self.values(lines), msg_id=msg_id)

    def snapshot_position(self) -> Any:
        """Static: the byte offset of the next line to read. Shared: {"size", "done"}, the byte ranges read."""
        if not self._sharing:
            return self._file.tell()
        done = self._done if self._block_start is None else [*self._done, (self._block_start, self._file.tell())]
        return {"size": self._size, "done": [list(r) for r in coalesce(done)]}

    @staticmethod
    def esault_merge_positions(positions: list[Any]) -> Any:
        """Shared positions: one with the union of the ranges read. Static offsets (a checkpoint of static
        instances 0 .. n - 1) are kept as they are: restore_position turns them into ranges read."""
        if positions and all(isinstance(p, dict) and "done" in p for p in positions):
            sizes = {p.get("size") for p in positions}
            if len(sizes) != 1:
                raise ValueError(f"TextFileSpout positions of files of different sizes {sorted(map(str, sizes))}")
            return {"size": positions[0]["size"], "done": [list(r) for r in coalesce(
                tuple(r) for p in positions for r in p["done"])]}
        return {"static": list(positions)}

    def restore_position(self, position: Any) -> None:
        self._pending.clear()
        if isinstance(position, int) and not isinstance(position, bool) and not self._sharing:
            self._file.seek(position)  # a static instance's own offset
            return
        if isinstance(position, dict) and "static" in position:
            offsets = position["static"]
            n = len(offsets)
            if not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets):
                raise ValueError(f"TextFileSpout: a checkpoint's static offsets {offsets!r:.80} are not byte offsets")
            if n == self._instances and not self._sharing:
                self._file.seek(offsets[self._instance])
                return
            done = [(self._size * i // n, offset) for i, offset in enumerate(offsets) if offset > self._size * i // n]
        elif isinstance(position, dict) and "done" in position:
            if position.get("size") != self._size:
                raise ValueError(f"TextFileSpout: the checkpoint read {self.path!r} at {position.get('size')!r} "
                                 f"bytes, the file has {self._size} now; restore only the file it read")
            done = position["done"]
        else:
            raise ValueError(f"TextFileSpout: {position!r:.80} is no position of this spout")
        self._sharing = True
        self._restored = self._done = parse_ranges([list(r) for r in done], self._size, "TextFileSpout position")

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
