"""Builds the per-SPU emit function: the innermost per-tuple code of esault.

Specialised once per SPU for its downstream routes (the topology fixes which
units follow; reconfigurations update each Route in place, so the closure
stays valid). The common case, one non-broadcast route, costs a type check, a
cached route lookup, one 64-bit random edge id and a list append. Emitted
tuples are counted when their buffers are flushed, not here.
"""

from __future__ import annotations

from random import getrandbits
from typing import Any, Callable

from esault.dsl.tuple import Tuple
from esault.metrics.stats import SpuStats
from esault.routing.output_router import OutputRouter
from esault.transport.codec import _SIMPLE

_new = tuple.__new__


class AnchorState:
    """The input tuple being processed: its root, and the XOR of its edge and its children's."""

    __slots__ = ("root", "xor")

    def __init__(self) -> None:
        self.root = 0
        self.xor = 0


def build_emit(router: OutputRouter, name: str, stats: SpuStats, anchor: AnchorState,
               check: Callable[[Any, Any], None]) -> Callable[[Any, Any], None]:
    """emit(key, value) for a bolt SPU: anchored to anchor.root when it is non-zero."""
    routes = router.routes
    simple = _SIMPLE
    T = Tuple
    rand = getrandbits

    if not routes:  # a terminal bolt: emits go nowhere, but must still be valid values

        def emit_nowhere(key: Any, value: Any) -> None:
            if type(key) not in simple or type(value) not in simple:
                check(key, value)

        return emit_nowhere

    if len(routes) == 1 and not routes[0].broadcast:
        route = routes[0]
        miss = route.target
        # Key grouping: the route's key -> buffer cache answers most lookups in one dict get.
        cache_get = route._cache.get if route.grouping == "key" else (lambda key: None)

        def emit(key: Any, value: Any) -> None:
            if type(key) not in simple or type(value) not in simple:
                check(key, value)
            buf = cache_get(key)
            if buf is None:
                buf = miss(key)
            root = anchor.root
            if root:
                edge = rand(64) | 1
                anchor.xor ^= edge
                buf.append(_new(T, (key, value, name, root, edge)))
            else:
                buf.append(_new(T, (key, value, name, 0, 0)))

        return emit

    def emit_any(key: Any, value: Any) -> None:
        if type(key) not in simple or type(value) not in simple:
            check(key, value)
        root = anchor.root
        for route in routes:
            for buf in route.all_buffers() if route.broadcast else (route.target(key),):
                if root:
                    edge = rand(64) | 1
                    anchor.xor ^= edge
                    buf.append(_new(T, (key, value, name, root, edge)))
                else:
                    buf.append(_new(T, (key, value, name, 0, 0)))

    return emit_any
