"""The process's one SparkSession: created lazily on first use, then reused.

Master: the argument, else ESAULT_SPARK_MASTER, else local[*]. A standalone
cluster is "spark://host:7077"; its executors write the table files, so the
warehouse must be a filesystem path mounted at the same place on the driver
and every worker (see docs/SPARK_SINK.md).

Thread-safe: any thread may call get_session(); the first call starts the JVM
(10-20 s), later calls return at once. A session that was stopped is replaced
on the next call.
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from esault.errors import SinkError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

MASTER_ENV = "ESAULT_SPARK_MASTER"
DEFAULT_MASTER = "local[*]"
APP_NAME = "esault-spark-sink"

_lock = threading.Lock()
_session: "SparkSession | None" = None


def resolve_master(master: str | None = None) -> str:
    """argument > ESAULT_SPARK_MASTER > local[*]."""
    if master:
        return master
    return os.environ.get(MASTER_ENV) or DEFAULT_MASTER


def session_conf(master: str, warehouse: Path | None = None) -> dict[str, str]:
    """The settings the sink starts Spark with (fast local start, Arrow transfer, UTC)."""
    conf = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "4",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.catalogImplementation": "in-memory",
        # Tables list their partition directories; no per-batch catalog update needed.
        "spark.sql.hive.manageFilesourcePartitions": "false",
        "spark.sql.sources.partitionOverwriteMode": "static",
    }
    if master.startswith("local"):
        conf["spark.driver.host"] = "127.0.0.1"
        conf["spark.driver.bindAddress"] = "127.0.0.1"
    # Only managed tables live here (the sink's tables are external, at their own
    # LOCATION); keep Spark from creating ./spark-warehouse in the working directory.
    home = Path(warehouse) if warehouse is not None else Path(tempfile.gettempdir()) / "esault-spark-warehouse"
    conf["spark.sql.warehouse.dir"] = str(home.resolve())
    return conf


def _alive(session: "SparkSession") -> bool:
    sc = session.sparkContext
    return getattr(sc, "_jsc", None) is not None


def get_session(
    master: str | None = None,
    warehouse: Path | None = None,
    extra_conf: dict[str, str] | None = None,
) -> "SparkSession":
    """The shared SparkSession, started on first call with session_conf().

    A session that is already running (started by the sink or by anyone else in
    this process) is reused as is: Spark allows one per process. If it runs on
    another master than requested, a warning says so.
    """
    global _session
    wanted = resolve_master(master)
    with _lock:
        if _session is not None and _alive(_session):
            _warn_master(_session, wanted, master)
            return _session
        try:
            from pyspark.sql import SparkSession
        except ImportError as exc:  # pragma: no cover - pyspark is a dependency
            raise SinkError(f"the Spark sink needs pyspark: pip install 'pyspark>=4' ({exc})") from None
        active = SparkSession.getActiveSession()
        if active is not None and _alive(active):
            _session = active
            _warn_master(active, wanted, master)
            return active
        if wanted.startswith("local"):
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = SparkSession.builder.master(wanted).appName(APP_NAME)
        for k, v in {**session_conf(wanted, warehouse), **(extra_conf or {})}.items():
            builder = builder.config(k, v)
        try:
            session = builder.getOrCreate()
        except Exception as exc:
            raise SinkError(
                f"could not start Spark (master {wanted!r}): {exc}. Is Java 17+ installed and JAVA_HOME set? "
                f"For a cluster, is {wanted} reachable? Set {MASTER_ENV} or the sink's master param."
            ) from exc
        session.sparkContext.setLogLevel("WARN")
        _session = session
        log.info("started SparkSession on %s", wanted)
        return session


def _warn_master(session: "SparkSession", wanted: str, explicit: str | None) -> None:
    running = session.sparkContext.master
    if running != wanted and (explicit or os.environ.get(MASTER_ENV)):
        log.warning(
            "a SparkSession on %s is already running in this process; reusing it instead of %s "
            "(one SparkSession per process)",
            running,
            wanted,
        )


def stop_session() -> None:
    """Stop the shared session (tests, tools); the next get_session() starts a new one."""
    global _session
    with _lock:
        if _session is not None:
            _session.stop()
            _session = None

