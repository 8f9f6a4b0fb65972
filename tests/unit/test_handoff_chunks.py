"""chunk_states: a state hand-off cut into frames under the cap, in order, nothing lost."""

from __future__ import annotations

from hypothesis import given, strategies as st

from esault.migration.handoff import chunk_states


@given(st.lists(st.tuples(st.integers(), st.binary(max_size=300)), max_size=60), st.integers(1, 1000))
def test_chunked_state_keeps_order_and_stays_within_the_budget(states, budget):
    chunks = chunk_states(states, budget, size_of_key=lambda key: 8)
    assert chunks and [pair for chunk in chunks for pair in chunk] == states
    for chunk in chunks:
        assert chunk or len(chunks) == 1  # only an empty hand-off has an empty chunk
        cost = sum(len(blob) + 8 for _, blob in chunk)
        assert cost <= budget or len(chunk) == 1, (cost, budget, len(chunk))
