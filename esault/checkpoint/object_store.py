"""ObjectCheckpointStore: the checkpoint store on immutable objects (S3 and S3-compatible, or a local folder).

The same contract as the SQLite store (esault.checkpoint.store: state at checkpoint E is, per key, its
entry in the newest state of a completed epoch <= E; any layout reads any key range), laid out for a store
where objects are written once and never changed, and where nothing is shared but the network:

    <root>/<job>/parts/e<E>/<unit>/<part>        one object per SPU, unit and write (esault.checkpoint.parts)
    <root>/<job>/compacted/e<C>/<unit>/<part>    the driver's merge of a unit's state up to checkpoint C
    <root>/<job>/manifests/e<E>.manifest         checkpoint E: written last, by the driver, in one PUT
    <root>/<job>/meta/<name>                     the topology's fingerprint, the store's identity

SPUs write their parts; the driver lists epoch E's folder once every SPU acked, and writes the manifest:
every part it needs, E's own and the older ones that still hold the newest state of unchanged keys (Flink's
shared incremental state), each with its size and CRC-32. A checkpoint is whatever a manifest names; parts
of an epoch that never completed are garbage. Compaction merges a unit's many small parts up to the oldest
retained checkpoint into a few (for the manifests after it) and deletes only what no remaining manifest (or
the next one) names. Every object is checked against its manifest's CRC when it is read: a damaged or
missing one fails the restore naming it and its epoch, and offers the newest checkpoint that does not need it.
"""

from __future__ import annotations

import secrets
import threading
import time
import zlib
from collections import OrderedDict
from typing import Any, Iterable

import msgpack

from esault.checkpoint.parts import (PartRef, decode_part, encode_part, epoch_folder, folder_unit,
                                     parse_part_name, part_name, unit_folder)
from esault.checkpoint.store import STORE_ID, Completed, Verified, bucket_of
from esault.errors import StoreDamaged
from esault.keyhash import KEY_SPACE_MAX, key_hash
from esault.storage.objects import ObjectMissing, ObjectStore
from esault.transport.codec import decode, encode

__all__ = ["ObjectCheckpointStore"]

MANIFEST_VERSION = 1
COMPACT_PARTS = 8
"""A unit's parts up to the oldest retained checkpoint are merged once there are more than this many."""
COMPACTED_OBJECT_BYTES = 8 << 20
"""A compacted object holds buckets up to about this many bytes of entries: restores read only what they need."""
_CACHE_BYTES = 64 << 20


