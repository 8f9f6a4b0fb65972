"""The spout's hooks beyond emitting (real actors, one process): on_checkpoint_complete() hears each completed
checkpoint with the position it recorded, and dead_letter() sends an input the source gave up on to the job's
dead letters. KafkaSource commits offsets and dead-letters poison records through them."""

from __future__ import annotations

import json
import threading
from typing import Any

from esault import JobConfig, TopologyBuilder
from esault.checkpoint.store import CheckpointStore
from esault.testing import CollectorBolt, ListSpout, run_to_completion

_COMPLETED: list[tuple[int, Any]] = []
_LOCK = threading.Lock()


class SlowListSpout(ListSpout):
    """A ListSpout recording the checkpoints it hears of, that emits 500 more items per checkpoint heard (so a
    run spans several checkpoints however fast the machine is)."""

    def limit(self) -> int:
        with _LOCK:
            return min(len(self.items), (len(_COMPLETED) + 1) * 500)

    def on_checkpoint_complete(self, epoch: int, position: Any) -> None:
        with _LOCK:
            _COMPLETED.append((epoch, position))


class PoisonSpout(ListSpout):
    """Items whose value is "poison" are dead-lettered instead of emitted."""

    def next_tuple(self) -> None:
        if self.position < len(self.items):
            key, value = self.items[self.position]
            if value == "poison":
                self.dead_letter(key, value, "cannot decode", msg_id={"index": self.position})
                self.position += 1
                return
        super().next_tuple()


def test_each_completed_checkpoint_reaches_the_spout_with_the_position_that_checkpoint_recorded(tmp_path):
    _COMPLETED.clear()
    b = TopologyBuilder("hooks")
    b.set_spout("src", SlowListSpout, params={"items": [[i % 7, i] for i in range(3000)], "per_call": 2})
    b.set_bolt("c", CollectorBolt).shuffle_grouping("src")
    config = JobConfig(data_dir=tmp_path / "data", elasticity=False, checkpoint_interval=0.05)
    run_to_completion(b, workers="in-process", config=config, timeout=60)
    store = CheckpointStore(tmp_path / "data" / "hooks" / "checkpoints.sqlite")
    recorded = {c.epoch: c.positions["src"][0] for c in store.completed()}
    store.close()
    heard = list(_COMPLETED)
    assert len(heard) >= 5
    assert [e for e, _ in heard] == sorted({e for e, _ in heard}), "an epoch heard twice or out of order"
    assert all(recorded[epoch] == position for epoch, position in heard)


def test_a_spout_dead_letters_an_input_it_cannot_emit_and_goes_on(tmp_path):
    b = TopologyBuilder("spout-poison")
    b.set_spout("src", PoisonSpout, params={"items": [["a", "ok1"], ["b", "poison"], ["c", "ok2"]], "per_call": 1})
    b.set_bolt("c", CollectorBolt).shuffle_grouping("src")
    config = JobConfig(data_dir=tmp_path / "data", elasticity=False)
    result = run_to_completion(b, workers="in-process", config=config, timeout=60, check=False)
    assert [v for _, v in result["c"]] == ["ok1", "ok2"]
    letters = [json.loads(line) for line in (tmp_path / "data" / "spout-poison" / "dead_letters.jsonl")
               .read_text().splitlines()]
    assert [(d["unit"], d["key"], d["value"], d["msg_id"], d["error"]) for d in letters] == [
        ("src", "b", "poison", {"index": 1}, "cannot decode")]
