"""CheckpointStore: what a restore reads, across processes' rows of completed and abandoned epochs."""

from __future__ import annotations

import multiprocessing
import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pytest

from esault.checkpoint.object_store import ObjectCheckpointStore
from esault.checkpoint.store import BUCKET_BITS, CheckpointStore, bucket_of, instance_slot, pack_entries
from esault.storage import ObjectStore, StorageLocation
from esault.errors import ConfigError, StoreDamaged
from esault.keyhash import KEY_SPACE_MAX, key_hash
from esault.transport.codec import encode


@pytest.fixture(params=["sqlite", "objects"])
def open_store(request):
    """The contract of both stores: the SQLite file, and the object store's layout (on a local folder here;
    tests/integration/test_object_checkpoints.py runs it on a real S3 server). The object store merges parts
    at every compaction here (compact_parts=1), so the tests reach its merge."""
    def open_(path):
        if request.param == "sqlite":
            return CheckpointStore(path)
        return ObjectCheckpointStore(ObjectStore(StorageLocation.parse(f"{path}.objects")), compact_parts=1)
    return open_


def rows(states: dict) -> list[tuple[int, bytes]]:
    """The (bucket, entries) rows an SPU writes for `states`."""
    buckets: dict[int, list] = {}
    for key, state in states.items():
        buckets.setdefault(bucket_of(key_hash(key)), []).extend((key, state))
    return [(b, pack_entries(flat)) for b, flat in buckets.items()]


def restored(store: CheckpointStore, unit: str, epoch: int, lo: int = 0, hi: int = KEY_SPACE_MAX) -> dict:
    return store.read_range(unit, epoch, lo, hi)


def test_a_restore_reads_each_keys_latest_row_of_a_completed_epoch_only(open_store, tmp_path):
    store = open_store(tmp_path / "c.sqlite")
    store.write_states("count", 1, 0, rows({"a": 1, "b": 1}))
    store.complete(1, "checkpoint", {"src": {0: 10}})
    store.write_states("count", 2, 0, rows({"a": 2}))  # epoch 2 never completes (a worker died)
    store.write_states("count", 3, 0, rows({"b": 5}))
    store.complete(3, "checkpoint", {"src": {0: 30}})
    assert restored(store, "count", 1) == {"a": 1, "b": 1}
    assert restored(store, "count", 3) == {"a": 1, "b": 5}, "the abandoned epoch 2 is invisible"
    assert store.latest().epoch == 3 and store.latest().positions == {"src": {0: 30}}
    assert store.next_epoch() == 4


def test_next_epoch_is_above_rows_of_epochs_that_never_completed(open_store, tmp_path):
    store = open_store(tmp_path / "c.sqlite")
    store.write_states("count", 7, 0, rows({"a": 1}))
    assert store.next_epoch() == 8


def test_instance_rows_are_outside_every_key_range(open_store, tmp_path):
    store = open_store(tmp_path / "c.sqlite")
    store.write_states("sink", 1, 5, [(instance_slot(2), encode({"n": 4}))])
    store.complete(1, "checkpoint", {})
    assert store.read_range("sink", 1, 0, KEY_SPACE_MAX) == {}
    assert store.read_slot("sink", 1, instance_slot(2)) == {"n": 4}
    assert store.read_slot("sink", 1, instance_slot(0)) is None


def test_a_checkpoint_records_which_instances_of_each_non_keyed_bolt_it_holds(open_store, tmp_path):
    store = open_store(tmp_path / "c.sqlite")
    store.complete(1, "checkpoint", {"src": {0: 10}}, {"tally": {3, 0}})
    store.complete(2, "savepoint", {"src": {0: 20}})
    assert store.get(1).instances == {"tally": [0, 3]} and store.get(1).positions == {"src": {0: 10}}
    assert store.get(2).instances == {} and store.latest().positions == {"src": {0: 20}}
    assert open_store(tmp_path / "c.sqlite").verify().checkpoints[0].instances == {"tally": [0, 3]}


def test_a_manifest_of_an_older_store_reads_as_positions_with_no_instances_recorded(tmp_path):
    store = CheckpointStore(tmp_path / "c.sqlite")
    store.complete(1, "checkpoint", {})
    with store._db:  # what an esault before the instance record wrote: the positions map alone
        store._db.execute("UPDATE checkpoints SET positions = ?, checksum = NULL WHERE epoch = 1",
                          (encode({"src": {0: 10}}),))
    point = store.get(1)
    assert point.positions == {"src": {0: 10}} and point.instances is None and not point.input_ended