class _ObjectCache:
    """Immutable objects read in this process, by (store, name): SPUs restoring neighbouring ranges of one
    part read it once. LRU, bounded in bytes."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._size = 0
        self._items: OrderedDict[tuple[str, str], bytes] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[str, str]) -> bytes | None:
        with self._lock:
            data = self._items.get(key)
            if data is not None:
                self._items.move_to_end(key)
            return data

    def put(self, key: tuple[str, str], data: bytes) -> None:
        if len(data) > self._limit // 4:
            return
        with self._lock:
            if key in self._items:
                return
            self._items[key] = data
            self._size += len(data)
            while self._size > self._limit:
                _, old = self._items.popitem(last=False)
                self._size -= len(old)


_CACHE = _ObjectCache(_CACHE_BYTES)


class ObjectCheckpointStore:
    """One job's checkpoints under `objects` (its folder). The driver's instance alone writes manifests,
    meta and compacted objects and deletes; SPUs' instances write parts and read."""

    def __init__(self, objects: ObjectStore, compact_parts: int = COMPACT_PARTS) -> None:
        self.objects = objects
        self.compact_parts = compact_parts
        self.path = objects.url  # what messages name
        self.local_dir = None  # no local disk to watch for free space
        self._manifests: dict[int, tuple[Completed, list[PartRef]]] = {}
        self._live: dict[str, list[PartRef]] | None = None  # the driver: what the next manifest builds on
        self._live_epoch: int | None = None
        self._listing: tuple[int, list[PartRef]] | None = None

    # --- SPUs: parts -------------------------------------------------------------------

    def write_states(self, unit: str, epoch: int, writer: int, rows: Iterable[tuple[int, bytes]]) -> None:
        """Store (bucket, entries) rows SPU `writer` made of `unit` for `epoch`: one new object."""
        rows = list(rows)
        if not rows:
            return
        data, lo, hi, crc = encode_part(rows)
        name = f"{epoch_folder('parts', epoch)}/{unit_folder(unit)}/{part_name(writer, lo, hi, len(rows), crc)}"
        self.objects.put(name, data)

    def read_range(self, unit: str, epoch: int, lo: int, hi: int) -> dict[Any, Any]:
        """key -> state of `unit`'s keys hashing into [lo, hi], as of completed checkpoint `epoch`."""
        lo, hi = max(lo, 0), min(hi, KEY_SPACE_MAX)
        first, last = bucket_of(lo), bucket_of(hi)
        out: dict[Any, Any] = {}
        for ref in self._refs(unit, epoch):
            if not ref.covers(first, last):
                continue
            for bucket, blob in self._rows(ref, epoch):
                if bucket < first or bucket > last:
                    continue
                flat = decode(blob)
                pairs = zip(flat[::2], flat[1::2])
                if bucket == first or bucket == last:
                    out.update((k, s) for k, s in pairs if lo <= key_hash(k) <= hi)
                else:
                    out.update(pairs)
        return out

    def read_slot(self, unit: str, epoch: int, slot: int) -> Any:
        """A non-keyed instance's state (slot = instance_slot(i)) as of completed checkpoint `epoch`, or None."""
        for ref in reversed(self._refs(unit, epoch)):
            if ref.covers(slot, slot):
                for bucket, blob in reversed(self._rows(ref, epoch)):
                    if bucket == slot:
                        return decode(blob)
        return None

    def read_key(self, unit: str, key: Any, epoch: int | None = None) -> tuple[bool, Any]:
        """(found, state) of one key in completed checkpoint `epoch` (its manifest, read once and kept: a parked
        key waking up costs no LIST of the bucket), or in the latest completed one (one LIST)."""
        if epoch is None:
            point = self.latest()
            if point is None:
                return False, None
            epoch = point.epoch
        bucket = bucket_of(key_hash(key))
        for ref in reversed(self._refs(unit, epoch)):
            if not ref.covers(bucket, bucket):
                continue
            for b, blob in self._rows(ref, epoch):
                if b != bucket:
                    continue
                flat = decode(blob)
                for i in range(len(flat) - 2, -1, -2):
                    if flat[i] == key:
                        return True, flat[i + 1]
        return False, None

    def _refs(self, unit: str, epoch: int) -> list[PartRef]:
        manifest = self._manifest(epoch)
        if manifest is None:
            return []
        return [r for r in manifest[1] if r.unit == unit]

    def _rows(self, ref: PartRef, epoch: int) -> list[tuple[int, bytes]]:
        key = (self.objects.url, ref.name)
        data = _CACHE.get(key)
        if data is None:
            try:
                data = self.objects.get(ref.name)
            except ObjectMissing:
                raise self._damaged(ref, epoch, "is missing") from None
            if len(data) != ref.size or zlib.crc32(data) != ref.crc:
                raise self._damaged(ref, epoch, "fails its checksum")
            _CACHE.put(key, data)
        return decode_part(data)

    def _damaged(self, ref: PartRef, epoch: int, what: str) -> StoreDamaged:
        intact = [e for e, (_, refs) in sorted(self._all_manifests().items()) if ref.name not in {r.name for r in refs}]
        offer = (f"the newest checkpoint that does not need it is {intact[-1]}: restore it with --restore-from "
                 f"{intact[-1]} (JobConfig(restore_from={intact[-1]}))" if intact else
                 "no recorded checkpoint is without it: run with --fresh to start from the beginning")
        return StoreDamaged(f"checkpoint {epoch} cannot be restored: its state object {self.objects.where(ref.name)} "
                            f"(unit {ref.unit!r}, SPU {ref.writer}, epoch {ref.epoch}) {what}; {offer}")

    # --- manifests ---------------------------------------------------------------------

    def _manifest_names(self) -> dict[int, str]:
        out: dict[int, str] = {}
        for info in self.objects.list("manifests"):
            stem = info.name.rsplit("/", 1)[-1]
            if stem.startswith("e") and stem.endswith(".manifest") and stem[1:-9].isdigit():
                out[int(stem[1:-9])] = info.name
        return out

    def _manifest(self, epoch: int) -> tuple[Completed, list[PartRef]] | None:
        found = self._manifests.get(epoch)
        if found is not None:
            return found
        try:
            data = self.objects.get(_manifest_name(epoch))
        except ObjectMissing:
            return None
        found = _decode_manifest(epoch, data)
        self._manifests[epoch] = found
        return found

    def _all_manifests(self) -> dict[int, tuple[Completed, list[PartRef]]]:
        out = {}
        for epoch in self._manifest_names():
            try:
                found = self._manifest(epoch)
            except StoreDamaged:
                continue
            if found is not None:
                out[epoch] = found
        return out

    def _epoch_parts(self, epoch: int) -> list[PartRef]:
        """The parts SPUs wrote for `epoch`, as listed (one LIST: the driver's view of what exists)."""
        if self._listing is not None and self._listing[0] == epoch:
            return self._listing[1]
        folder = epoch_folder("parts", epoch)
        refs = [ref for info in self.objects.list(folder) if (ref := _ref_of(info.name, info.size, epoch)) is not None]
        self._listing = (epoch, refs)
        return refs

    def rows_by_writer(self, epoch: int) -> dict[int, int]:
        """How many state rows each SPU wrote for `epoch`, as the driver sees them in the store."""
        self._listing = None  # a fresh LIST: what the SPUs acked must be there now
        out: dict[int, int] = {}
        for ref in self._epoch_parts(epoch):
            out[ref.writer] = out.get(ref.writer, 0) + ref.rows
        return out

    def complete(self, epoch: int, kind: str, positions: dict[str, dict[int, Any]],
                 instances: dict[str, Iterable[int]] | None = None, input_ended: bool = False) -> None:
        """Record checkpoint `epoch` as complete: its manifest, written last, in one PUT."""
        live = self._live_parts()
        refs = [r for unit_refs in live.values() for r in unit_refs] + self._epoch_parts(epoch)
        point = Completed(epoch, kind, time.time(),
                          {unit: {int(i): p for i, p in by.items()} for unit, by in positions.items()},
                          {unit: sorted(int(i) for i in ids) for unit, ids in (instances or {}).items()},
                          bool(input_ended))
        self.objects.put(_manifest_name(epoch), _encode_manifest(point, refs))
        self._manifests[epoch] = (point, refs)
        self._set_live(epoch, refs)
        self._listing = None

    def _live_parts(self) -> dict[str, list[PartRef]]:
        if self._live is None:
            point = self.latest()
            self._set_live(None if point is None else point.epoch,
                           [] if point is None else self._manifest(point.epoch)[1])
        return self._live

    def _set_live(self, epoch: int | None, refs: list[PartRef]) -> None:
        live: dict[str, list[PartRef]] = {}
        for r in refs:
            live.setdefault(r.unit, []).append(r)
        self._live, self._live_epoch = live, epoch

    def latest(self, kind: str | None = None) -> Completed | None:
        """The newest completed checkpoint (of `kind` if given) whose manifest reads; a damaged manifest is
        passed over here (verify() reports it)."""
        for epoch in sorted(self._manifest_names(), reverse=True):
            try:
                found = self._manifest(epoch)
            except StoreDamaged:
                continue
            if found is not None and (kind is None or found[0].kind == kind):
                return found[0]
        return None

    def get(self, epoch: int) -> Completed | None:
        found = self._manifest(epoch)
        return None if found is None else found[0]

    def completed(self) -> list[Completed]:
        return [point for _, (point, _) in sorted(self._all_manifests().items())]

    def next_epoch(self) -> int:
        """An epoch number above every one stored (completed or not) or discarded: never reused."""
        top = max(self._manifest_names(), default=0)
        for info in self.objects.list("parts"):
            epoch = _epoch_of(info.name)
            if epoch is not None:
                top = max(top, epoch)
        return max(top, int(self.get_meta("discarded_upto") or 0)) + 1

    # --- meta ----------------------------------------------------------------------------

    def mark_identity(self) -> str:
        """A new identity for the store (a driver's start): workers check they see it (refusal_of)."""
        identity = secrets.token_hex(8)
        self.set_meta(STORE_ID, identity)
        return identity

    def get_meta(self, name: str) -> str | None:
        try:
            return self.objects.get(f"meta/{name}").decode()
        except ObjectMissing:
            return None

    def set_meta(self, name: str, value: str) -> None:
        self.objects.put(f"meta/{name}", value.encode())

    # --- compaction and cleanup --------------------------------------------------------

    def compact(self, epoch: int) -> int:
        """Once `epoch`, the oldest retained checkpoint, is complete: drop the manifests of periodic
        checkpoints before it, merge each unit's parts up to it into compacted objects when they are many
        (the manifests after this one name those instead), and delete every object no remaining manifest and
        not the next one names. Returns how many objects went."""
        names = self._manifest_names()
        gone = [e for e in names if e < epoch and self._kind(e) != "savepoint"]
        self.objects.delete(names[e] for e in gone)
        for e in gone:
            self._manifests.pop(e, None)
        self._merge_up_to(epoch)
        return len(gone) + self._sweep()

    def _kind(self, epoch: int) -> str | None:
        try:
            found = self._manifest(epoch)
        except StoreDamaged:
            return None
        return None if found is None else found[0].kind

    def _merge_up_to(self, epoch: int) -> None:
        live = self._live_parts()
        for unit, refs in list(live.items()):
            old = [r for r in refs if r.epoch <= epoch]
            if len(old) <= self.compact_parts:
                continue
            keyed: dict[int, dict[Any, Any]] = {}
            slots: dict[int, bytes] = {}
            for ref in old:  # manifest order: oldest first, so the newest entry of each key wins
                for bucket, blob in self._rows(ref, epoch):
                    if bucket < 0:
                        slots[bucket] = blob
                    else:
                        flat = decode(blob)
                        keyed.setdefault(bucket, {}).update(zip(flat[::2], flat[1::2]))
            rows = sorted([(b, blob) for b, blob in slots.items()]
                          + [(b, encode([x for pair in state.items() for x in pair])) for b, state in keyed.items()])
            merged = [self._write_compacted(unit, epoch, chunk) for chunk in _chunks(rows)]
            live[unit] = merged + [r for r in refs if r.epoch > epoch]

    def _write_compacted(self, unit: str, epoch: int, rows: list[tuple[int, bytes]]) -> PartRef:
        data, lo, hi, crc = encode_part(rows)
        name = f"{epoch_folder('compacted', epoch)}/{unit_folder(unit)}/{part_name(-1, lo, hi, len(rows), crc)}"
        self.objects.put(name, data)
        return PartRef(name, epoch, unit, -1, lo, hi, len(rows), len(data), crc)

    def _sweep(self) -> int:
        """Delete objects nothing refers to: not a remaining manifest, not the next one (the live parts), and
        not an epoch above the newest completed (a checkpoint still being written)."""
        names = self._manifest_names()
        newest = max(names, default=0)
        needed = {r.name for _, refs in self._all_manifests().values() for r in refs}
        needed |= {r.name for refs in self._live_parts().values() for r in refs}
        doomed = []
        for folder in ("parts", "compacted"):
            for info in self.objects.list(folder):
                epoch = _epoch_of(info.name)
                if info.name not in needed and epoch is not None and epoch <= newest:
                    doomed.append(info.name)
        self.objects.delete(doomed)
        return len(doomed)

    def discard_after(self, epoch: int) -> None:
        """Forget every checkpoint and part above `epoch` (a restore of an older one, damaged ones a restore
        fell back from); their epoch numbers are never used again."""
        top = self.next_epoch() - 1
        self.set_meta("discarded_upto", str(top))
        names = self._manifest_names()
        self.objects.delete(name for e, name in names.items() if e > epoch)
        for e in [e for e in self._manifests if e > epoch]:
            del self._manifests[e]
        doomed = [info.name for folder in ("parts", "compacted") for info in self.objects.list(folder)
                  if (_epoch_of(info.name) or 0) > epoch]
        self.objects.delete(doomed)
        found = self._manifest(epoch) if epoch in names else None
        self._set_live(epoch if found else None, found[1] if found else [])
        self._listing = None

    # --- verification --------------------------------------------------------------------

    def verify(self) -> Verified:
        """Every manifest against its checksum, and every object it names against the store's listing (present,
        its size): cheap, a LIST and a GET per manifest. The objects' bytes are checked when read."""
        damage: dict[int, str] = {}
        checkpoints: list[Completed] = []
        sizes = {info.name: info.size for folder in ("parts", "compacted") for info in self.objects.list(folder)}
        for epoch in sorted(self._manifest_names()):
            try:
                found = self._manifest(epoch)
            except StoreDamaged as exc:
                damage[epoch] = str(exc)
                continue
            if found is None:
                continue
            point, refs = found
            checkpoints.append(point)
            for ref in refs:
                size = sizes.get(ref.name)
                if size != ref.size:
                    what = "is missing" if size is None else f"has {size} bytes where its manifest says {ref.size}"
                    damage[epoch] = (f"the state object {self.objects.where(ref.name)} of checkpoint {epoch} "
                                     f"(unit {ref.unit!r}, epoch {ref.epoch}) {what}")
                    break
        return ManifestVerified(self.objects.url, checkpoints, damage)

    def state_bytes(self) -> tuple[int, int]:
        """(rows, bytes) the newest checkpoint's objects hold: for the state-size measurement."""
        point = self.latest()
        if point is None:
            return 0, 0
        refs = self._manifest(point.epoch)[1]
        return sum(r.rows for r in refs), sum(r.size for r in refs)

    def close(self) -> None:
        self._manifests.clear()


