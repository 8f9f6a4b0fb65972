"""Which checkpoint store a job uses, opened the same way in the driver and in every worker.

`JobConfig.checkpoint_storage` decides: None or a local path, the SQLite store (one file, the embedded
default: as fast as ever, for processes that share a disk); s3://..., the object store
(esault.checkpoint.object_store: nothing shared but the network). Both keep one contract, CheckpointStorage;
the rest of esault sees only that.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Protocol

from esault.checkpoint.object_store import ObjectCheckpointStore
from esault.checkpoint.store import STORE_ID, CheckpointStore, Completed, Verified, store_refusal
from esault.storage.location import StorageLocation
from esault.storage.objects import ObjectStore, StorageError

__all__ = ["CheckpointStorage", "delete_checkpoints", "open_checkpoint_store", "refusal_of"]


class CheckpointStorage(Protocol):
    """A job's checkpoints: SPUs write their states' rows; the driver records completed checkpoints."""

    path: Any
    """Where it is, for messages (a file path or a URL)."""
    local_dir: Path | None
    """The local folder whose free space a checkpoint needs, or None (an object store)."""

    def write_states(self, unit: str, epoch: int, writer: int, rows: Iterable[tuple[int, bytes]]) -> None: ...
    def read_range(self, unit: str, epoch: int, lo: int, hi: int) -> dict[Any, Any]: ...
    def read_slot(self, unit: str, epoch: int, slot: int) -> Any: ...
    def read_key(self, unit: str, key: Any, epoch: int | None = None) -> tuple[bool, Any]:
        """(found, state) of one key in completed checkpoint `epoch` (one the caller knows holds the key's newest
        state: no listing of the store per key), or in the latest completed one."""
    def complete(self, epoch: int, kind: str, positions: dict[str, dict[int, Any]],
                 instances: dict[str, Iterable[int]] | None = None, input_ended: bool = False) -> None: ...
    def latest(self, kind: str | None = None) -> Completed | None: ...
    def get(self, epoch: int) -> Completed | None: ...
    def completed(self) -> list[Completed]: ...
    def next_epoch(self) -> int: ...
    def rows_by_writer(self, epoch: int) -> dict[int, int]: ...
    def mark_identity(self) -> str: ...
    def get_meta(self, name: str) -> str | None: ...
    def set_meta(self, name: str, value: str) -> None: ...
    def compact(self, epoch: int) -> int: ...
    def verify(self) -> Verified: ...
    def discard_after(self, epoch: int) -> None: ...
    def state_bytes(self) -> tuple[int, int]: ...
    def close(self) -> None: ...


def location_of(ctx: Any) -> StorageLocation | None:
    """The job's object-store folder, or None for the SQLite store (ctx: a JobContext, or any object with
    `checkpoint_path`, as tests build)."""
    return getattr(ctx, "checkpoint_location", None)


def open_checkpoint_store(ctx: Any) -> CheckpointStorage:
    location = location_of(ctx)
    if location is None:
        return CheckpointStore(ctx.checkpoint_path)
    return ObjectCheckpointStore(ObjectStore(location))


def refusal_of(ctx: Any, expected: str, process: str) -> str | None:
    """Why worker `process` cannot take part in the job's checkpoints, or None (see store_refusal)."""
    location = location_of(ctx)
    if location is None:
        return store_refusal(ctx.checkpoint_path, expected, process)
    try:
        seen = ObjectCheckpointStore(ObjectStore(location)).get_meta(STORE_ID)
    except StorageError as exc:
        return (f"worker {process} cannot reach the job's checkpoint storage {location.url}: {exc}. Give this "
                "worker the store's endpoint and credentials (the AWS environment variables or config files, "
                "docs/CHECKPOINTS.md)")
    if seen == expected:
        return None
    detail = "it holds no store of a driver" if seen is None else "it holds another driver's store"
    return (f"worker {process} does not see the driver's checkpoint store at {location.url}: {detail}. Point the "
            "worker at the same endpoint as the driver (AWS_ENDPOINT_URL, or the URL's endpoint_override)")


def delete_checkpoints(ctx: Any) -> None:
    """A fresh start: forget every checkpoint an earlier run of the job left."""
    location = location_of(ctx)
    if location is None:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{ctx.checkpoint_path}{suffix}").unlink(missing_ok=True)
        return
    objects = ObjectStore(location)
    objects.delete(info.name for info in objects.list())
