"""key_hash: in range, deterministic, and identical in every process whatever PYTHONHASHSEED."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import msgpack
import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from esault.keyhash import KEY_SPACE_MAX, key_hash

# Keys of every supported kind, as a source literal a child process can eval.
KEYS_SOURCE = """[
    "", "apple", "Äpfel", "\\u65e5\\u672c", "a" * 1000,
    b"", b"apple", b"\\x00\\xff",
    0, 1, -1, 2**63 - 1, -(2**63), 2**64 - 1,
    1.5, True, False, None,
    ("a", 1), ("a", (b"b", None)), [1, 2, 3],
]"""
KEYS = eval(KEYS_SOURCE)

CHILD = f"""
import json
from esault.keyhash import key_hash
keys = {KEYS_SOURCE}
print(json.dumps({{"esault": [key_hash(k) for k in keys], "builtin": [hash(k) for k in ("apple", b"apple")]}}))
"""

scalars = st.one_of(
    st.text(), st.binary(), st.integers(-(2**63), 2**64 - 1), st.floats(allow_nan=False),
    st.booleans(), st.none(),
)
keys = st.recursive(scalars, lambda inner: st.tuples(inner, inner) | st.lists(inner, max_size=3), max_leaves=6)


def hashes_in_child(seed: str) -> dict[str, list[int]]:
    env = dict(os.environ, PYTHONHASHSEED=seed)
    out = subprocess.run(
        [sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, check=True, timeout=60
    )
    return json.loads(out.stdout)


def test_hashes_are_identical_across_processes_with_different_hash_seeds() -> None:
    a = hashes_in_child("1")
    b = hashes_in_child("4242")
    # The seeds really differ: Python's own str/bytes hash changed between the two children.
    assert a["builtin"] != b["builtin"]
    here = [key_hash(k) for k in KEYS]
    assert a["esault"] == here
    assert b["esault"] == here


@settings(max_examples=300, deadline=None)
@given(key=keys)
def test_every_hash_lies_in_the_key_space_and_is_deterministic(key) -> None:
    h = key_hash(key)
    assert type(h) is int
    assert 0 <= h <= KEY_SPACE_MAX
    assert key_hash(key) == h
    if isinstance(key, (str, bytes)):
        assert key_hash(type(key)(key)) == h  # a fresh but equal object


def test_known_values_never_change() -> None:
    # Routing agrees across versions only while these stay put: changing the hash is a
    # breaking change for any job that restores state or mixes worker versions.
    pinned = {"apple": 1553232543, "": 1373170073, 42: 1525505052}
    assert {k: key_hash(k) for k in pinned} == pinned
    # The documented recipe: xxh64 of the UTF-8 bytes (str), of b"\x00b" + bytes, or of
    # b"\x00m" + the msgpack encoding (everything else), masked onto [0, 2**31 - 1].
    assert key_hash("apple") == xxhash.xxh64_intdigest("apple".encode()) & KEY_SPACE_MAX
    assert key_hash(b"apple") == xxhash.xxh64_intdigest(b"\x00bapple") & KEY_SPACE_MAX
    assert key_hash(("a", 1)) == xxhash.xxh64_intdigest(b"\x00m" + msgpack.packb(["a", 1])) & KEY_SPACE_MAX


def test_str_keys_hash_their_utf8_bytes_and_differ_from_bytes_keys() -> None:
    assert key_hash("apple") != key_hash(b"apple")
    assert key_hash("\ud800") == key_hash("\ud800")  # lone surrogates are accepted (surrogatepass)


def test_tuples_and_lists_of_the_same_items_hash_alike() -> None:
    # msgpack encodes both as arrays: a key that crosses a process as a list still routes the same.
    assert key_hash(("a", 1)) == key_hash(["a", 1])


@pytest.mark.parametrize("bad", [object(), {1, 2}, ("ok", object()), 1j])
def test_unsupported_key_types_raise_a_helpful_type_error(bad) -> None:
    with pytest.raises(TypeError, match=r"cannot be hashed for routing: use str, bytes, int, float, bool, None or tuples/lists of those"):
        key_hash(bad)


def test_the_type_error_names_the_key_and_its_type() -> None:
    class Point:
        def __repr__(self) -> str:
            return "Point(1, 2)"

    with pytest.raises(TypeError, match=r"^key Point\(1, 2\) of type Point cannot be hashed"):
        key_hash(Point())


def test_ints_beyond_64_bits_still_hash_stably() -> None:
    assert key_hash(2**64) == key_hash(2**64) != key_hash(2**64 + 1)
    assert 0 <= key_hash(-(2**70)) <= KEY_SPACE_MAX


def test_keys_equal_in_python_hash_equally() -> None:
    class Name(str):
        pass

    assert key_hash(1) == key_hash(True) == key_hash(1.0)
    assert key_hash(Name("apple")) == key_hash("apple")
