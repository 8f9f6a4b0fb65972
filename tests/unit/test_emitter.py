"""The emit closures of datapath/emitter.py: a batch routed by emit_many lands exactly where emit() per pair puts it."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from esault.datapath.emitter import build_emit, build_emit_many
from esault.messages.handoff import RouteSpec
from esault.routing import output_router
from esault.routing.interval_table import IntervalTable
from esault.routing.output_router import OutputRouter


def keyed_router(splits: list[int]) -> OutputRouter:
    """One key route; SPU 0 owns the hash space, then each split gives the upper half of an SPU's interval to
    a new SPU (`splits` picks which existing SPU, modulo their count)."""
    table = IntervalTable(0)
    for pick in splits:
        spus = table.spus()
        table.split(spus[pick % len(spus)], len(spus))
    return OutputRouter(1, "source", [RouteSpec("count", "key", table.to_wire(),
                                                {spu: object() for spu in table.spus()}, 1)])


def refuse(key: Any, value: Any) -> None:
    """The SPU's check_emit as far as these tests go: it is called for pairs of non-simple types, and refuses
    what the wire cannot carry (here: a bare object)."""
    if type(key) is object or type(value) is object:
        raise TypeError(f"cannot send {key!r}: {value!r}")


def buffers(router: OutputRouter) -> dict[int, list]:
    return {spu: list(buf) for spu, buf in router.routes[0].buffers.items()}


simple_keys = st.one_of(st.text(max_size=6), st.integers(-5, 50), st.binary(max_size=4))
batches = st.lists(st.lists(st.tuples(simple_keys, st.integers()), max_size=40), max_size=6)


@settings(max_examples=200, deadline=None)
@given(splits=st.lists(st.integers(0, 7), max_size=4), batches=batches, cache_limit=st.sampled_from([2, 1 << 18]))
def test_a_keyed_batch_fills_each_spus_buffer_as_emit_per_pair_does(splits: list[int], batches: list,
                                                                      cache_limit: int) -> None:
    """Same buffers, same order, whatever the keys, the SPUs and the cache (a tiny limit clears it mid-batch)."""
    per_pair, batched = keyed_router(splits), keyed_router(splits)
    emit_one = build_emit(per_pair, refuse)
    emit_many = build_emit_many(batched, build_emit(batched, refuse), refuse)
    limit = output_router._CACHE_LIMIT
    output_router._CACHE_LIMIT = cache_limit
    try:
        for batch in batches:
            for key, value in batch:
                emit_one(key, value)
            emit_many([k for k, _ in batch], [v for _, v in batch])
    finally:
        output_router._CACHE_LIMIT = limit
    assert buffers(batched) == buffers(per_pair)
    assert sum(map(len, buffers(batched).values())) == 2 * sum(map(len, batches))


def test_a_batch_with_a_value_that_cannot_be_sent_routes_none_of_it() -> None:
    router = keyed_router([0])
    emit_many = build_emit_many(router, build_emit(router, refuse), refuse)
    with pytest.raises(TypeError, match="cannot send 'b': <object"):
        emit_many(["a", "b", "c"], [1, object(), 3])
    assert buffers(router) == {0: [], 1: []}


def test_an_unhashable_key_raises_what_emit_raises_after_the_pairs_before_it() -> None:
    """A list is a valid value but no key can be routed by it: emit() raises at that pair, and so does the batch."""

    def allow(key: Any, value: Any) -> None:
        """Lists may be sent (the wire takes them); routing by one is what fails."""

    router = keyed_router([0])
    emit = build_emit(router, allow)
    emit_many = build_emit_many(router, emit, allow)
    with pytest.raises(TypeError, match="unhashable"):
        emit_many(["a", ["x"], "c"], [1, 2, 3])
    routed = [item for buf in buffers(router).values() for item in buf]
    assert routed == ["a", 1]
