"""The side by side's keyed running count on esault (bench/kafka_side_by_side.py): topic in -> count -> topic out.

A module of its own so worker processes import its bolt by name. One PE per key keeps the running count as its
state (checkpointed: exactly_once, the default); each record leaves as (key, {"count": n, "t": t}), t carried
from the input record so a reader of the output times it from its produce.
"""

from __future__ import annotations

from typing import Any

from esault import Bolt, TopologyBuilder
from esault.connectors import KafkaSink, KafkaSource


class RunningCount(Bolt):
    """Per key: how many records it had so far, emitted with each one."""

    def open(self, context: Any) -> None:
        self.count = 0

    def process(self, tup: Any) -> None:
        self.count += 1
        self.emit(self.key, {"count": self.count, "t": tup.value["t"]})

    def snapshot_state(self) -> dict[str, Any]:
        return {"count": self.count}

    def restore_state(self, state: dict[str, Any]) -> None:
        self.count = state["count"]


def build(bootstrap: str, source: str, sink: str, instances: int = 2) -> Any:
    """KafkaSource (`instances`, in the workers) -> RunningCount (`instances` SPUs, by key) -> KafkaSink."""
    b = TopologyBuilder("kafka_count")
    b.set_spout("in", KafkaSource, instances, params={
        "topic": source, "bootstrap": bootstrap, "key": "utf-8", "value": "json", "max_records": 1000},
        max_pending=20_000, placement="worker")
    b.set_bolt("count", RunningCount, instances, elastic=False, pe_idle_timeout=None).key_grouping("in")
    b.set_bolt("out", KafkaSink, instances, params={"bootstrap": bootstrap, "topic": sink, "key": "utf-8",
                                                    "value": "json"},
               elastic=False, placement="worker").shuffle_grouping("count")
    return b.build()
