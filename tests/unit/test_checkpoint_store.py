"""CheckpointStore: what a restore reads, across processes' rows of completed and abandoned epochs."""

from __future__ import annotations

import multiprocessing

from hypothesis import given, settings
from hypothesis import strategies as st

from esault.checkpoint.store import CheckpointStore, instance_slot
from esault.keyhash import key_hash
from esault.transport.codec import decode, encode


def rows(states: dict) -> list[tuple[int, bytes, bytes]]:
    return [(key_hash(k), encode(k), encode(v)) for k, v in states.items()]


def restored(store: CheckpointStore, unit: str, epoch: int, lo: int = 0, hi: int = 2**63 - 1) -> dict:
    return {decode(k): decode(v) for k, v in store.read_range(unit, epoch, lo, hi).items()}


def test_a_restore_reads_each_keys_latest_row_of_a_completed_epoch_only(tmp_path):
    store = CheckpointStore(tmp_path / "c.sqlite")
    store.write_states("count", 1, rows({"a": 1, "b": 1}))
    store.complete(1, "checkpoint", {"src": {0: 10}})
    store.write_states("count", 2, rows({"a": 2}))  # epoch 2 never completes (a worker died)
    store.write_states("count", 3, rows({"b": 5}))
    store.complete(3, "checkpoint", {"src": {0: 30}})
    assert restored(store, "count", 1) == {"a": 1, "b": 1}
    assert restored(store, "count", 3) == {"a": 1, "b": 5}, "the abandoned epoch 2 is invisible"
    assert store.latest().epoch == 3 and store.latest().positions == {"src": {0: 30}}
    assert store.next_epoch() == 4


def test_next_epoch_is_above_rows_of_epochs_that_never_completed(tmp_path):
    store = CheckpointStore(tmp_path / "c.sqlite")
    store.write_states("count", 7, rows({"a": 1}))
    assert store.next_epoch() == 8


def test_instance_rows_are_outside_every_key_range(tmp_path):
    store = CheckpointStore(tmp_path / "c.sqlite")
    store.write_states("sink", 1, [(instance_slot(2), encode(["#instance", 2]), encode({"n": 4}))])
    store.complete(1, "checkpoint", {})
    assert store.read_range("sink", 1, 0, 2**63 - 1) == {}
    assert decode(store.read_slot("sink", 1, instance_slot(2))) == {"n": 4}
    assert store.read_slot("sink", 1, instance_slot(0)) is None


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.dictionaries(st.sampled_from("abcdef"), st.integers(0, 99), max_size=4),
                          st.booleans(), st.booleans()), min_size=1, max_size=8))
def test_compaction_never_changes_what_any_completed_checkpoint_or_savepoint_restores(tmp_path_factory, epochs):
    store = CheckpointStore(tmp_path_factory.mktemp("c") / "c.sqlite")
    done = []
    for epoch, (states, completes, savepoint) in enumerate(epochs, start=1):
        store.write_states("u", epoch, rows(states))
        if completes:
            store.complete(epoch, "savepoint" if savepoint else "checkpoint", {})
            done.append(epoch)
    if not done:
        return
    latest = done[-1]
    keep = [e for e in done if e == latest or store.get(e).kind == "savepoint"]
    before = {e: restored(store, "u", e) for e in keep}
    store.compact(latest)
    assert {e: restored(store, "u", e) for e in keep} == before


def _write(path: str, unit: str, start: int) -> None:
    store = CheckpointStore(path)
    for epoch in range(start, start + 20):
        store.write_states(unit, epoch, rows({f"{unit}-{epoch}": epoch}))
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
