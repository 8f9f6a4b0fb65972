"""A keyed SPU's snapshot encoded in slices after its barrier left (datapath/pending_snapshot.py) holds every
key's state as it was at the barrier: a batch that changes a pending key encodes it first.

The spout emits item i to key k{i % KEYS}; each PE appends the values it sees to a list, in place. A
completed checkpoint records the spout's position P (the items before its barrier), so each key's state in
it must be exactly its values among items[:P]: a value from after the barrier, or one missing, is a state
encoded at the wrong time. One key per slice and checkpoints every 50 ms keep slices pending under load.
"""

from __future__ import annotations

import bisect
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from esault import Bolt, TopologyBuilder
from esault.checkpoint.snapshots import Snapshot
from esault.checkpoint.store import CheckpointStore, pack_entries
from esault.datapath.pending_snapshot import PendingSnapshot
from esault.messages.checkpoints import CheckpointAck
from esault.keyhash import KEY_SPACE_MAX
from esault.testing import ListSpout, wait_until
from esault.transport.codec import encode

KEYS = 120
ITEMS = 24000


class HistoryBolt(Bolt):
    """Per key: every value it saw, in order, in a list it appends to (a state changed in place), and the
    last one stored under a computed name: `seen` is a state slot, `last` in the PE's __dict__
    (datapath/state_slots.py); a snapshot must hold both as at the barrier."""

    def open(self, context: Any) -> None:
        self.seen = []

    def process(self, tup: Any) -> None:
        self.seen.append(tup.value)
        setattr(self, "la" + "st", tup.value)  # noqa: B010 - a computed name: not a slot


class PacedListSpout(ListSpout):
    """ListSpout at `rate` items a second: the run spans many checkpoints."""

    def __init__(self, items: list, rate: float = 6000.0) -> None:
        super().__init__(items, per_call=16)
        self.rate = rate
        self.started: float | None = None

    def limit(self) -> int:
        now = time.monotonic()
        if self.started is None:
            self.started = now - self.position / self.rate
        return min(len(self.items), int((now - self.started) * self.rate))


@pytest.mark.parametrize("run, idle_timeout", [(1, None), (40, 0.01), (1, 0.1)],
                         ids=["round-robin", "runs-and-expiry", "round-robin-through-generations"])
def test_every_checkpoint_holds_each_key_as_at_its_barrier_while_slices_interleave_with_batches(
        cluster, config, run, idle_timeout):
    """run: consecutive items per key (40: a key then idles, and expires, parked, while slices are pending).
    A 0.1 s idle timeout retires the active generation every 25 ms while each key comes back every 20 ms:
    the batch loop often finds a pending key's PE in an older generation, wakes it, and must encode it first."""
    items = [(f"k{(i // run) % KEYS}", i) for i in range(ITEMS)]
    per_key: dict[str, list[int]] = {}
    for key, i in items:
        per_key.setdefault(key, []).append(i)
    builder = TopologyBuilder("slices")
    builder.set_spout("src", PacedListSpout, params={"items": items})
    builder.set_bolt("hist", HistoryBolt, 2).key_grouping("src")
    job = cluster.submit(builder.build(), config.replace(checkpoint_interval=0.05, snapshot_slice_keys=1,
                                                        pe_idle_timeout=idle_timeout))
    store = CheckpointStore(config.data_dir / "slices" / "checkpoints.sqlite")
    checked: set[int] = set()

    def check_new_checkpoints() -> None:
        for done in store.completed():
            if done.epoch in checked:
                continue
            position = done.positions["src"][0]
            states = store.read_range("hist", done.epoch, 0, KEY_SPACE_MAX)
            for key, indices in per_key.items():
                expected = indices[:bisect.bisect_left(indices, position)]
                state = states.get(key) or {}
                got = state.get("seen", [])
                assert got == expected, (f"checkpoint {done.epoch} (spout at {position}): {key} holds "
                                         f"{got[-3:]} at its end, expected {expected[-3:]}")
                assert state.get("last") == (expected[-1] if expected else None), (done.epoch, key, state)
            checked.add(done.epoch)

    try:
        def done() -> bool:
            check_new_checkpoints()
            return job.wait(0.01)
        wait_until(done, 120, interval=0.02, message="the job finishing, every checkpoint checked on the way")
        job.stop()
        check_new_checkpoints()
    finally:
        store.close()
    mid_run = [e for e in checked if e != max(checked)]
    assert len(mid_run) >= 5, f"only checkpoints {sorted(checked)} were checked: too few mid-run ones"


@pytest.mark.parametrize("guarantee", ["exactly_once", "at_least_once"])
def test_the_time_an_spu_spends_encoding_snapshots_is_counted_under_exactly_once_only(cluster, config, guarantee):
    """stats.snapshot_us (esault_snapshot_seconds_total): what checkpoints cost the processing thread. Under
    exactly_once every keyed SPU that changed keys encoded some; no snapshot, nothing counted; it never
    exceeds the run's wall time."""
    items = [(f"k{i % KEYS}", i) for i in range(6000)]
    builder = TopologyBuilder("timed")
    builder.set_spout("src", PacedListSpout, params={"items": items, "rate": 12000.0})
    builder.set_bolt("hist", HistoryBolt, 2).key_grouping("src")
    started = time.monotonic()
    job = cluster.submit(builder.build(), config.replace(guarantee=guarantee, checkpoint_interval=0.05,
                                                        snapshot_slice_keys=4))
    assert job.wait(60), job.status()
    ran = time.monotonic() - started
    job.stop()
    status = job.status()
    hist, src = status["units"]["hist"], status["units"]["src"]
    assert hist["processed"] == len(items)
    per_spu = [spu["snapshot_us"] for spu in hist["spus"].values()]
    if guarantee == "exactly_once":
        assert len(per_spu) == 2 and min(per_spu) > 0, per_spu
        assert hist["snapshot_us"] == sum(per_spu) and max(per_spu) < ran * 1e6, (per_spu, ran)
    else:
        assert per_spu and hist["snapshot_us"] == 0, per_spu
    assert src["snapshot_us"] == 0


ints = st.integers(-2**63, 2**64 - 1)
entries = st.lists(st.tuples(st.integers(0, 7), st.text(max_size=5), ints | st.lists(ints, max_size=3)),
                   max_size=60)


@settings(max_examples=100, deadline=None)
@given(entries)
def test_a_row_built_entry_by_entry_is_the_bytes_pack_entries_makes_of_the_whole_list(rows):
    pending = PendingSnapshot(Snapshot(CheckpointAck(1, 1, "u", 0, None)), [], 1, object())
    expected: dict[int, list] = {}
    for bucket, key, state in rows:
        pending.add(bucket, encode(key) + encode(state))
        expected.setdefault(bucket, []).extend((key, state))
    assert dict(pending.rows()) == {bucket: pack_entries(flat) for bucket, flat in expected.items()}


def test_a_pending_snapshot_hands_out_its_listed_pes_in_slices_then_the_rest_once():
    pending = PendingSnapshot(Snapshot(CheckpointAck(1, 1, "u", 0, None)), ["a", "b", "c", "a", "d"], 2, object())
    assert pending.take_slice() == ["a", "b"] and pending.left == 3
    assert pending.take_rest() == ["c", "a", "d"] and pending.left == 0
    assert pending.take_rest() == [] and pending.take_slice() == []
