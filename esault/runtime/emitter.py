"""Builds the per-SPU emit function: the innermost per-tuple code of esault.

Specialised once per SPU for its downstream routes (the topology fixes which
units follow; reconfigurations update each Route in place, so the closure
stays valid). The common case, one route, costs a type check, a cached
buffer lookup (key grouping only) and two list appends. Tracking ids are not
per tuple: the output router gives each flushed batch its edge ids.
"""

from __future__ import annotations

from typing import Any, Callable

from esault.routing.output_router import OutputRouter
from esault.transport.codec import _SIMPLE


def build_emit(router: OutputRouter, check: Callable[[Any, Any], None]) -> Callable[[Any, Any], None]:
    """emit(key, value): validate cheaply (full check only for non-scalar types), then buffer."""
    routes = router.routes
    simple = _SIMPLE

    if not routes:  # a terminal bolt: emits go nowhere, but must still be valid values

        def emit_nowhere(key: Any, value: Any) -> None:
            if type(key) not in simple or type(value) not in simple:
                check(key, value)

        return emit_nowhere

    if len(routes) == 1:
        route = routes[0]
        if route.keyed:
            # The route's key -> buffer cache answers most lookups in one dict get.
            cache_get = route._cache.get
            miss = route.buffer_for

            def emit_keyed(key: Any, value: Any) -> None:
                if type(key) not in simple or type(value) not in simple:
                    check(key, value)
                buf = cache_get(key)
                if buf is None:
                    buf = miss(key)
                buf.append(key)
                buf.append(value)

            return emit_keyed

        append = route.pending.append  # shuffle, global, all: one buffer, dealt out at flush

        def emit_one(key: Any, value: Any) -> None:
            if type(key) not in simple or type(value) not in simple:
                check(key, value)
            append(key)
            append(value)

        return emit_one

    def emit_any(key: Any, value: Any) -> None:
        if type(key) not in simple or type(value) not in simple:
            check(key, value)
        for route in routes:
            buf = route.buffer_for(key)
            buf.append(key)
            buf.append(value)

    return emit_any
