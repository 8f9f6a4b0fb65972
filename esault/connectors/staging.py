"""A sink instance's staged epochs: one object per checkpoint epoch, written durably at its barrier.

KafkaSink writes an epoch's records here at the barrier (phase one) and
produces them in one Kafka transaction once the checkpoint completes (phase
two), then deletes the object. The objects live where the job keeps what must
outlive a process (esault.storage): the job's data dir when its processes
share one, its folder on the checkpoint object store otherwise, so a worker
on another host finishes what its predecessor staged. An object is there whole
or not at all (a local file: temporary name, fsync, rename, directory fsync).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import msgpack

from esault.storage.location import StorageLocation
from esault.storage.objects import ObjectStore

__all__ = ["EpochStage"]

_NAME = re.compile(r"^e(\d{12})\.msgpack$")


class EpochStage:
    """Staged epochs of one writer under `location` (a folder, or an object-store location)."""

    def __init__(self, location: StorageLocation | Path | str) -> None:
        if not isinstance(location, StorageLocation):
            location = StorageLocation.parse(os.fspath(location))
        self.location = location
        self.objects = ObjectStore(location)

    @property
    def directory(self) -> str:
        """Where the staged epochs are, for messages."""
        return self.location.url

    @staticmethod
    def name(epoch: int) -> str:
        return f"e{epoch:012d}.msgpack"

    def write(self, epoch: int, records: list[Any]) -> None:
        """Stage `records` (msgpack-serialisable) as epoch `epoch`, durably; an existing stage of it is replaced."""
        self.objects.put(self.name(epoch), msgpack.packb(records, use_bin_type=True))

    def read(self, epoch: int) -> list[Any]:
        return msgpack.unpackb(self.objects.get(self.name(epoch)), raw=False, strict_map_key=False)

    def epochs(self) -> list[int]:
        """The staged epochs, oldest first (temporary files of a cut write are not epochs)."""
        found = (_NAME.match(o.name) for o in self.objects.list())
        return sorted(int(m.group(1)) for m in found if m)

    def delete(self, epoch: int) -> None:
        self.objects.delete([self.name(epoch)])

    def delete_leftovers(self) -> None:
        """Temporary files of writes a crash cut short (a local folder's; an object store has none)."""
        if self.location.is_local and Path(self.location.root).is_dir():
            for p in Path(self.location.root).glob("*.tmp"):
                p.unlink(missing_ok=True)
