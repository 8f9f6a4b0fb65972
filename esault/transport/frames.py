"""Data frames handed to their actor undecoded, so decoding runs on the receiver's own thread.

The endpoint's I/O thread only moves bytes: it recognises a DataBatch frame by
its first two bytes and hands the actor an `EncodedFrame` instead of decoding
it. The actor calls `open()` when it gets to it. Two threads of one process
share one GIL, so decoding on the I/O thread would only make the two take
turns; on the actor's thread it overlaps the I/O thread's (GIL-free) socket
work instead.
"""

from __future__ import annotations

from typing import Any, Callable

from esault.errors import FrameError

DATA_FRAME_PREFIX = bytes((0x97, 0x01))
"""msgpack fixarray of 7 ([tag, 6 fields]) then positive fixint tag 1: a DataBatch frame.

Pinned by tests/unit/test_wire.py together with the DataBatch tag and field count.
"""


class EncodedFrame:
    """An undecoded DataBatch frame and how to decode it (the process's codec) or report it bad."""

    __slots__ = ("data", "_decode", "_reject")

    def __init__(self, data: bytes, decode: Callable[[bytes], Any], reject: Callable[[FrameError], None]) -> None:
        self.data = data
        self._decode = decode
        self._reject = reject

    def open(self) -> Any | None:
        """The message, or None after reporting a malformed frame (dropped and counted, never raised)."""
        try:
            return self._decode(self.data)
        except FrameError as exc:
            self._reject(exc)
            return None

    def __repr__(self) -> str:
        return f"EncodedFrame({len(self.data)} bytes)"