def test_a_checkpoint_records_whether_the_input_had_ended_and_an_older_manifest_reads_as_not(tmp_path):
    store = CheckpointStore(tmp_path / "c.sqlite")
    store.complete(1, "checkpoint", {"src": {0: 10}}, {"tally": {0}})
    store.complete(2, "final", {"src": {0: 20}}, {"tally": {0}}, input_ended=True)
    assert not store.get(1).input_ended and store.get(2).input_ended
    assert [c.input_ended for c in CheckpointStore(tmp_path / "c.sqlite").verify().checkpoints] == [False, True]
    with store._db:  # what an esault before the flag wrote: [positions, instances]
        store._db.execute("UPDATE checkpoints SET positions = ?, checksum = NULL WHERE epoch = 2",
                          (encode([{"src": {0: 20}}, {"tally": [0]}]),))
    assert not store.get(2).input_ended and store.get(2).instances == {"tally": [0]}


KEYS = [f"k{i}" for i in range(400)] + [("pair", i) for i in range(50)]
"""Enough keys that buckets hold several (400 keys over 4096 buckets share some), str and tuple keys."""

BOUNDS = st.one_of(st.integers(0, KEY_SPACE_MAX), st.builds(
    lambda key, d: min(max(key_hash(key) + d, 0), KEY_SPACE_MAX), st.sampled_from(KEYS), st.integers(-1, 1)))
"""Interval ends anywhere, and often right at a key (cutting its bucket next to it)."""


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(BOUNDS, st.booleans()), max_size=6),
       st.dictionaries(st.sampled_from(KEYS), st.integers(0, 99), max_size=60),
       st.dictionaries(st.sampled_from(KEYS), st.integers(0, 99), max_size=60),
       BOUNDS, BOUNDS)
def test_any_range_reads_the_latest_state_of_exactly_its_keys_whatever_the_writers_layout(open_store, 
        tmp_path_factory, cuts, first, second, a, b):
    """SPUs own arbitrary hash intervals (a bucket may be cut between two); a restore's range is arbitrary too."""
    store = open_store(tmp_path_factory.mktemp("c") / "c.sqlite")
    bounds = sorted({0, *(c for c, _ in cuts), KEY_SPACE_MAX + 1})
    for epoch, states in ((1, first), (2, second)):
        for writer, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
            store.write_states("u", epoch, writer, rows({k: v for k, v in states.items() if lo <= key_hash(k) < hi}))
        store.complete(epoch, "checkpoint", {})
    lo, hi = min(a, b), max(a, b)
    expected = {k: v for k, v in {**first, **second}.items() if lo <= key_hash(k) <= hi}
    assert store.read_range("u", 2, lo, hi) == expected
    assert store.read_range("u", 1, lo, hi) == {k: v for k, v in first.items() if lo <= key_hash(k) <= hi}


def test_a_range_that_cuts_a_bucket_next_to_a_key_excludes_exactly_the_keys_outside_it(open_store, tmp_path):
    store = open_store(tmp_path / "c.sqlite")
    store.write_states("u", 1, 0, rows({k: 1 for k in KEYS}))
    store.complete(1, "checkpoint", {})
    for key in KEYS[::9]:
        h = key_hash(key)
        assert store.read_range("u", 1, h, h) == {key: 1}
        below = {k for k in KEYS if key_hash(k) < h}
        assert set(store.read_range("u", 1, 0, h - 1)) == below
        assert set(store.read_range("u", 1, h + 1, KEY_SPACE_MAX)) == set(KEYS) - below - {key}


def test_a_parked_key_reads_its_latest_completed_entry_among_its_buckets_neighbours(open_store, tmp_path):
    store = open_store(tmp_path / "c.sqlite")
    neighbours = [k for k in KEYS if bucket_of(key_hash(k)) == bucket_of(key_hash(KEYS[0]))]
    store.write_states("count", 1, 0, rows({k: {"n": 1} for k in [KEYS[0], *neighbours, "other"]}))
    store.complete(1, "checkpoint", {})
    store.write_states("count", 2, 0, rows({KEYS[0]: {"n": 2}}))
    store.complete(2, "checkpoint", {})
    store.write_states("count", 3, 0, rows({KEYS[0]: {"n": 3}}))  # never completes
    assert store.read_key("count", KEYS[0]) == (True, {"n": 2})
    assert store.read_key("count", "other") == (True, {"n": 1})
    assert store.read_key("count", "never-seen") == (False, None)
    assert store.read_key("count", KEYS[0], epoch=2) == (True, {"n": 2})  # a checkpoint the SPU knows completed
    assert store.read_key("count", KEYS[0], epoch=1) == (True, {"n": 1})
    assert store.read_key("count", "other", epoch=2) == (True, {"n": 1})  # unchanged since: an older part has it


