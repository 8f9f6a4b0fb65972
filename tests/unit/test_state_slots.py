"""A PE's state in slots (esault/datapath/state_slots.py): which attributes, and that the state read and
written through them is the state the attributes hold, slots and `__dict__` together."""

from __future__ import annotations

import gc
from typing import Any

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from esault import Bolt
from esault.datapath.pe_class import pe_class
from esault.datapath.state_slots import state_slots


class Tally(Bolt):
    """Stores attributes from __init__, open(), process(), a nested function, a comprehension and a
    property setter; one on another object; one with a computed name."""

    label = "tally"  # a class default: never a slot

    def __init__(self, step: int = 1) -> None:
        self.step = step

    def open(self, context: Any) -> None:
        self.total = 0

        def later() -> None:
            self.nested = True
        self._later = later

    def process(self, tup: Any) -> None:
        self.total += self.step * tup.value
        [setattr(self, "last", v) for v in (tup.value,)]  # noqa: B010 - a computed store: lands in __dict__
        holder = type("Holder", (), {})()
        holder.elsewhere = 1  # stored on another object: an empty slot, never state

    @property
    def doubled(self) -> int:
        return 2 * self.total

    @doubled.setter
    def doubled(self, value: int) -> None:
        self.total_from_setter = value // 2


def make(cls: type) -> Any:
    pe = pe_class(cls, print, print, None, None)()
    pe.key = "k"
    pe._esault_bucket = 0
    return pe


def test_the_names_are_what_the_class_methods_store_minus_what_the_class_defines() -> None:
    assert state_slots(Tally) == ("_later", "elsewhere", "nested", "step", "total", "total_from_setter")


def test_a_class_default_stays_on_the_class_so_an_unset_pe_still_reads_it() -> None:
    class Defaults(Bolt):
        count = 0

        def process(self, tup: Any) -> None:
            self.count += 1

    assert state_slots(Defaults) == ()
    pe = make(Defaults)
    assert pe.count == 0
    pe.process(None)
    assert pe.snapshot_state() == {"count": 1}


@pytest.mark.parametrize("hook", ["snapshot_state", "restore_state", "__getattr__", "__setattr__"])
def test_a_class_with_its_own_state_or_attribute_hooks_gets_no_state_slots(hook: str) -> None:
    def own(self: Any, *args: Any) -> Any:
        return object.__setattr__(self, *args) if hook == "__setattr__" else {}

    cls = type("Hooked", (Bolt,), {hook: own, "process": lambda self, tup: setattr(self, "n", 1),
                                   "open": Tally.open})
    assert state_slots(cls) == ()
    assert pe_class(cls, print, print, None, None)._esault_read_state is None


def test_an_attribute_stored_with_a_computed_name_is_state_in_the_dict() -> None:
    pe = make(Tally)
    pe.open(None)
    pe.process(type("T", (), {"value": 5})())
    assert pe.__dict__ == {"last": 5}
    assert pe.snapshot_state() == {"step": 1, "total": 5, "_later": pe._later, "last": 5}


def test_the_checkpoint_reader_and_snapshot_state_leave_an_unset_slot_out() -> None:
    pe = make(Tally)
    pe.total = 3
    assert type(pe)._esault_read_state(pe) == pe.snapshot_state() == {"step": 1, "total": 3}  # open() never ran


NAMES = ["step", "total", "nested", "elsewhere", "extra_a", "extra_b"]
VALUES = st.recursive(st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=5),
                      lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner,
                                                                                 max_size=3), max_leaves=6)


@given(st.dictionaries(st.sampled_from(NAMES), VALUES))
def test_a_state_of_slots_and_dict_survives_snapshot_pack_and_restore(state: dict[str, Any]) -> None:
    class Plain(Bolt):
        def open(self, context: Any) -> None:
            self.step, self.total, self.nested, self.elsewhere = 1, 0, False, None

    pe = make(Plain)
    pe.restore_state(dict(state))
    for name, value in state.items():
        assert getattr(pe, name) == value
    assert pe.snapshot_state() == state
    assert set(pe.__dict__) == {n for n in state if n.startswith("extra")}  # the rest are slots
    again = make(Plain)
    again.restore_state(msgpack.unpackb(msgpack.packb(pe.snapshot_state())))
    assert again.snapshot_state() == state
    assert type(pe)._esault_read_state(pe) == state


def _has_dict(pe: Any) -> bool:
    """Whether CPython made `pe` a `__dict__` (asking pe.__dict__ would make one)."""
    return any(type(ref) is dict for ref in gc.get_referents(pe))


def test_reading_and_restoring_a_state_of_slots_makes_no_dict_so_method_calls_stay_specialised() -> None:
    pe = make(Tally)
    pe.open(None)
    pe.process(type("T", (), {"value": 2})())
    pe.restore_state({"total": 7, "step": 3})
    assert type(pe)._esault_read_state(pe) == pe.snapshot_state() == {
        "_later": pe._later, "step": 3, "total": 7, "last": 2}
    again = make(Tally)
    again.restore_state({"total": 7, "step": 3, "last": 2})  # "last" is no slot
    assert again.snapshot_state() == {"step": 3, "total": 7, "last": 2}
    clean = make(Tally)
    clean.open(None)
    clean.restore_state({"total": 1})
    clean.snapshot_state()
    type(clean)._esault_read_state(clean)
    assert not _has_dict(clean)
    clean.__dict__  # noqa: B018 - what the reader used to do
    assert _has_dict(clean)
