"""The process's one SparkSession: created lazily on first use, then reused.

Master: the argument, else ESAULT_SPARK_MASTER, else local[*]. A standalone
cluster is "spark://host:7077"; its executors write the table files, so the
warehouse must be a filesystem path mounted at the same place on the driver
and every worker (see docs/SPARK_SINK.md). "sc://host:15002" is a Spark Connect
server: the session is a remote client (no JVM in this process, no
SparkContext), and the server's executors write the files, so the same holds
for the warehouse path.

Thread-safe: any thread may call get_session(); the first call starts the JVM
(10-20 s) or connects, later calls return at once. A session that was stopped
is replaced on the next call. One classic session per process (Spark's rule),
plus one Connect session per sc:// URL: they do not share a JVM, so a process
may use both.
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from esault.errors import SinkError
from spark_sink.jvm_launch import launch_without_preexec

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

MASTER_ENV = "ESAULT_SPARK_MASTER"
DEFAULT_MASTER = "local[*]"
APP_NAME = "esault-spark-sink"

_lock = threading.Lock()
_session: "SparkSession | None" = None
_remote: dict[str, "SparkSession"] = {}
CONNECT_SCHEME = "sc://"


def resolve_master(master: str | None = None) -> str:
    """argument > ESAULT_SPARK_MASTER > local[*]."""
    if master:
        return master
    return os.environ.get(MASTER_ENV) or DEFAULT_MASTER


def is_connect(master: str) -> bool:
    """An sc:// master is a Spark Connect server, reached by a remote session."""
    return master.startswith(CONNECT_SCHEME)


def is_remote_session(session: "SparkSession") -> bool:
    """A Spark Connect session: no SparkContext, no JVM in this process (never touch _jvm/_jsc on it)."""
    return type(session).__module__.startswith("pyspark.sql.connect")


def _on_loopback(master: str) -> bool:
    host = master.split("://", 1)[-1].split(":", 1)[0]
    return master.startswith("local") or host in ("127.0.0.1", "localhost")


def connect_conf() -> dict[str, str]:
    """The runtime settings a Spark Connect session gets (the server owns the static ones)."""
    keep = ("spark.sql.shuffle.partitions", "spark.sql.execution.arrow.pyspark.enabled",
            "spark.sql.session.timeZone", "spark.sql.hive.manageFilesourcePartitions",
            "spark.sql.sources.partitionOverwriteMode", "spark.sql.parquet.outputTimestampType")
    conf = session_conf(DEFAULT_MASTER)
    return {k: conf[k] for k in keep}


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
        # The type pyarrow (the transfer file, engine="pyarrow") writes too; Spark's default INT96 is legacy
        # (Impala/old Hive) and costs a conversion per value.
        "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    }
    if _on_loopback(master):  # local[*], or a cluster on this machine: executors reach the driver there
        conf["spark.driver.host"] = "127.0.0.1"
        conf["spark.driver.bindAddress"] = "127.0.0.1"
    # Only managed tables live here (the sink's tables are external, at their own
    # LOCATION); keep Spark from creating ./spark-warehouse in the working directory.
    home = Path(warehouse) if warehouse is not None else Path(tempfile.gettempdir()) / "esault-spark-warehouse"
    conf["spark.sql.warehouse.dir"] = str(home.resolve())
    return conf


def _alive(session: "SparkSession") -> bool:
    if is_remote_session(session):
        return not session.is_stopped
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
    if is_connect(wanted):
        return _connect(wanted, extra_conf)
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
        if _on_loopback(wanted):
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        launch_without_preexec()
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


def _connect(url: str, extra_conf: dict[str, str] | None) -> "SparkSession":
    """The Connect session for `url`, created on first use (a gRPC channel: no JVM here)."""
    with _lock:
        session = _remote.get(url)
        if session is not None and _alive(session):
            return session
        try:
            from pyspark.sql.connect.session import SparkSession as RemoteSparkSession
        except ImportError as exc:
            raise SinkError(
                f"a Spark Connect master ({url}) needs the Connect client: pip install 'pyspark[connect]>=4' ({exc})"
            ) from None
        # builder.remote(...).create(), not pyspark.sql.SparkSession.builder: that one switches the whole
        # process to Connect mode (SPARK_CONNECT_MODE_ENABLED), under a classic session that may be running.
        builder = RemoteSparkSession.builder.remote(url)
        for k, v in {**connect_conf(), **(extra_conf or {})}.items():
            builder = builder.config(k, v)
        try:
            session = builder.create()
            session.version  # noqa: B018 - a round trip: fail here, with the hint, if nothing serves `url`
        except Exception as exc:
            raise SinkError(
                f"could not reach the Spark Connect server at {url}: {exc}. Is it running "
                f"(sbin/start-connect-server.sh) and listening there? Set {MASTER_ENV} or the sink's master param."
            ) from exc
        _remote[url] = session
        log.info("connected to Spark Connect at %s (Spark %s)", url, session.version)
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


def stop_session(master: str | None = None) -> None:
    """Stop shared sessions (tests, tools): all of them, or only the one for `master` (an sc:// URL, or
    anything else for the classic one); the next get_session() starts anew."""
    global _session
    with _lock:
        if master is None or not is_connect(master):
            if _session is not None:
                _session.stop()
                _session = None
        for url in list(_remote):
            if master is None or url == master:
                _remote.pop(url).stop()
