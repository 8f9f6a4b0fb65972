"""ObjectStore: immutable named objects under a StorageLocation, the one primitive an object store gives.

An object is written once, whole (a local file: temporary name, fsync, rename, directory fsync; S3: one
upload that becomes visible only when complete) and never rewritten in place; readers see it whole or not at
all. Names are '/'-separated paths relative to the location's root. Every failure of the store is a
StorageError naming the location, the object and what the store said; a missing object is ObjectMissing.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from esault.errors import EsaultError
from esault.storage.location import StorageLocation

__all__ = ["ObjectInfo", "ObjectMissing", "ObjectStore", "StorageError"]


class StorageError(EsaultError, OSError):
    """The durable store failed an operation (unreachable, refused, bad credentials, a missing bucket)."""


class ObjectMissing(StorageError, FileNotFoundError):
    """An object that should be there is not."""


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    name: str
    size: int
    mtime_ns: int = 0


class ObjectStore:
    """Objects under one location. Thread-safe: each thread gets its own filesystem client."""

    def __init__(self, location: StorageLocation | str) -> None:
        self.location = location if isinstance(location, StorageLocation) else StorageLocation.parse(location)
        self._local = threading.local()

    def __repr__(self) -> str:
        return f"ObjectStore({self.location.url!r})"

    @property
    def url(self) -> str:
        return self.location.url

    def _fs(self) -> Any:
        fs = getattr(self._local, "fs", None)
        if fs is None:
            fs = self._local.fs = self.location.filesystem()
        return fs

    def _path(self, name: str) -> str:
        if not name or name.startswith("/") or ".." in name.split("/"):
            raise ValueError(f"an object name is a relative path without '..', got {name!r}")
        return f"{self.location.root.rstrip('/')}/{name}"

    def where(self, name: str) -> str:
        """The object's full address, for messages."""
        return f"{self.location.url.rstrip('/')}/{name}"

    # --- the operations ----------------------------------------------------------------

    def put(self, name: str, data: bytes) -> None:
        """Write object `name` whole and durably; an existing one of that name is replaced (callers only ever
        write new names, or the same bytes again)."""
        path = self._path(name)
        try:
            if self.location.is_local:
                _put_local(Path(path), data)
            else:
                with self._fs().open_output_stream(path, metadata={}) as out:
                    out.write(data)
        except OSError as exc:
            raise self._error("write", name, exc) from None

    def get(self, name: str) -> bytes:
        path = self._path(name)
        try:
            if self.location.is_local:
                return Path(path).read_bytes()
            with self._fs().open_input_file(path) as whole:  # one ranged GET of the whole object
                return whole.read()
        except FileNotFoundError:
            raise ObjectMissing(f"object {self.where(name)} is missing") from None
        except OSError as exc:
            if "does not exist" in str(exc) or "NoSuchKey" in str(exc):
                raise ObjectMissing(f"object {self.where(name)} is missing") from None
            raise self._error("read", name, exc) from None

    def exists(self, name: str) -> bool:
        from pyarrow import fs

        try:
            return self._fs().get_file_info(self._path(name)).type == fs.FileType.File
        except OSError as exc:
            raise self._error("look up", name, exc) from None

    def list(self, prefix: str = "") -> list[ObjectInfo]:
        """Every object whose name starts with folder `prefix` ('' : all), sorted by name."""
        from pyarrow import fs

        base = self.location.root.rstrip("/")
        folder = f"{base}/{prefix.strip('/')}" if prefix.strip("/") else base
        try:
            found = self._fs().get_file_info(fs.FileSelector(folder, recursive=True, allow_not_found=True))
        except OSError as exc:
            raise self._error("list", prefix or ".", exc) from None
        out = []
        for info in found:
            if info.type != fs.FileType.File or info.path.endswith(".tmp"):
                continue
            name = info.path[len(base) + 1:]
            out.append(ObjectInfo(name, int(info.size or 0), int(info.mtime_ns or 0)))
        return sorted(out, key=lambda o: o.name)

    def delete(self, names: Iterable[str]) -> None:
        """Delete objects; one already gone is no error."""
        for name in names:
            try:
                if self.location.is_local:
                    Path(self._path(name)).unlink(missing_ok=True)
                else:
                    self._fs().delete_file(self._path(name))
            except FileNotFoundError:
                continue
            except OSError as exc:
                if "does not exist" in str(exc) or "NoSuchKey" in str(exc):
                    continue
                raise self._error("delete", name, exc) from None

    def check_writable(self, wait: float = 0.0) -> None:
        """Write, read back and delete a probe object: a store that refuses (bad credentials, a missing
        bucket) fails here, at a job's start, naming the location and the error. A store that cannot be
        reached yet (a container still starting, a name not resolving yet) is asked again for up to `wait`
        seconds; one that answers with a refusal is not."""
        import time

        probe = "_esault_probe"
        deadline = time.monotonic() + wait
        while True:
            try:
                self.put(probe, b"ok")
                break
            except StorageError as exc:
                if not unreachable(exc) or time.monotonic() >= deadline:
                    raise
                time.sleep(0.5)  # a bounded retry of a store that is not up yet, not synchronisation
        if self.get(probe) != b"ok":
            raise StorageError(f"{self.where(probe)} reads back other bytes than were written")
        self.delete([probe])

    def _error(self, what: str, name: str, exc: OSError) -> StorageError:
        detail = " ".join(str(exc).split())  # one line: the SDK's message may span several
        return StorageError(f"the storage at {self.location.url} could not {what} {name!r}: {detail}")


def unreachable(exc: BaseException) -> bool:
    """The store did not answer at all (no connection, a name that does not resolve), as opposed to a refusal."""
    text = str(exc)
    return any(sign in text for sign in ("NETWORK_CONNECTION", "Couldn't connect", "Could not resolve",
                                         "Connection refused", "Timeout was reached"))


def _put_local(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    with open(temporary, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    os.replace(temporary, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
