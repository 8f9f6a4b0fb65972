"""A sink instance's staged epochs on disk: one file per checkpoint epoch, written durably at its barrier.

KafkaSink writes an epoch's records here at the barrier (phase one) and
produces them in one Kafka transaction once the checkpoint completes (phase
two), then deletes the file. A file is written to a temporary name, fsync'd,
renamed, and the directory fsync'd: it is there whole or not at all.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import msgpack

__all__ = ["EpochStage"]

_NAME = re.compile(r"^e(\d{12})\.msgpack$")


class EpochStage:
    """Staged epochs of one writer under `directory` (created on first use)."""

    def __init__(self, directory: Path | str) -> None:
        self.directory = Path(directory)

    def path(self, epoch: int) -> Path:
        return self.directory / f"e{epoch:012d}.msgpack"

    def write(self, epoch: int, records: list[Any]) -> None:
        """Stage `records` (msgpack-serialisable) as epoch `epoch`, durably; an existing stage of it is replaced."""
        self.directory.mkdir(parents=True, exist_ok=True)
        final = self.path(epoch)
        temporary = final.with_suffix(".tmp")
        with open(temporary, "wb") as out:
            out.write(msgpack.packb(records, use_bin_type=True))
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, final)
        self._sync_directory()

    def read(self, epoch: int) -> list[Any]:
        return msgpack.unpackb(self.path(epoch).read_bytes(), raw=False, strict_map_key=False)

    def epochs(self) -> list[int]:
        """The staged epochs, oldest first (temporary files of a cut write are not epochs)."""
        if not self.directory.is_dir():
            return []
        found = (_NAME.match(p.name) for p in self.directory.iterdir())
        return sorted(int(m.group(1)) for m in found if m)

    def delete(self, epoch: int) -> None:
        self.path(epoch).unlink(missing_ok=True)

    def delete_leftovers(self) -> None:
        """Temporary files of writes a crash cut short."""
        if self.directory.is_dir():
            for p in self.directory.glob("*.tmp"):
                p.unlink(missing_ok=True)

    def _sync_directory(self) -> None:
        fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
