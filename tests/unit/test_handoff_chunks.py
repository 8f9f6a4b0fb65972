"""chunk_states: a state hand-off cut into frames under the cap, in order, nothing lost; pack_states and
unpack_states: a chunk on the wire, and a frame that is not one refused."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, strategies as st

from esault.migration.handoff import chunk_states
from esault.transport.state_chunks import pack_states, unpack_states
from esault.transport.codec import encode


@given(st.lists(st.tuples(st.integers(), st.binary(max_size=300)), max_size=60), st.integers(1, 1000))
def test_chunked_state_keeps_order_and_stays_within_the_budget(states, budget):
    chunks = chunk_states(states, budget, size_of_key=lambda key: 8)
    assert chunks and [pair for chunk in chunks for pair in chunk] == states
    for chunk in chunks:
        assert chunk or len(chunks) == 1  # only an empty hand-off has an empty chunk
        cost = sum(len(blob) + 8 for _, blob in chunk)
        assert cost <= budget or len(chunk) == 1, (cost, budget, len(chunk))


KEYS = st.one_of(st.text(max_size=8), st.integers(-2**63, 2**63 - 1), st.tuples(st.text(max_size=4), st.integers(0, 2**32)))


@given(pairs=st.dictionaries(KEYS, st.binary(max_size=40), max_size=30))
def test_a_chunk_of_states_comes_out_of_its_frame_as_it_went_in(pairs):
    assert unpack_states(pack_states(list(pairs.items()))) == pairs


@pytest.mark.parametrize("packed, says", [
    (b"\xc1", "not msgpack"),
    (encode({"a": b""}), "not a [key, state"),
    (encode(["a", b"", "b"]), "not a [key, state"),
    (encode(["a", "not bytes"]), "not encoded bytes"),
    (encode([["a", "list"], b""]), "cannot be a key"),
])
def test_a_hand_off_frame_that_is_not_a_chunk_of_states_is_refused_saying_why(packed, says):
    with pytest.raises(ValueError, match=re.escape(says)):
        unpack_states(packed)
