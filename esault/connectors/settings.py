"""The Kafka connectors' params, checked before anything connects (so a bad one fails build()).

librdkafka settings pass through `config`, except the few esault owns: those
are params of their own, or fixed because the guarantees depend on them.
"""

from __future__ import annotations

from typing import Any, Mapping

from esault.errors import ConnectorError

START_NAMES = ("earliest", "latest", "committed")
OUTPUTS = ("value", "record")

SOURCE_OWNED = {
    "bootstrap.servers": "pass params={'bootstrap': 'host:port,...'}",
    "group.id": "pass params={'group': ...}",
    "enable.auto.commit": "esault commits the offsets of each completed checkpoint itself",
    "enable.auto.offset.store": "esault commits the offsets of each completed checkpoint itself",
    "enable.partition.eof": "esault needs partition-end events for bounded reads",
}
SINK_OWNED = {
    "bootstrap.servers": "pass params={'bootstrap': 'host:port,...'}",
    "transactional.id": "esault names it per sink instance (params={'transactional_id': prefix} to change the prefix)",
    "enable.idempotence": "the guarantee sets it (exactly_once and at_least_once: on)",
}


def check_bootstrap(what: str, bootstrap: Any) -> str:
    if not isinstance(bootstrap, str) or not bootstrap.strip():
        raise ConnectorError(f"{what}: params 'bootstrap' must name the brokers, e.g. 'localhost:9092', "
                             f"got {bootstrap!r}")
    return bootstrap.strip()


def check_config(what: str, config: Any, owned: Mapping[str, str]) -> dict[str, Any]:
    """The user's librdkafka settings, refusing the ones esault sets (the message says where they go)."""
    if config is None:
        return {}
    if not isinstance(config, Mapping) or not all(isinstance(k, str) for k in config):
        raise ConnectorError(f"{what}: params 'config' is a dict of librdkafka settings, e.g. "
                             f"{{'security.protocol': 'SASL_SSL'}}, got {config!r:.200}")
    for key in config:
        if key in owned:
            raise ConnectorError(f"{what}: config {key!r} is set by esault: {owned[key]}")
    return dict(config)


def check_topics(what: str, topic: Any) -> list[str]:
    """One topic, a list, or a pattern (a string starting with '^', a regular expression as in Kafka)."""
    topics = [topic] if isinstance(topic, str) else topic
    if (not isinstance(topics, (list, tuple)) or not topics
            or not all(isinstance(t, str) and t.strip() for t in topics)):
        raise ConnectorError(f"{what}: params 'topic' is a topic name, a list of them, or a pattern '^orders-.*', "
                             f"got {topic!r}")
    if any(t.startswith("^") for t in topics):
        import re

        for t in topics:
            if t.startswith("^"):
                try:
                    re.compile(t)
                except re.error as exc:
                    raise ConnectorError(f"{what}: topic pattern {t!r} is not a regular expression: {exc}") from None
    return list(topics)


def check_timestamp_spec(what: str, param: str, spec: Any, names: tuple[str, ...]) -> Any:
    """A name from `names`, or {'timestamp': epoch milliseconds}."""
    if isinstance(spec, str) and spec in names:
        return spec
    if isinstance(spec, Mapping) and set(spec) == {"timestamp"}:
        ms = spec["timestamp"]
        if isinstance(ms, int) and not isinstance(ms, bool) and ms >= 0:
            return {"timestamp": ms}
    choices = ", ".join(map(repr, names))
    raise ConnectorError(f"{what}: params {param!r} is one of {choices} or {{'timestamp': <epoch ms>}}, "
                         f"got {spec!r:.200}")


def check_positive(what: str, param: str, value: Any, whole: bool = False) -> Any:
    kinds = (int,) if whole else (int, float)
    if not isinstance(value, kinds) or isinstance(value, bool) or value <= 0:
        raise ConnectorError(f"{what}: params {param!r} must be a {'whole ' if whole else ''}number > 0, "
                             f"got {value!r}")
    return value


def check_event_time(what: str, spec: Any) -> str | None:
    """params 'event_time': None, "timestamp" or "field:NAME"."""
    if spec is None or spec == "timestamp":
        return spec
    if isinstance(spec, str) and spec.startswith("field:") and spec[len("field:"):]:
        return spec
    raise ConnectorError(f"{what}: params 'event_time' is None, 'timestamp' (the record's) or 'field:NAME' (a field "
                         f"of the decoded value), got {spec!r}")