def test_compaction_leaves_one_row_per_bucket_between_savepoints(tmp_path):
    store = CheckpointStore(tmp_path / "c.sqlite")
    states = {k: 0 for k in KEYS}
    buckets = len({bucket_of(key_hash(k)) for k in KEYS})
    assert buckets < len(KEYS), f"the keys must share buckets for this test (BUCKET_BITS={BUCKET_BITS})"
    for epoch in range(1, 11):
        store.write_states("u", epoch, 0, rows({k: epoch for k in states}))
        store.complete(epoch, "savepoint" if epoch == 4 else "checkpoint", {})
    store.compact(10)
    assert store.state_bytes()[0] == 2 * buckets, "epochs 1-4 merge into one row per bucket, 5-10 into another"
    assert restored(store, "u", 4) == {k: 4 for k in KEYS}
    assert restored(store, "u", 10) == {k: 10 for k in KEYS}


def test_a_file_in_the_older_row_per_key_format_is_refused_with_the_way_out(tmp_path):
    import sqlite3
    path = tmp_path / "c.sqlite"
    sqlite3.connect(path).execute("CREATE TABLE states (unit TEXT, key BLOB, epoch INTEGER)").connection.close()
    with pytest.raises(ConfigError, match="older esault.*--fresh"):
        CheckpointStore(path)


def filled_store(open_store, path, epochs) -> tuple[CheckpointStore, list[int]]:
    """A store with one epoch per (states, completes, savepoint) of `epochs`; and the epochs completed."""
    store = open_store(path)
    done = []
    for epoch, (states, completes, savepoint) in enumerate(epochs, start=1):
        store.write_states("u", epoch, epoch % 3, rows(states))
        if states:
            store.write_states("u", epoch, 9, [(instance_slot(0), encode(sum(states.values())))])
        if completes:
            store.complete(epoch, "savepoint" if savepoint else "checkpoint", {})
            done.append(epoch)
    return store, done


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.dictionaries(st.sampled_from(KEYS), st.integers(0, 99), max_size=30),
                          st.booleans(), st.booleans()), min_size=1, max_size=8))
def test_compaction_never_changes_what_any_completed_checkpoint_or_savepoint_restores(open_store, tmp_path_factory, epochs):
    store, done = filled_store(open_store, tmp_path_factory.mktemp("c") / "c.sqlite", epochs)
    if not done:
        return
    latest = done[-1]
    keep = [e for e in done if e == latest or store.get(e).kind == "savepoint"]
    before = {e: (restored(store, "u", e), store.read_slot("u", e, instance_slot(0))) for e in keep}
    store.compact(latest)
    assert {e: (restored(store, "u", e), store.read_slot("u", e, instance_slot(0))) for e in keep} == before


def _write(path: str, unit: str, start: int) -> None:
    store = CheckpointStore(path)
    for epoch in range(start, start + 20):
        store.write_states(unit, epoch, 0, rows({f"{unit}-{epoch}": epoch}))
    store.close()


