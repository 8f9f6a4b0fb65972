"""State objects of an object-store checkpoint: their names (which say what they hold) and their bytes.

A part holds one writer's rows of one unit for one epoch, `[[bucket, entries], ...]` sorted by bucket
(entries as the SQLite store keeps them: `pack_entries([key, state, ...])`). Its name carries what the
driver needs to list it into a manifest without reading it, and what a reader needs to skip it:

    <time_ns, 16 hex>.w<writer>.b<first bucket>_<last bucket>.r<rows>.c<crc32, 8 hex>.part

The time first: names sort in write order within an epoch's folder, as the SQLite store's rowids did. The
CRC-32 is of the object's bytes, checked on every read.
"""

from __future__ import annotations

import re
import time
import zlib
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote

import msgpack

__all__ = ["PartRef", "decode_part", "encode_part", "epoch_folder", "parse_part_name", "part_name", "unit_folder"]

_NAME = re.compile(r"^(?P<t>[0-9a-f]{16})\.w(?P<w>-?\d+)\.b(?P<lo>-?\d+)_(?P<hi>-?\d+)\.r(?P<r>\d+)"
                   r"\.c(?P<c>[0-9a-f]{8})\.part$")
_last_time = [0]


@dataclass(frozen=True, slots=True)
class PartRef:
    """One state object as a manifest lists it: where it is and what it covers."""

    name: str  # relative to the job's root
    epoch: int  # the epoch whose state it holds (a compacted object: the epoch it was merged up to)
    unit: str
    writer: int
    lo: int  # first and last bucket in it
    hi: int
    rows: int
    size: int
    crc: int

    def to_wire(self) -> list[Any]:
        return [self.name, self.epoch, self.unit, self.writer, self.lo, self.hi, self.rows, self.size, self.crc]

    @classmethod
    def from_wire(cls, data: list[Any]) -> "PartRef":
        name, epoch, unit, writer, lo, hi, rows, size, crc = data
        if not (isinstance(name, str) and isinstance(unit, str)
                and all(type(x) is int for x in (epoch, writer, lo, hi, rows, size, crc))):
            raise ValueError(f"a manifest entry has the wrong types: {data!r}")
        return cls(name, epoch, unit, writer, lo, hi, rows, size, crc)

    def covers(self, first: int, last: int) -> bool:
        return self.lo <= last and first <= self.hi


def epoch_folder(kind: str, epoch: int) -> str:
    """'parts/e000000000007' (SPUs' objects) or 'compacted/e...' (the driver's merged ones)."""
    return f"{kind}/e{epoch:012d}"


def unit_folder(unit: str) -> str:
    return quote(unit, safe="")


def folder_unit(folder: str) -> str:
    return unquote(folder)


def encode_part(rows: list[tuple[int, bytes]]) -> tuple[bytes, int, int, int]:
    """(bytes, first bucket, last bucket, crc) of a part holding `rows`."""
    rows = sorted(rows, key=lambda r: r[0])
    data = msgpack.packb([[bucket, entries] for bucket, entries in rows], use_bin_type=True)
    return data, rows[0][0], rows[-1][0], zlib.crc32(data)


def decode_part(data: bytes) -> list[tuple[int, bytes]]:
    rows = msgpack.unpackb(data, raw=False)
    return [(int(bucket), entries) for bucket, entries in rows]


def part_name(writer: int, lo: int, hi: int, rows: int, crc: int) -> str:
    now = time.time_ns()
    now = _last_time[0] = max(now, _last_time[0] + 1)  # names of one process never repeat
    return f"{now:016x}.w{writer}.b{lo}_{hi}.r{rows}.c{crc:08x}.part"


def parse_part_name(name: str) -> dict[str, int] | None:
    """The writer, bucket range, rows and crc a part's file name says, or None for a name of no part."""
    m = _NAME.match(name)
    if m is None:
        return None
    return {"writer": int(m["w"]), "lo": int(m["lo"]), "hi": int(m["hi"]), "rows": int(m["r"]),
            "crc": int(m["c"], 16)}