class ManifestVerified(Verified):
    """verify() of an object store: each manifest names every object it needs, so damage spoils exactly the
    checkpoints that name the damaged object (not every later one, as in the SQLite store)."""

    def spoiled(self, epoch: int) -> str | None:
        return self.damage.get(epoch)


def _manifest_name(epoch: int) -> str:
    return f"manifests/e{epoch:012d}.manifest"


def _encode_manifest(point: Completed, refs: list[PartRef]) -> bytes:
    body = msgpack.packb({"epoch": point.epoch, "kind": point.kind, "completed_at": point.completed_at,
                          "positions": encode(point.positions), "instances": point.instances,
                          "input_ended": point.input_ended, "parts": [r.to_wire() for r in refs]},
                         use_bin_type=True)
    return msgpack.packb([MANIFEST_VERSION, body, zlib.crc32(body)], use_bin_type=True)


def _decode_manifest(epoch: int, data: bytes) -> tuple[Completed, list[PartRef]]:
    try:
        version, body, crc = msgpack.unpackb(data, raw=False)
        if version != MANIFEST_VERSION or zlib.crc32(body) != crc:
            raise ValueError("it fails its checksum" if version == MANIFEST_VERSION else f"version {version!r}")
        fields = msgpack.unpackb(body, raw=False, strict_map_key=False)
        if fields["epoch"] != epoch:
            raise ValueError(f"it says epoch {fields['epoch']!r}")
        positions = decode(fields["positions"]) or {}
        instances = fields["instances"]
        point = Completed(epoch, str(fields["kind"]), float(fields["completed_at"]),
                          {str(u): {int(i): p for i, p in by.items()} for u, by in positions.items()},
                          None if instances is None else {str(u): [int(i) for i in ids] for u, ids in instances.items()},
                          fields["input_ended"] is True)
        refs = [PartRef.from_wire(r) for r in fields["parts"]]
    except (ValueError, TypeError, KeyError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as exc:
        raise StoreDamaged(f"the manifest of checkpoint {epoch} ({_manifest_name(epoch)}) is damaged: {exc}") from None
    return point, refs


def _ref_of(name: str, size: int, epoch: int) -> PartRef | None:
    """The PartRef of a listed object of epoch `epoch`'s parts folder, or None (not a part)."""
    pieces = name.split("/")
    if len(pieces) != 4:
        return None
    fields = parse_part_name(pieces[3])
    if fields is None:
        return None
    return PartRef(name, epoch, folder_unit(pieces[2]), fields["writer"], fields["lo"], fields["hi"], fields["rows"],
                   size, fields["crc"])


def _epoch_of(name: str) -> int | None:
    """The epoch of an object under parts/ or compacted/ by its folder name."""
    pieces = name.split("/")
    if len(pieces) < 2 or not pieces[1].startswith("e") or not pieces[1][1:].isdigit():
        return None
    return int(pieces[1][1:])


def _chunks(rows: list[tuple[int, bytes]]) -> list[list[tuple[int, bytes]]]:
    """Consecutive buckets in objects of about COMPACTED_OBJECT_BYTES each."""
    out: list[list[tuple[int, bytes]]] = []
    size = COMPACTED_OBJECT_BYTES
    for row in rows:
        if size >= COMPACTED_OBJECT_BYTES:
            out.append([])
            size = 0
        out[-1].append(row)
        size += len(row[1])
    return out

