"""The class a keyed SPU makes its PEs from: the user's bolt class, with the runtime's attributes on the class.

Why: every PE of one SPU shares the same emit path, deferral, services and stats,
so they live on a per-SPU subclass instead of in each PE's `__dict__`. A PE's
`__dict__` is then exactly its state (Bolt.snapshot_state's "every public
attribute"): a checkpoint packs it as it is, with no copy and no pops per changed
key, and a new PE costs two attribute stores instead of six. The PE's key and its
checkpoint bucket are slots, outside that dict.
"""

from __future__ import annotations

import inspect
from types import FunctionType
from typing import Any, Callable

from esault.checkpoint.store import bucket_of
from esault.dsl.bolt import Bolt
from esault.keyhash import key_hash

NO_BUCKET = -1
"""A PE whose key cannot be hashed for routing (it never came through a key route): its bucket is found,
or the error raised, when its state is saved."""


def pe_class(cls: type, emit: Callable[[Any, Any], None], defer: Callable[[], Any], services: Any,
             stats: Any) -> type:
    """A subclass of the user's `cls` (same name, module and behaviour) holding one SPU's runtime attributes."""
    namespace = {
        "__slots__": ("key", "_esault_bucket"),
        "__module__": cls.__module__,
        "__qualname__": cls.__qualname__,
        "__doc__": cls.__doc__,
        "emit": staticmethod(emit),  # user emits call the router directly, as the instance attribute did
        "_esault_emit": staticmethod(emit),
        "_esault_defer": staticmethod(defer),
        "_esault_spu": services,
        "_esault_stats": stats,
    }
    return type(cls)(cls.__name__, (cls,), namespace)


def give_plain_dict(pe: Any) -> None:
    """Give `pe` a dict of its own for its attributes now, before its first snapshot reads `__dict__`.

    Why: CPython 3.11 keeps a new instance's attributes inline, and the first
    read of its `__dict__` (a snapshot's) turns them into a dict that shares
    the class's keys (a split dict). Attribute loads and stores on such an
    instance are not specialised (each takes the generic path), and while
    some PEs are still inline and others split, the specialised ones keep
    missing: a word count's process() and PE loop cost ~30 ns more per word
    after its first checkpoint (docs/PERFORMANCE.md). A dict made by dict()
    is an ordinary one, specialised like any, and the same for every PE.
    Only PEs that will be snapshotted (exactly_once) get one: the rest keep
    the inline attributes, a little faster still."""
    try:
        pe.__dict__ = dict(pe.__dict__)
    except (AttributeError, TypeError):  # a class that forbids it keeps what it has
        pass


def class_process(cls: type) -> Callable[[Any, Any], Any] | None:
    """`cls.process` as a plain function, called as `process(pe, tuple)`, or None when it is not one.

    Why: a PE with a dict of its own (give_plain_dict) cannot have `pe.process` specialised in 3.11,
    so the PE loop calls the class's function instead (one call, no method lookup per tuple)."""
    fn = inspect.getattr_static(cls, "process", None)
    return fn if isinstance(fn, FunctionType) else None


def state_is_instance_dict(cls: type) -> bool:
    """True when a PE's state is its `__dict__` as it is: the class keeps Bolt's snapshot_state()."""
    return getattr(cls, "snapshot_state", None) is Bolt.snapshot_state


def bucket_of_key(key: Any) -> int:
    """The checkpoint bucket of `key`, or NO_BUCKET when it cannot be hashed."""
    try:
        return bucket_of(key_hash(key))
    except TypeError:
        return NO_BUCKET
