"""A PE's state in slots: which attributes, and the state methods that read and write them.

Why: CPython 3.11 specialises loads and stores of a slot whatever the
instance's `__dict__` is, but an attribute kept inline in the instance loses
its specialisation once something has read the `__dict__`, as every
checkpoint's snapshot did: under 2 s checkpoints a word count's process() took
1.6x as long and the job ran ~25% slower (docs/PERFORMANCE.md). So the per-SPU
PE class (pe_class.py) declares the attributes the bolt's own methods store as
slots, and its state is those slots plus whatever landed in `__dict__`.
"""

from __future__ import annotations

import dis
import keyword
from operator import attrgetter
from types import CodeType, FunctionType
from typing import Any, Callable

from esault.dsl.bolt import RUNTIME_ATTRIBUTES, Bolt


def state_slots(cls: type) -> tuple[str, ...]:
    """The attributes `cls`'s methods store on objects, which its PEs keep in slots; () when none may be.

    Only for a class that keeps Bolt's snapshot_state() and restore_state() (the runtime reads and writes
    the state itself) and has no attribute hooks. A name the class defines (a default, a property, a
    method) stays out, so reading it unset still finds the class's value. A name stored on another object
    costs an empty slot. An attribute stored another way (setattr with a computed name, a class method)
    lands in `__dict__` and is state all the same."""
    if not _keeps_default_state(cls):
        return ()
    names: set[str] = set()
    for klass in cls.__mro__:
        if klass is not Bolt and klass is not object:
            for value in vars(klass).values():
                for code in _codes_of(value):
                    names |= _stored_names(code)
    return tuple(sorted(name for name in names if _slottable(cls, name)))


def slot_state_methods(slots: tuple[str, ...]) -> dict[str, Any]:
    """The PE class's snapshot_state/restore_state over `slots` and `__dict__`, and `_esault_read_state`:
    the checkpoint's reader, which raises AttributeError for a PE with a slot unset (the snapshot then
    takes the careful way, snapshot_state())."""
    slot_set = frozenset(slots)

    def snapshot_state(self: Any) -> dict[str, Any]:
        state = {}
        for name in slots:
            try:
                state[name] = getattr(self, name)
            except AttributeError:  # never set on this PE
                pass
        state.update(self.__dict__)
        return state

    def restore_state(self: Any, state: dict[str, Any]) -> None:
        extra = self.__dict__
        for name, value in state.items():
            if name in slot_set:
                setattr(self, name, value)
            else:
                extra[name] = value

    snapshot_state.__doc__ = Bolt.snapshot_state.__doc__
    restore_state.__doc__ = Bolt.restore_state.__doc__
    return {"snapshot_state": snapshot_state, "restore_state": restore_state,
            "_esault_read_state": staticmethod(_reader(slots))}


def _reader(slots: tuple[str, ...]) -> Callable[[Any], dict[str, Any]]:
    get = attrgetter(*slots)
    if len(slots) == 1:  # attrgetter of one name returns the value, not a tuple
        (only,) = slots

        def read_one(pe: Any) -> dict[str, Any]:
            state = {only: get(pe)}
            extra = pe.__dict__
            if extra:
                state.update(extra)
            return state
        return read_one

    def read(pe: Any) -> dict[str, Any]:
        state = dict(zip(slots, get(pe)))
        extra = pe.__dict__
        if extra:
            state.update(extra)
        return state
    return read


def _keeps_default_state(cls: type) -> bool:
    return (getattr(cls, "snapshot_state", None) is Bolt.snapshot_state
            and getattr(cls, "restore_state", None) is Bolt.restore_state
            and getattr(cls, "__setattr__", None) is object.__setattr__
            and getattr(cls, "__getattribute__", None) is object.__getattribute__
            and not hasattr(cls, "__getattr__"))


def _codes_of(value: Any) -> list[CodeType]:
    """The code of a class attribute that runs with the instance as `self` (class and static methods
    store on the class or on nothing of the PE's)."""
    if isinstance(value, FunctionType):
        return [value.__code__]
    if isinstance(value, property):
        return [f.__code__ for f in (value.fget, value.fset, value.fdel) if isinstance(f, FunctionType)]
    return []


def _stored_names(code: CodeType) -> set[str]:
    names = {ins.argval for ins in dis.get_instructions(code) if ins.opname == "STORE_ATTR"}
    for const in code.co_consts:
        if isinstance(const, CodeType):  # nested functions, lambdas, comprehensions
            names |= _stored_names(const)
    return names


def _slottable(cls: type, name: str) -> bool:
    return (name.isidentifier() and not keyword.iskeyword(name) and not name.startswith("__")
            and not name.startswith("_esault") and name not in RUNTIME_ATTRIBUTES and not hasattr(cls, name))
