"""StateStore on a real SQLite file: rows replace by key, take removes, two handles share the file."""

from __future__ import annotations

import pytest

from esault.state.store import StateStore


def test_put_take_and_replace(tmp_path):
    store = StateStore(tmp_path / "u.sqlite")
    store.put_many([(5, b"k1", b"s1"), (9, b"k2", b"s2")])
    store.put_many([(5, b"k1", b"s1-newer")])
    assert len(store) == 2
    assert store.take_many([b"k1", b"nope", b"k2"]) == [b"s1-newer", None, b"s2"]
    assert len(store) == 0 and store.take_many([b"k1"]) == [None]
    store.close()


def test_two_handles_on_one_file_see_each_others_rows(tmp_path):
    a, b = StateStore(tmp_path / "u.sqlite"), StateStore(tmp_path / "u.sqlite")
    a.put_many([(1, b"k", b"s")])
    assert b.take_many([b"k"]) == [b"s"] and a.take_many([b"k"]) == [None]
    a.close()
    b.close()


def test_a_hash_outside_the_key_space_is_refused(tmp_path):
    store = StateStore(tmp_path / "u.sqlite")
    with pytest.raises(ValueError, match="outside"):
        store.put_many([(2**63, b"k", b"s")])
    store.close()


def test_many_handles_opening_and_writing_one_file_at_once_all_succeed(tmp_path):
    """SPUs of a unit open the store at the same moment (their PEs expire on the same tick)."""
    import threading

    path = tmp_path / "u.sqlite"
    start, errors = threading.Barrier(8), []

    def spu(i: int) -> None:
        try:
            start.wait(10)
            store = StateStore(path)
            store.put_many([(i, f"k{i}-{j}".encode(), b"s") for j in range(50)])
            store.close()
        except Exception as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=spu, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert errors == []
    assert len(StateStore(path)) == 8 * 50
