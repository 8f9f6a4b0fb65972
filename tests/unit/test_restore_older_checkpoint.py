"""Restoring an older checkpoint while later ones are stored: the new timeline never reads their rows.

State rows are incremental (a checkpoint stores the keys changed since the previous one), so the
checkpoints a restored job takes read unchanged keys from earlier epochs. Through the real store and
the coordinator's restore_point(), with a model of what each timeline holds.
"""

from __future__ import annotations

from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st

from esault import JobConfig, TopologyBuilder
from esault.checkpoint.coordinator import AckCollector, CheckpointCoordinator
from esault.checkpoint.store import CheckpointStore, bucket_of, instance_slot, pack_entries
from esault.keyhash import KEY_SPACE_MAX, key_hash
from esault.testing import CollectorBolt, ListSpout
from esault.transport.codec import encode

KEYS = [f"k{i}" for i in range(60)]
STATES = st.dictionaries(st.sampled_from(KEYS), st.integers(0, 99), max_size=20)


def rows(states: dict) -> list[tuple[int, bytes]]:
    buckets: dict[int, list] = {}
    for key, state in states.items():
        buckets.setdefault(bucket_of(key_hash(key)), []).extend((key, state))
    return [(b, pack_entries(flat)) for b, flat in buckets.items()]


def coordinator(path) -> CheckpointCoordinator:
    """A coordinator over the real store at `path`, for a job whose actors are not needed by restore_point()."""
    builder = TopologyBuilder("t")
    builder.set_spout("src", ListSpout, params={"items": []})
    builder.set_bolt("u", CollectorBolt, params={"name": "t"}).key_grouping("src")
    job = SimpleNamespace(name="t", topology=builder.build(), config=JobConfig(),
                          ctx=SimpleNamespace(checkpoint_path=path))
    return CheckpointCoordinator(job, AckCollector())


def take(store: CheckpointStore, epoch: int, states: dict, kind: str = "checkpoint") -> None:
    """One completed checkpoint that changed `states` (and rewrote the instance row with their sum)."""
    store.write_states("u", epoch, 0, rows(states))
    store.write_states("u", epoch, 1, [(instance_slot(0), encode(sum(states.values())))])
    store.complete(epoch, kind, {"src": {0: epoch}})


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(STATES, st.booleans()), min_size=2, max_size=6), st.integers(0, 5),
       st.lists(STATES, min_size=1, max_size=3))
def test_checkpoints_after_restoring_an_older_one_read_only_its_timeline_never_the_abandoned_later_rows(
        tmp_path_factory, before, pick, after):
    path = tmp_path_factory.mktemp("c") / "c.sqlite"
    store = CheckpointStore(path)
    timeline: dict[int, dict] = {}
    state: dict = {}
    for epoch, (changed, savepoint) in enumerate(before, start=1):
        take(store, epoch, changed, "savepoint" if savepoint else "checkpoint")
        state = {**state, **changed}
        timeline[epoch] = state
    restore = 1 + pick % (len(before) - 1)  # older than the newest: later checkpoints are stored

    coord = coordinator(path)
    point = coord.restore_point(restore)
    assert point is not None and point.epoch == restore
    assert coord.rewound is not None and f"checkpoint {restore}" in coord.rewound
    state = timeline[restore]
    assert store.read_range("u", restore, 0, KEY_SPACE_MAX) == state, "the restore reads exactly its state"
    for changed in after:  # the restored job takes checkpoints of the keys it changes
        epoch = coord.next_epoch
        coord.next_epoch += 1
        assert epoch > len(before), "epoch numbers are never reused"
        take(store, epoch, changed)
        state = {**state, **changed}
        assert store.read_range("u", epoch, 0, KEY_SPACE_MAX) == state  # a restart or a rollback reads this
        assert store.read_slot("u", epoch, instance_slot(0)) == sum(changed.values())
        assert {k: store.read_key("u", k) for k in KEYS} == \
            {k: (k in state, state.get(k)) for k in KEYS}, "a parked key wakes with its state on this timeline"
    assert [c.epoch for c in store.completed()][:restore] == list(range(1, restore + 1))
    assert all(c.epoch <= restore or c.epoch > len(before) for c in store.completed())
    assert store.verify().damage == {}
    coord.store.close()
    store.close()


def test_restoring_the_newest_checkpoint_forgets_nothing(tmp_path):
    store = CheckpointStore(tmp_path / "c.sqlite")
    take(store, 1, {"a": 1})
    take(store, 2, {"a": 2}, "savepoint")
    coord = coordinator(tmp_path / "c.sqlite")
    assert coord.restore_point(2).epoch == 2
    assert coord.rewound is None
    assert [c.epoch for c in store.completed()] == [1, 2]
    coord.store.close()
    store.close()
