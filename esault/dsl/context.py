"""What a running spout or bolt instance may know about where it runs."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from esault.storage.location import StorageLocation


@dataclass(frozen=True, slots=True)
class TopologyContext:
    """Passed to open(context): identity of the instance and the job's settings."""

    topology: str
    unit: str
    spu_id: int
    data_dir: Path
    params: dict[str, Any] = field(default_factory=dict)
    key: Any = None
    per_key: bool = False
    instance: int = 0
    """Which of the unit's parallel instances this is: 0 .. instances - 1 at the start (a spout reads partition
    `instance`). A bolt's SPU that a split or rescale starts takes the lowest number no live SPU of the unit
    has, so after scaling it may exceed instances - 1; no two live SPUs of a unit share one."""
    instances: int = 1
    guarantee: str = "exactly_once"
    """The job's delivery guarantee: "exactly_once", "at_least_once" or "none" (docs/GUARANTEES.md)."""
    restored_epoch: int | None = None
    """The checkpoint this instance was restored from (after a failure or a restart), None on a fresh start."""
    durable: StorageLocation | None = None
    """The job's folder on its checkpoint storage when that is an object store (checkpoint_storage s3://...):
    where what must outlive this process goes (a sink's staged epochs), since data_dir is this host's only.
    None: data_dir is durable enough (the job's processes share it)."""

    def durable_location(self, *names: str) -> StorageLocation:
        """A folder for this instance's durable files: under `durable` if set, else under data_dir."""
        base = self.durable if self.durable is not None else StorageLocation.parse(str(self.data_dir))
        return base.child(*names)
