"""Connector params are checked at build(), before anything connects: codecs by name, starts, ends, config."""

from __future__ import annotations

import json
import re

import pytest

from esault import TopologyBuilder, TopologyError
from esault.connectors import KafkaSink, KafkaSource
from esault.connectors.codecs import resolve_codec
from esault.connectors.staging import EpochStage
from esault.errors import ConnectorError
from esault.testing import CollectorBolt, ListSpout


class UpperCodec:
    """A user's codec, named by import path in the tests."""

    def decode(self, data: bytes) -> str:
        return data.decode().upper()

    def encode(self, value: str) -> bytes:
        return value.lower().encode()


NOT_A_CODEC = 42


@pytest.mark.parametrize(("name", "value", "raw"), [
    ("bytes", b"\x00\xff", b"\x00\xff"),
    ("utf-8", "héllo", "héllo".encode()),
    ("json", {"n": [1, 2]}, b'{"n":[1,2]}'),
    ("msgpack", {"n": [1, 2]}, None),
])
def test_named_codecs_round_trip_their_values(name, value, raw):
    codec = resolve_codec(name, "test")
    data = codec.encode(value)
    if raw is not None:
        assert data == raw
    assert codec.decode(data) == value


def test_a_users_codec_is_found_by_import_path_with_a_colon_or_a_dot():
    for path in (f"{__name__}:UpperCodec", f"{__name__}.UpperCodec"):
        assert resolve_codec(path, "test").decode(b"ab") == "AB"


@pytest.mark.parametrize(("spec", "match"), [
    ("jsn", "unknown codec 'jsn'; use one of 'bytes', 'json', 'msgpack', 'utf-8'"),
    ("no_such_module_x:Codec", "cannot import module 'no_such_module_x'"),
    (f"{__name__}:Missing", "has no 'Missing'"),
    (f"{__name__}:NOT_A_CODEC", "has no decode"),
    (3, "a codec is named by a string, got 3"),
])
def test_a_bad_codec_is_refused_naming_what_was_given_and_the_choices(spec, match):
    with pytest.raises(ConnectorError, match=match):
        resolve_codec(spec, "KafkaSource: params 'value'")


def test_the_bytes_and_utf8_codecs_refuse_other_values_naming_the_codecs_that_take_them():
    with pytest.raises(TypeError, match="choose 'utf-8', 'json' or 'msgpack'"):
        resolve_codec("bytes", "t").encode(5)
    with pytest.raises(TypeError, match="choose 'json' or 'msgpack'"):
        resolve_codec("utf-8", "t").encode(5)


def _source(**params) -> TopologyBuilder:
    b = TopologyBuilder("kafka-params")
    b.set_spout("orders", KafkaSource, params={"topic": "orders", "bootstrap": "localhost:9092", **params})
    b.set_bolt("c", CollectorBolt).shuffle_grouping("orders")
    return b


@pytest.mark.parametrize(("params", "match"), [
    ({"value": "jsn"}, "spout 'orders': KafkaSource: params 'value': unknown codec 'jsn'"),
    ({"key": "nope.mod:X"}, "params 'key': codec 'nope.mod:X': cannot import module 'nope.mod'"),
    ({"start": "beginning"}, "params 'start' is one of 'earliest', 'latest', 'committed' or {'timestamp'"),
    ({"end": "latest"}, "params 'end' is one of 'end' or {'timestamp'"),
    ({"start": {"timestamp": -5}}, "params 'start'"),
    ({"output": "message"}, "params 'output' is one of 'value', 'record'"),
    ({"topic": []}, "params 'topic' is a topic name, a list of them, or a pattern"),
    ({"topic": "^orders-[" }, "topic pattern '^orders-[' is not a regular expression"),
    ({"bootstrap": ""}, "params 'bootstrap' must name the brokers"),
    ({"config": {"group.id": "g"}}, "config 'group.id' is set by esault: pass params={'group': ...}"),
    ({"config": {"enable.auto.commit": True}}, "esault commits the offsets of each completed checkpoint"),
    ({"connect_timeout": 0}, "params 'connect_timeout' must be a number > 0"),
    ({"max_records": 1.5}, "params 'max_records' must be a whole number > 0"),
    ({"event_time": "time"}, "params 'event_time' is None, 'timestamp' (the record's) or 'field:NAME'"),
    ({"event_time": "field:"}, "params 'event_time' is None, 'timestamp' (the record's) or 'field:NAME'"),
    ({"watermarks": "yes"}, "params 'watermarks' is None (on with event_time), True or False, got 'yes'"),
    ({"idle_timeout": 0}, "params 'idle_timeout' must be a number > 0"),
])
def test_bad_source_params_fail_build_naming_the_param_and_the_fix(params, match):
    builder = _source(**params)
    with pytest.raises(TopologyError, match=re.escape(match)):
        builder.build()


def test_good_source_params_build():
    _source(value="json", start={"timestamp": 1}, end="end", output="record",
            config={"fetch.min.bytes": 1}).build()
    _source(topic=["a", "b"], key=f"{__name__}:UpperCodec").build()
    _source(event_time="timestamp").build()
    _source(value="json", event_time="field:at").build()
    _source(event_time="timestamp", idle_timeout=5, watermarks=False).build()


def test_watermarks_are_on_with_event_time_unless_the_params_say_otherwise():
    emits = KafkaSource.esault_emits_watermarks
    assert not emits({}) and emits({"event_time": "timestamp"}) and emits({"watermarks": True})
    assert not emits({"event_time": "field:at", "watermarks": False})


@pytest.mark.parametrize(("params", "match"), [
    ({"value": "yaml"}, "bolt 'out': KafkaSink: params 'value': unknown codec 'yaml'"),
    ({"config": {"transactional.id": "x"}}, "config 'transactional.id' is set by esault"),
    ({"topic": None}, "name params 'marker_topic'"),
])
def test_bad_sink_params_fail_build_naming_the_param(params, match):
    b = TopologyBuilder("kafka-sink-params")
    b.set_spout("s", ListSpout, params={"items": [[1, 1]]})
    b.set_bolt("out", KafkaSink, params={"bootstrap": "localhost:9092", "topic": "out", **params}).shuffle_grouping("s")
    with pytest.raises(TopologyError, match=match):
        b.build()


def test_staged_epochs_are_listed_in_order_read_back_and_deleted(tmp_path):
    stage = EpochStage(tmp_path / "stage")
    assert stage.epochs() == []
    stage.write(12, [["t", -1, b"k", b"v", None, 0]])
    stage.write(3, [["t", 0, None, json.dumps(1).encode(), [["h", b"x"]], 5]])
    (tmp_path / "stage" / "e000000000099.tmp").write_bytes(b"cut short")
    assert stage.epochs() == [3, 12]
    assert stage.read(3) == [["t", 0, None, b"1", [["h", b"x"]], 5]]
    stage.delete_leftovers()
    stage.delete(3)
    assert stage.epochs() == [12] and not list((tmp_path / "stage").glob("*.tmp"))


def test_a_tansu_binary_override_that_is_not_executable_is_refused_naming_the_variable(tmp_path, monkeypatch):
    from esault.errors import ConfigError
    from esault.testing.kafka import BROKER_BIN_ENV, tansu_binary

    plain = tmp_path / "tansu"
    plain.write_text("not a program")
    monkeypatch.setenv(BROKER_BIN_ENV, str(plain))
    with pytest.raises(ConfigError, match=f"{BROKER_BIN_ENV}=.* is not an executable file"):
        tansu_binary()
    plain.chmod(0o755)
    assert tansu_binary() == str(plain)
