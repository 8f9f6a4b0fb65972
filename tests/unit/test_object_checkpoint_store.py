"""The object store's own promises (its shared contract with the SQLite store is in test_checkpoint_store.py):
objects are never rewritten, a manifest names every object its checkpoint needs, damage is found on read and
names the object and the epoch, and compaction deletes only what nothing names. On a local folder here; on a
real S3 server in tests/integration/test_object_checkpoints.py."""

from __future__ import annotations

import pytest

from esault.checkpoint.object_store import ObjectCheckpointStore
from esault.checkpoint.store import bucket_of, instance_slot, pack_entries
from esault.errors import StoreDamaged
from esault.keyhash import KEY_SPACE_MAX, key_hash
from esault.storage import ObjectStore, StorageLocation
from esault.transport.codec import encode


def rows(states: dict) -> list[tuple[int, bytes]]:
    buckets: dict[int, list] = {}
    for key, state in states.items():
        buckets.setdefault(bucket_of(key_hash(key)), []).extend((key, state))
    return [(b, pack_entries(flat)) for b, flat in buckets.items()]


def store_at(tmp_path, compact_parts: int = 1) -> ObjectCheckpointStore:
    return ObjectCheckpointStore(ObjectStore(StorageLocation.parse(str(tmp_path / "store"))), compact_parts)


def three(store: ObjectCheckpointStore) -> ObjectCheckpointStore:
    for epoch in (1, 2, 3):
        store.write_states("count", epoch, 0, rows({"a": epoch}))
        store.write_states("count", epoch, 1, rows({f"k{epoch}": epoch}))
        store.complete(epoch, "checkpoint", {"src": {0: epoch}})
    return store


def contents(store: ObjectCheckpointStore) -> dict[str, bytes]:
    return {o.name: store.objects.get(o.name) for o in store.objects.list() if not o.name.startswith("meta/")}


def test_no_object_is_ever_rewritten_and_each_manifest_names_everything_its_checkpoint_needs(tmp_path):
    store = three(store_at(tmp_path, compact_parts=100))
    before = contents(store)
    store.write_states("count", 4, 0, rows({"a": 4}))
    store.complete(4, "checkpoint", {})
    after = contents(store)
    assert {n: after[n] for n in before} == before, "an object changed in place"
    fresh = ObjectCheckpointStore(ObjectStore(store.objects.location))  # another process: reads only manifests
    assert fresh.read_range("count", 4, 0, KEY_SPACE_MAX) == {"a": 4, "k1": 1, "k2": 2, "k3": 3}
    assert fresh.read_range("count", 2, 0, KEY_SPACE_MAX) == {"a": 2, "k1": 1, "k2": 2}


def test_a_damaged_object_fails_the_restore_naming_it_and_its_epoch_and_offers_one_without_it(tmp_path):
    store = three(store_at(tmp_path))
    part = next(o.name for o in store.objects.list("parts/e000000000003"))
    path = tmp_path / "store" / part
    path.write_bytes(path.read_bytes()[:-1] + b"\x00")
    fresh = ObjectCheckpointStore(ObjectStore(store.objects.location))
    with pytest.raises(StoreDamaged, match=rf"checkpoint 3 cannot be restored: its state object .*{part} .*"
                                           r"fails its checksum; the newest checkpoint that does not need it is 2: "
                                           r"restore it with --restore-from 2"):
        fresh.read_range("count", 3, 0, KEY_SPACE_MAX)
    assert fresh.read_range("count", 2, 0, KEY_SPACE_MAX) == {"a": 2, "k1": 1, "k2": 2}


def test_a_missing_object_spoils_exactly_the_checkpoints_whose_manifests_name_it(tmp_path):
    store = three(store_at(tmp_path, compact_parts=100))
    part = next(o.name for o in store.objects.list("parts/e000000000002") if ".w1." in o.name)  # k2: needed by 2, 3
    (tmp_path / "store" / part).unlink()
    verified = ObjectCheckpointStore(ObjectStore(store.objects.location)).verify()
    assert set(verified.damage) == {2, 3} and "is missing" in verified.damage[2]
    assert verified.newest_intact().epoch == 1
    with pytest.raises(StoreDamaged, match=r"checkpoint 3 cannot be restored: .* is missing; the newest checkpoint "
                                           r"that does not need it is 1"):
        store.read_range("count", 3, 0, KEY_SPACE_MAX)


def test_a_changed_manifest_is_damage_of_its_checkpoint_only(tmp_path):
    store = three(store_at(tmp_path))
    path = tmp_path / "store" / "manifests" / "e000000000003.manifest"
    path.write_bytes(path.read_bytes().replace(b"checkpoint", b"checkpoinT"))
    verified = ObjectCheckpointStore(ObjectStore(store.objects.location)).verify()
    assert set(verified.damage) == {3} and "manifest of checkpoint 3" in verified.damage[3]
    assert verified.newest_intact().epoch == 2


def test_compaction_deletes_what_no_manifest_names_and_keeps_every_retained_checkpoint_whole(tmp_path):
    store = store_at(tmp_path)
    for epoch in range(1, 7):
        store.write_states("count", epoch, 0, rows({"a": epoch, f"k{epoch}": epoch}))
        store.write_states("tally", epoch, 0, [(instance_slot(0), encode(epoch))])
        if epoch != 4:  # epoch 4 never completes: its parts are garbage once a later one did
            store.complete(epoch, "savepoint" if epoch == 2 else "checkpoint", {})
    store.compact(5)  # retained: 5 and 6; savepoint 2 stays
    assert [c.epoch for c in store.completed()] == [2, 5, 6]
    assert not store.objects.list("parts/e000000000004")
    for epoch in (7, 8):  # manifests after the compaction name the merged objects
        store.write_states("count", epoch, 0, rows({"a": epoch}))
        store.complete(epoch, "checkpoint", {})
        store.compact(epoch - 1)
    assert store.objects.list("compacted")
    fresh = ObjectCheckpointStore(ObjectStore(store.objects.location))
    assert fresh.verify().damage == {}
    assert fresh.read_range("count", 2, 0, KEY_SPACE_MAX) == {"a": 2, "k1": 1, "k2": 2}
    assert fresh.read_range("count", 8, 0, KEY_SPACE_MAX) == {"a": 8, **{f"k{e}": e for e in (1, 2, 3, 5, 6)}}
    assert fresh.read_slot("tally", 8, instance_slot(0)) == 6
    needed = {r.name for e in (2, 7, 8) for r in fresh._manifest(e)[1]}
    needed |= {r.name for refs in store._live_parts().values() for r in refs}  # what the next manifest names
    stored = {o.name for o in store.objects.list() if o.name.startswith(("parts/", "compacted/"))}
    assert stored == needed, f"garbage left: {sorted(stored - needed)}"


def test_a_part_of_a_checkpoint_still_being_written_survives_a_compaction(tmp_path):
    store = three(store_at(tmp_path))
    store.write_states("count", 4, 0, rows({"a": 4}))  # an SPU wrote epoch 4; the driver has not completed it
    store.compact(3)
    store.complete(4, "checkpoint", {})
    assert store.read_range("count", 4, 0, KEY_SPACE_MAX)["a"] == 4


def test_the_driver_sees_what_each_spu_wrote_by_listing_the_epoch(tmp_path):
    store = store_at(tmp_path)
    store.write_states("count", 1, 7, rows({"a": 1, "b": 2}))
    store.write_states("count", 1, 8, rows({"c": 1}))
    expected = {7: len(rows({"a": 1, "b": 2})), 8: 1}
    assert store.rows_by_writer(1) == expected
