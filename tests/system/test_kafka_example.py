"""examples/kafka_clicks.py runs against a broker it starts itself: sessions in the Kafka topic and the table."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from esault import JobConfig
from esault.testing import run_to_completion

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))
import kafka_clicks  # noqa: E402

pytestmark = pytest.mark.system


def test_the_kafka_clicks_example_starts_its_broker_and_writes_each_session_once_to_the_topic_and_the_table(
        tmp_path, monkeypatch):
    import pyarrow.dataset as ds

    monkeypatch.delenv("ESAULT_KAFKA_BOOTSTRAP", raising=False)
    try:
        topology = kafka_clicks.build_topology(total=3000, engine="pyarrow")
        config = JobConfig(data_dir=tmp_path / "data", elasticity=False, checkpoint_interval=0.3)
        run_to_completion(topology, workers=2, config=config, timeout=120)
        sessions = [(r["key"].decode(), json.loads(r["value"])) for r in kafka_clicks._BROKER.read("click-sessions")]
    finally:
        if kafka_clicks._BROKER is not None:
            kafka_clicks._BROKER.stop()
            kafka_clicks._BROKER = None
    in_topic = sorted((user, s["start"], s["end"], s["clicks"]) for user, s in sessions)
    files = [str(p) for p in (tmp_path / "data" / "kafka_clicks" / "warehouse" / "click_sessions").rglob("*.parquet")
             if "_esault" not in p.parts]
    table = ds.dataset(files, format="parquet").to_table(
        columns=["user", "session_start", "session_end", "clicks"]).to_pydict()
    in_table = sorted(zip(table["user"], table["session_start"], table["session_end"], table["clicks"]))
    assert in_topic == in_table
    assert len(set(in_topic)) == len(in_topic), "a session written twice"
    clicks = sum(s[3] for s in in_topic)
    assert clicks == 3000, "every click is in a session, those still open at the end (flush_on_close) too"
