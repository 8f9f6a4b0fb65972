"""The per-SPU PE class (esault/datapath/pe_class.py): a PE's state is the user's attributes, nothing of the runtime's."""

from __future__ import annotations

import abc
from typing import Any

import msgpack
from hypothesis import given
from hypothesis import strategies as st

from esault import Bolt
from esault.checkpoint.store import bucket_of
from esault.datapath.pe_class import NO_BUCKET, bucket_of_key, pe_class, state_is_instance_dict
from esault.keyhash import key_hash
from esault.windows import WindowBolt
from esault.windows.assigners import Tumbling


class Counter(Bolt):
    """A word-count PE: its state is `count` and `seen`."""

    def __init__(self, start: int = 0) -> None:
        self.start = start

    def open(self, context: Any) -> None:
        self.count = self.start
        self.seen: list[str] = []

    def process(self, tup: Any) -> None:
        self.count += tup.value
        self.seen.append(tup.key)
        self.emit(self.key, self.count)


class OwnState(Counter):
    def snapshot_state(self) -> dict[str, Any]:
        return {"count": self.count}


class Tup:
    def __init__(self, key: Any, value: Any) -> None:
        self.key, self.value = key, value


def make(cls: type, emitted: list, **params: Any) -> Any:
    klass = pe_class(cls, lambda k, v: emitted.append((k, v)), lambda: "anchor", "services", "stats")
    pe = klass(**params)
    pe.key = "w"
    pe._esault_bucket = bucket_of_key("w")
    pe.open(None)
    return pe


def test_a_pe_keeps_its_class_name_and_behaviour_and_emits_through_the_spu_path() -> None:
    emitted: list = []
    pe = make(Counter, emitted, start=5)
    pe.process(Tup("w", 2))
    assert isinstance(pe, Counter)
    assert type(pe).__name__ == "Counter" and type(pe).__qualname__ == Counter.__qualname__
    assert type(pe).__module__ == Counter.__module__
    assert emitted == [("w", 7)]
    assert pe._esault_defer() == "anchor" and pe._esault_spu == "services" and pe._esault_stats == "stats"


def test_a_pe_state_holds_only_the_user_attributes_and_the_checkpoint_reader_agrees() -> None:
    pe = make(Counter, [], start=1)
    pe.process(Tup("w", 1))
    assert pe.snapshot_state() == {"start": 1, "count": 2, "seen": ["w"]}
    assert type(pe)._esault_read_state(pe) == pe.snapshot_state()
    assert pe.__dict__ == {}  # every attribute Counter stores is a slot (datapath/state_slots.py)
    assert pe.key == "w"  # a slot too, but not state


def test_a_packed_state_restores_to_an_equal_pe() -> None:
    pe = make(Counter, [], start=3)
    pe.process(Tup("w", 4))
    blob = msgpack.packb(type(pe)._esault_read_state(pe))
    again = make(Counter, [])
    again.restore_state(msgpack.unpackb(blob))
    assert again.snapshot_state() == pe.snapshot_state() == {"start": 3, "count": 7, "seen": ["w"]}


def test_only_a_class_that_keeps_the_default_snapshot_is_packed_as_its_dict() -> None:
    assert state_is_instance_dict(Counter)
    assert not state_is_instance_dict(OwnState)


def test_a_metaclass_and_init_subclass_of_the_user_class_are_kept() -> None:
    class Abstract(Bolt, metaclass=abc.ABCMeta):
        def process(self, tup: Any) -> None:
            pass

    class Windowed(WindowBolt):
        window = Tumbling(10.0)

    assert isinstance(pe_class(Abstract, print, print, None, None), abc.ABCMeta)
    assert pe_class(Windowed, print, print, None, None)._esault_core is not None


@given(st.one_of(st.text(), st.integers(min_value=-(2**63), max_value=2**64 - 1), st.binary(),
                 st.tuples(st.text(), st.integers(min_value=0, max_value=10))))
def test_the_bucket_kept_on_a_pe_is_the_bucket_of_its_key_hash(key: Any) -> None:
    assert bucket_of_key(key) == bucket_of(key_hash(key))


def test_a_key_that_cannot_be_hashed_for_routing_has_no_bucket_yet() -> None:
    assert bucket_of_key(frozenset({1})) == NO_BUCKET
