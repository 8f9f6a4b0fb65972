"""A PE's state in slots: which attributes, and the state methods that read and write them.

Why: CPython 3.11 specialises loads and stores of a slot whatever the
instance's `__dict__` is, but an attribute kept inline in the instance loses
its specialisation once something has read the `__dict__`, as every
checkpoint's snapshot did: under 2 s checkpoints a word count's process() took
1.6x as long and the job ran ~25% slower (docs/PERFORMANCE.md). So the per-SPU
PE class (pe_class.py) declares the attributes the bolt's own methods store as
slots, and its state is those slots plus whatever landed in `__dict__`. Its
state methods read and write them without making that `__dict__`, for the same
reason (slot_state_methods).
"""

from __future__ import annotations

import dis
import keyword
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
    """The PE class's snapshot_state/restore_state over `slots` and `__dict__`, `_esault_read_state` (the
    checkpoint's reader, the same as snapshot_state()) and `__slotnames__` (the state slots, which the reader
    asks object.__getstate__ for).

    None of them touches a PE's `__dict__` unless it holds something: reading it once makes CPython 3.11 keep
    a dict for the PE from then on, and the bolt's method calls on that PE (`pe.process`, `self.helper()`)
    lose their specialisation: a word count's keyed loop took 1.12-1.16x as long per tuple once a checkpoint
    had read its PEs' `__dict__`, and 1.00-1.03x after this reader (bench/loop_after_snapshot.py)."""
    read = _reader()
    slot_set = frozenset(slots)

    def restore_state(self: Any, state: dict[str, Any]) -> None:
        for name, value in state.items():
            if name in slot_set:
                setattr(self, name, value)
            else:  # stored another way, it was in the __dict__ (which then holds something anyway)
                self.__dict__[name] = value

    read.__doc__ = Bolt.snapshot_state.__doc__
    restore_state.__doc__ = Bolt.restore_state.__doc__
    return {"snapshot_state": read, "restore_state": restore_state,
            "_esault_read_state": staticmethod(read), "__slotnames__": list(slots)}


def _reader() -> Callable[[Any], dict[str, Any]]:
    """The state of a PE whose class lists its state slots in `__slotnames__`: the slots that are set, then
    what its `__dict__` holds. object.__getstate__ (CPython >= 3.11) reads both in C and looks at the
    `__dict__` only when the PE has one or something in it: it answers None (nothing set), the dict (no
    slot set), or (dict or None, slots)."""
    getstate = object.__getstate__

    def read(pe: Any) -> dict[str, Any]:
        state = getstate(pe)
        if type(state) is tuple:
            extra, slots = state
            if extra:
                slots.update(extra)
            return slots
        return {} if state is None else dict(state)
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
