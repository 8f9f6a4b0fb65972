"""ParkedStates, the part of a bolt SPU's PE table that keeps expired PEs' state, on a real state file."""

from __future__ import annotations

from typing import Any

from esault.checkpoint.store import bucket_of
from esault.datapath.parking import ParkedStates
from esault.keyhash import key_hash
from esault.transport.codec import decode, encode


class Pe:
    def __init__(self, state: Any = None) -> None:
        self.state = state

    def restore_state(self, state: dict) -> None:
        self.state = state


class FakeCheckpointStore:
    def __init__(self, saved: dict[Any, Any]) -> None:
        self.saved = saved
        self.asked_epochs: list[int | None] = []

    def read_key(self, unit: str, key: Any, epoch: int | None = None) -> tuple[int | None, Any]:
        assert unit == "count"
        self.asked_epochs.append(epoch)
        return (1, self.saved.get(key))


class FakeSpu:
    """The SPU steps parking goes through: take a PE's state, encode it, the checkpoint store."""

    def __init__(self, checkpointed: dict[Any, Any] | None = None) -> None:
        self.store = FakeCheckpointStore(checkpointed or {})

    def _state_of(self, key: Any, pe: Pe) -> Any:
        return pe.state

    def _encode_state(self, key: Any, state: Any) -> bytes:
        return encode(state)

    def save_state(self, state: Any, owner: str) -> bytes | None:
        return encode(state)

    def _save_key(self, key: Any) -> bytes | None:
        return encode(key)

    def checkpoint_store(self) -> FakeCheckpointStore:
        return self.store


def parking(tmp_path, exactly_once: bool = False, spu: FakeSpu | None = None) -> ParkedStates:
    return ParkedStates(spu or FakeSpu(), tmp_path / "state" / "count.sqlite", exactly_once, "count",
                        "topology 't': bolt 'count'")


def test_an_expired_pes_state_waits_in_the_state_file_and_goes_back_into_the_keys_next_pe(tmp_path):
    parked = parking(tmp_path)
    parked.park([("a", Pe({"n": 3})), ("empty", Pe({}))])
    assert parked.keys == {"a"}  # an empty state has nothing to keep
    parked.close()
    again = parking(tmp_path)  # the file holds it, not the object
    again.keys.add("a")
    pe = Pe()
    again.unpark("a", pe)
    assert pe.state == {"n": 3} and again.keys == set()
    pe = Pe()
    again.unpark("a", pe)  # taken once: gone from the file
    assert pe.state is None
    again.close()


def test_a_moved_range_takes_exactly_its_parked_keys_out_of_the_state_file(tmp_path):
    parked = parking(tmp_path)
    keys = [f"k{i}" for i in range(40)]
    parked.park([(k, Pe({"k": k})) for k in keys])
    lo, hi = sorted(key_hash(k) for k in keys)[10], sorted(key_hash(k) for k in keys)[19]
    moved = parked.take(lo, hi)
    assert sorted(k for k, _ in moved) == sorted(k for k in keys if lo <= key_hash(k) <= hi)
    assert all(decode(blob) == {"k": k} for k, blob in moved)
    assert parked.keys == {k for k in keys if not lo <= key_hash(k) <= hi}
    assert parked.take(lo, hi) == []
    parked.close()


def test_under_exactly_once_a_parked_state_enters_the_next_snapshot_once_and_leaves_memory_when_it_completes(tmp_path):
    parked = parking(tmp_path, exactly_once=True, spu=FakeSpu({"old": {"n": 9}}))
    parked.park([("a", Pe({"n": 1}))])
    assert not (tmp_path / "state").exists()  # memory only, until a checkpoint holds it
    buckets: dict[int, list] = {}
    parked.snapshot_into(buckets, epoch=4)
    assert buckets == {bucket_of(key_hash("a")): ["a", {"n": 1}]}
    again: dict[int, list] = {}
    parked.snapshot_into(again, epoch=5)
    assert again == {}  # written in epoch 4 already
    parked.completed(3)
    assert "a" in parked.unsaved  # epoch 4 is not complete yet
    parked.completed(4)
    assert parked.unsaved == {} and parked.keys == {"a"}
    parked.keys.add("old")
    pe = Pe()
    parked.unpark("old", pe)  # not in memory: its latest completed checkpoint has it
    assert pe.state == {"n": 9}
    assert parked._checkpoint_store().asked_epochs == [4]  # the newest completion it heard of: no store listing
