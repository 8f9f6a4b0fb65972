"""codec.encoder(): encode() for many values in a row with one reused Packer; the same bytes, the same errors."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from esault.errors import SerializationError
from esault.transport.codec import decode, encode, encoder

scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**63), max_value=2**64 - 1),
                    st.floats(allow_nan=False), st.text(), st.binary())
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=5), st.tuples(inner, inner), st.frozensets(scalars, max_size=4),
    st.dictionaries(st.text(), inner, max_size=4)), max_leaves=20)


@given(st.lists(values, min_size=1, max_size=20))
def test_a_reused_encoder_gives_the_bytes_encode_gives_for_every_value_in_a_row(row: list) -> None:
    pack = encoder()
    for value in row:
        blob = pack(value)
        assert blob == encode(value)
        assert decode(blob) == value


def test_after_a_value_it_cannot_encode_it_says_what_and_encodes_the_next_one_whole() -> None:
    pack = encoder()
    with pytest.raises(SerializationError, match="object"):
        pack(["w", {"count": 1, "lock": object()}])
    assert decode(pack(["w", {"count": 2}])) == ["w", {"count": 2}]