def test_processes_writing_the_same_file_at_once_lose_no_row(tmp_path):
    path = str(tmp_path / "c.sqlite")
    CheckpointStore(path).close()
    procs = [multiprocessing.get_context("spawn").Process(target=_write, args=(path, f"u{i}", 1)) for i in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    store = CheckpointStore(path)
    for epoch in range(1, 21):
        store.complete(epoch, "checkpoint", {})
    assert all(len(restored(store, f"u{i}", 20)) == 20 for i in range(3))


def three_checkpoints(path, open_store=CheckpointStore) -> CheckpointStore:
    """Epochs 1-3, each changing keys a and b (every checkpoint reads rows of all three epochs at most)."""
    store = open_store(path)
    for epoch in (1, 2, 3):
        store.write_states("count", epoch, 0, rows({"a": epoch, "b": 10 * epoch}))
        store.write_states("count", epoch, 1, rows({f"k{epoch}": epoch}))
        store.complete(epoch, "checkpoint", {"src": {0: 100 * epoch}})
    return store


def test_every_checkpoint_of_an_undamaged_store_verifies_intact(open_store, tmp_path):
    verified = three_checkpoints(tmp_path / "c.sqlite", open_store).verify()
    assert verified.damage == {} and [c.epoch for c in verified.checkpoints] == [1, 2, 3]
    assert verified.newest_intact().epoch == 3


def test_a_changed_state_row_spoils_its_checkpoint_and_every_later_one(tmp_path):
    store = three_checkpoints(tmp_path / "c.sqlite")
    store._db.execute("UPDATE buckets SET entries = ? WHERE epoch = 2 AND writer = 1", (pack_entries(["k2", 99]),))
    verified = store.verify()
    assert "a state row of checkpoint 2 (unit 'count'" in verified.damage[2]
    assert verified.spoiled(3) == verified.damage[2] and verified.spoiled(1) is None
    assert verified.newest_intact().epoch == 1


def test_a_lost_state_row_is_caught_by_its_manifests_digest(tmp_path):
    store = three_checkpoints(tmp_path / "c.sqlite")
    listed = store._db.execute("SELECT COUNT(*) FROM buckets WHERE epoch = 3").fetchone()[0]
    store._db.execute("DELETE FROM buckets WHERE epoch = 3 AND writer = 1")
    assert store.verify().damage == {3: f"checkpoint 3 has {listed - 1} state rows where its manifest lists {listed}"}


def test_a_changed_manifest_spoils_its_checkpoint(tmp_path):
    store = three_checkpoints(tmp_path / "c.sqlite")
    store._db.execute("UPDATE checkpoints SET positions = ? WHERE epoch = 3", (encode({"src": {0: 1}}),))
    verified = store.verify()
    assert verified.damage == {3: "the manifest of checkpoint 3 fails its checksum"}
    assert verified.newest_intact().epoch == 2 and verified.newest_recorded == 3


def test_discarding_damaged_checkpoints_never_reuses_their_epochs(open_store, tmp_path):
    store = three_checkpoints(tmp_path / "c.sqlite", open_store)
    store.write_states("count", 4, 0, rows({"a": 4}))  # an epoch that never completed
    store.discard_after(1)
    assert [c.epoch for c in store.completed()] == [1] and store.verify().damage == {}
    assert restored(store, "count", 1) == {"a": 1, "b": 10, "k1": 1}
    store.close()
    assert open_store(tmp_path / "c.sqlite").next_epoch() == 5


@pytest.mark.parametrize("damage", ["truncated", "garbage"])
def test_a_store_sqlite_cannot_read_is_refused_naming_the_file_and_the_ways_out(tmp_path, damage):
    path = tmp_path / "c.sqlite"
    three_checkpoints(path).close()
    if damage == "truncated":
        size = path.stat().st_size
        with open(path, "r+b") as fh:
            fh.truncate(size // 2)
    else:
        path.write_bytes(os.urandom(8192))
    with pytest.raises(StoreDamaged, match=rf"checkpoint store {path} is damaged: .*--fresh.*--restore-from"):
        CheckpointStore(path).verify()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.dictionaries(st.sampled_from(KEYS), st.integers(0, 99), max_size=30),
                          st.booleans(), st.booleans()), min_size=1, max_size=8), st.integers(0, 7))
def test_compaction_at_any_retained_checkpoint_keeps_every_recorded_one_exact_and_verified(open_store, 
        tmp_path_factory, epochs, pick):
    store, done = filled_store(open_store, tmp_path_factory.mktemp("c") / "c.sqlite", epochs)
    if not done:
        return
    oldest_retained = done[pick % len(done)]
    before = {e: (restored(store, "u", e), store.read_slot("u", e, instance_slot(0))) for e in done}
    savepoints = {c.epoch for c in store.completed() if c.kind == "savepoint"}
    store.compact(oldest_retained)
    kept = [c.epoch for c in store.completed()]
    assert [e for e in done if e >= oldest_retained or e in savepoints] == kept
    assert {e: (restored(store, "u", e), store.read_slot("u", e, instance_slot(0))) for e in kept} == \
        {e: before[e] for e in kept}
    assert store.verify().damage == {}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.dictionaries(st.sampled_from(KEYS), st.integers(0, 99), max_size=30),
                          st.booleans(), st.booleans()), min_size=1, max_size=8),
       st.dictionaries(st.sampled_from(KEYS), st.integers(100, 199), max_size=30), st.integers(0, 7))
def test_a_checkpoint_after_a_compaction_restores_what_it_would_without_one(
        open_store, tmp_path_factory, epochs, last, pick):
    """The object store's compaction merges parts for the manifests after it: the next checkpoint reads them."""
    store, done = filled_store(open_store, tmp_path_factory.mktemp("c") / "c.sqlite", epochs)
    if done:
        store.compact(done[pick % len(done)])
    epoch = store.next_epoch()
    store.write_states("u", epoch, 0, rows(last))
    store.write_states("u", epoch, 9, [(instance_slot(0), encode(-1))])
    store.complete(epoch, "checkpoint", {})
    expected: dict = {}
    for e in done:
        expected.update(epochs[e - 1][0])
    expected.update(last)
    assert restored(store, "u", epoch) == expected
    assert store.read_slot("u", epoch, instance_slot(0)) == -1
    assert store.verify().damage == {}
