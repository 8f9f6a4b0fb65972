"""The class a keyed SPU makes its PEs from: the user's bolt class, with the runtime's attributes on the class.

Why: every PE of one SPU shares the same emit path, deferral, services and stats,
so they live on a per-SPU subclass instead of in each PE's `__dict__`: nothing of
the runtime's is in a PE's state, a checkpoint packs it with no copy and no pops
per changed key, and a new PE costs three attribute stores instead of six. The
PE's key, its checkpoint bucket and its dirty stamp (pe_manager.py) are slots.
So are the attributes the bolt's own methods store, when the class keeps the
default state methods (state_slots.py): the state is then those slots plus the
`__dict__`, which holds anything else.
"""

from __future__ import annotations

from typing import Any, Callable

from esault.checkpoint.store import BUCKET_BITS, bucket_of
from esault.datapath.state_slots import slot_state_methods, state_slots
from esault.dsl.bolt import Bolt
from esault.keyhash import key_hash

NO_BUCKET = -1
"""A PE whose key cannot be hashed for routing (it never came through a key route): its bucket is found,
or the error raised, when its state is saved."""


def pe_class(cls: type, emit: Callable[[Any, Any], None], defer: Callable[[], Any], services: Any,
             stats: Any) -> type:
    """A subclass of the user's `cls` (same name, module and behaviour) holding one SPU's runtime attributes.

    Its `_esault_read_state` is None when a PE's state is its `__dict__` as it is, else the reader of its
    state slots (state_slots.py)."""
    slots = state_slots(cls)
    namespace = {
        "__slots__": ("key", "_esault_bucket", "_esault_mark", *slots),
        "__module__": cls.__module__,
        "__qualname__": cls.__qualname__,
        "__doc__": cls.__doc__,
        "emit": staticmethod(emit),  # user emits call the router directly, as the instance attribute did
        "_esault_emit": staticmethod(emit),
        "_esault_defer": staticmethod(defer),
        "_esault_spu": services,
        "_esault_stats": stats,
        "_esault_read_state": None,
    }
    if slots:
        namespace.update(slot_state_methods(slots))
    return type(cls)(cls.__name__, (cls,), namespace)


def state_is_instance_dict(cls: type) -> bool:
    """True when the runtime reads a PE's state itself (its `__dict__`, and its state slots if it has any):
    the class keeps Bolt's snapshot_state()."""
    return getattr(cls, "snapshot_state", None) is Bolt.snapshot_state


_BUCKETS = tuple(range(1 << BUCKET_BITS))
"""Every bucket number as one shared int object. Why: a snapshot's loop reads each changed PE's bucket, and
100k PEs with an int object of their own each (numbers above 256 are not shared) scatter them over the heap:
one more cache miss per key: with them the loop took 1.03-1.15x the time on PEs met in a random order
(bench/snapshot_encode.py), and 28 bytes more per PE. These 4096 stay in cache."""


def bucket_of_key(key: Any) -> int:
    """The checkpoint bucket of `key` (a shared int: _BUCKETS), or NO_BUCKET when it cannot be hashed."""
    try:
        return _BUCKETS[bucket_of(key_hash(key))]
    except TypeError:
        return NO_BUCKET
