"""Saveable state: what cannot be encoded is found and named (attribute, index path, type), and the fix given."""

from __future__ import annotations

from concurrent.futures import Future
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from esault.checkpoint.saveable import (
    CHAIN_FIX, POSITION_FIX, encode_state, key_owner, unsaveable, unsaveable_hook,
)
from esault.checkpoint.snapshots import Snapshot, SnapshotWriter
from esault.errors import SerializationError, UnsaveableState
from esault.messages.checkpoints import CheckpointAck
from esault.transport.codec import encode, unencodable_part

scalars = (st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats(allow_nan=False)
           | st.text(max_size=5) | st.binary(max_size=5))
encodable = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner)
                         | st.dictionaries(st.text(max_size=4), inner, max_size=4), max_leaves=20)


class Opaque:
    """Nothing msgpack knows."""


@given(encodable)
def test_every_encodable_value_has_no_unencodable_part(value):
    encode(value)
    assert unencodable_part(value) is None


@given(encodable, st.lists(st.integers(0, 3), max_size=4), st.sampled_from([Opaque(), Path("/p"), 2**64, object()]))
def test_the_one_part_that_cannot_be_encoded_is_found_at_its_index_path(value, steps, bad):
    """Plant `bad` inside a random value, following `steps` through its lists and dicts: found exactly there."""
    root = {"attr": value}
    holder, index, where = root, "attr", "['attr']"
    for step in steps:
        inner = holder[index]
        if type(inner) is list and inner:
            holder, index = inner, step % len(inner)
            where += f"[{index}]"
        elif type(inner) is dict and inner:
            index = sorted(inner)[step % len(inner)]
            holder, where = inner, where + f"[{index!r}]"
        else:
            break
    holder[index] = bad
    with pytest.raises(SerializationError):
        encode(root)
    found_where, what = unencodable_part(root)
    assert found_where == where
    assert what == ("an int outside the 64-bit range" if bad == 2**64 else type(bad).__name__)


def test_a_pe_state_names_the_key_the_attribute_its_type_and_the_fix():
    error = unsaveable(key_owner("count", "k1"), {"n": 3, "path": Path("/tmp/k1")})
    assert isinstance(error, UnsaveableState) and isinstance(error, SerializationError)
    assert str(error) == (
        "bolt 'count' cannot save the state of key 'k1': attribute 'path' is a PosixPath, which msgpack cannot "
        "encode; keep the attributes to str, bytes, int, float, bool, None and lists, tuples, sets or dicts of those "
        "(a path as str(path), an object as a dict of its fields), or override snapshot_state() and restore_state() "
        "to save only what the state needs (leave out files, locks and connections: open() makes them again)")


def test_a_part_deep_inside_an_attribute_is_named_with_its_index_path():
    message = str(unsaveable(key_owner("count", 7), {"seen": {"a": [1, Opaque()]}}))
    assert message.startswith("bolt 'count' cannot save the state of key 7: attribute 'seen' holds an Opaque at "
                              "['seen']['a'][1], which msgpack cannot encode; ")


def test_a_spout_position_and_a_join_chain_get_their_own_fix():
    position = str(unsaveable("spout 'src' (instance 0) cannot save its position", Path("/in"), POSITION_FIX))
    assert position == ("spout 'src' (instance 0) cannot save its position: snapshot_position() returned a PosixPath, "
                        "which msgpack cannot encode; " + POSITION_FIX)
    chain = str(unsaveable("join 'j' (chain SPU 3) cannot save its state", {"workers": [[Opaque()]]}, CHAIN_FIX))
    assert chain.endswith("attribute 'workers' holds an Opaque at ['workers'][0][0], which msgpack cannot encode; "
                          "a join chain keeps the tuples it has yet to join: send it keys and values of str, bytes, "
                          "int, float, bool, None and lists, tuples, sets or dicts of those")


def test_encode_state_encodes_what_it_can_and_raises_the_named_error_for_the_rest():
    assert encode_state({"n": 1}, key_owner("c", "k")) == encode({"n": 1})
    with pytest.raises(UnsaveableState, match=r"^bolt 'c' cannot save the state of key 'k': attribute 'p' is a "
                                              r"PosixPath"):
        encode_state({"p": Path()}, key_owner("c", "k"))


def test_a_snapshot_hook_that_raised_is_named_with_its_error():
    error = unsaveable_hook(key_owner("c", "k"), "snapshot_state()", ValueError("boom"))
    assert str(error).startswith("bolt 'c' cannot save the state of key 'k': snapshot_state() raised ValueError: "
                                 "boom; fix snapshot_state(), or keep the attributes")


class Mailbox:
    def __init__(self) -> None:
        self.got: list = []
        self.arrived = __import__("threading").Event()

    def tell(self, message) -> None:
        self.got.append(message)
        self.arrived.set()


def test_a_refused_snapshot_writes_nothing_and_its_ack_fails_the_checkpoint_for_good(tmp_path):
    from esault.checkpoint.store import CheckpointStore

    mailbox = Mailbox()
    writer = SnapshotWriter(lambda: CheckpointStore(tmp_path / "c.sqlite"), mailbox, "test-writer")
    never: Future = Future()  # a pre-commit that would block the write: a refused snapshot does not wait for it
    snapshot = Snapshot(CheckpointAck(4, 9, "count", 0), rows={"count": [(1, encode(["k", 1]))]}, waits=[never])
    snapshot.refuse("bolt 'count' cannot save the state of key 'k': ...")
    writer.submit(snapshot)
    assert mailbox.arrived.wait(10)
    writer.close(discard=False)
    (ack,) = mailbox.got
    assert ack.fatal and ack.error == "bolt 'count' cannot save the state of key 'k': ..." and ack.epoch == 4
    store = CheckpointStore(tmp_path / "c.sqlite")
    try:
        assert store.read_range("count", 4, 0, 2**31 - 1) == {}
    finally:
        store.close()


def test_a_key_that_cannot_be_encoded_is_named_as_the_key_not_as_its_state():
    from esault.checkpoint.saveable import encode_key

    assert encode_key(("a", 1), "count") == encode(("a", 1))
    with pytest.raises(UnsaveableState, match=r"^bolt 'count' cannot save the state of key 18446744073709551616: "
                                              r"the key itself holds an int outside the 64-bit range, which msgpack "
                                              r"cannot encode; emit keys of str, bytes, int \(64-bit\)"):
        encode_key(2**64, "count")
