"""Connectors to the systems streams live in: Kafka today (docs/CONNECTORS.md).

confluent-kafka (librdkafka) is imported when a connector opens, so esault
imports without it; `pip install 'esault[kafka]'` brings it.
"""

from esault.connectors.kafka_sink import KafkaRecord, KafkaSink
from esault.connectors.kafka_source import KafkaSource

__all__ = ["KafkaRecord", "KafkaSink", "KafkaSource"]
