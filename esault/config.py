"""Frozen, validated configuration: argument > ESAULT_* environment > default.

JobConfig holds job-wide settings; ElasticityConfig holds one bolt's
elasticity parameters (the paper's MAX_LATENCY, PROBE_PERIOD, ...).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping

from esault.errors import ConfigError
from esault.storage.location import StorageLocation


CLUSTER_KINDS = ("processes", "threads", "static")


def check_cluster(value: object, where: str) -> None:
    """A cluster kind, or a Ray address ray://HOST:PORT or ray://auto; ConfigError says what was given."""
    if value is None or value in CLUSTER_KINDS:
        return
    if isinstance(value, str) and value.startswith("ray://") and len(value) > len("ray://"):
        return
    raise ConfigError(f"{where} must be one of {', '.join(CLUSTER_KINDS)} or a Ray cluster (ray://HOST:PORT, "
                      f"ray://auto), got {value!r}")


def _positive(owner: str, name: str, value: float | int | None, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 < value < math.inf:
        hint = " or None (never)" if allow_none else ""
        raise ConfigError(f"{owner}.{name} must be a number > 0{hint}, got {value!r}")


def _whole(owner: str, name: str, value: object, minimum: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ConfigError(f"{owner}.{name} must be a whole number >= {minimum}, got {value!r}")


def _fraction(owner: str, name: str, value: float) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value <= 1:
        raise ConfigError(f"{owner}.{name} must be a fraction in [0, 1], got {value!r}")


SPU_STOP_TIMEOUT = 45.0
"""Seconds an SPU may take to stop (its queued messages, then its checkpoint writer's close, at most
30 s). One that does not stop in time is stuck: a thread cannot be killed, and
an SPU that never answers stalls every checkpoint and reconfiguration of its job, so the worker exits
(ExitCode.STUCK_SPU) after logging every thread's stack, and the driver replaces its SPUs as for a crash
(a restart policy brings the worker back). Flink's task cancellation watchdog does the same."""


MAX_SPUS = 1024
"""The most SPUs one unit may run (its max_spus and parallelism are capped here): each SPU is an actor with
a thread and its queues, so a number beyond this is a mistake, and refusing it costs nothing."""


@dataclass(frozen=True, slots=True)
class ElasticityConfig:
    """One bolt's elasticity parameters (PAPER_NOTES section 5).

    Times named *_reaction_time count probe periods; factors are fractions.
    """

    elastic: bool = True
    max_latency: float = 0.1
    probe_period: float = 1.0
    overload_reaction_time: int = 5
    overload_reaction_factor: float = 0.5
    low_watermark: float = 0.3
    underload_reaction_time: int = 10
    underload_reaction_factor: float = 0.8
    peak_reset_factor: float = 1.5
    min_spus: int = 1
    max_spus: int = 8
    cooldown: float = 5.0
    min_split_gain: float = 0.1
    """Another split of the bolt needs the last one to have raised its processing rate by this fraction of what
    the split SPU carried (0: never hold). A split whose SPUs only share busy cores adds nothing, and the
    backlog its pause leaves keeps the probes timing out (docs/ELASTICITY.md, "Splits that add nothing")."""

    def __post_init__(self) -> None:
        o = "ElasticityConfig"
        _positive(o, "max_latency", self.max_latency)
        _positive(o, "probe_period", self.probe_period)
        for name in ("overload_reaction_time", "underload_reaction_time", "min_spus", "max_spus"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{o}.{name} must be a whole number >= 1, got {value!r}")
        for name in ("overload_reaction_factor", "low_watermark", "underload_reaction_factor"):
            _fraction(o, name, getattr(self, name))
        if not isinstance(self.elastic, bool):
            raise ConfigError(f"{o}.elastic must be true or false, got {self.elastic!r}")
        if (not isinstance(self.peak_reset_factor, (int, float)) or isinstance(self.peak_reset_factor, bool)
                or not 1 <= self.peak_reset_factor < math.inf):
            raise ConfigError(f"{o}.peak_reset_factor must be >= 1, got {self.peak_reset_factor!r}")
        if self.max_spus > MAX_SPUS:
            raise ConfigError(f"{o}.max_spus is {self.max_spus}; a unit runs at most {MAX_SPUS} SPUs (MAX_SPUS)")
        if self.min_spus > self.max_spus:
            raise ConfigError(
                f"{o}: min_spus ({self.min_spus}) is greater than max_spus ({self.max_spus}); "
                "raise max_spus or lower min_spus"
            )
        if (not isinstance(self.cooldown, (int, float)) or isinstance(self.cooldown, bool)
                or not 0 <= self.cooldown < math.inf):
            raise ConfigError(f"{o}.cooldown must be a number >= 0 seconds, got {self.cooldown!r}")
        if (not isinstance(self.min_split_gain, (int, float)) or isinstance(self.min_split_gain, bool)
                or not 0 <= self.min_split_gain <= 10):
            raise ConfigError(f"{o}.min_split_gain must be a fraction of the rate between 0 and 10 (0.1: the rate "
                              f"must have risen 10%; 0: never hold a split), got {self.min_split_gain!r}")


GUARANTEES = ("exactly_once", "at_least_once", "none")


@dataclass(frozen=True, slots=True)
class JobConfig:
    """Job-wide settings. Build with JobConfig.load() to apply ESAULT_* overrides."""

    acking: bool = True
    guarantee: str = "exactly_once"
    """"exactly_once": aligned checkpoints, rollback recovery, two-phase-commit sinks (every spout must
    rewind); "at_least_once": XOR acking and replay; "none": no tracking (docs/GUARANTEES.md)."""
    checkpoint_interval: float = 2.0
    """Seconds between checkpoints under exactly_once."""
    checkpoint_timeout: float = 60.0
    """A checkpoint not complete after this many seconds is abandoned (the next one retries)."""
    snapshot_slice_keys: int = 1024
    """exactly_once: a keyed SPU forwards its barrier at once and encodes the keys that changed in the
    epoch at least this many per tick (more if needed to finish within ~40% of checkpoint_interval;
    a key a batch or a tick is about to change is encoded first), so a checkpoint never stops the SPU for
    long (docs/CHECKPOINTS.md). An epoch with fewer changed keys is encoded at the barrier."""
    tolerable_checkpoint_failures: int = 3
    """Checkpoints in a row that may fail (a snapshot or a sink's stage that cannot be made durable, too
    little free space, a timeout) before the job stops with an error: with none completing, a restart
    would redo ever more and the sinks publish nothing (Flink's tolerable-failed-checkpoints). 0: the
    first failure stops the job. A failure a rollback causes is not counted."""
    checkpoint_min_free_bytes: int = 1 << 20
    """A checkpoint starts only with at least this much free space where the checkpoint store is
    (data_dir); otherwise it fails at once (counted as above)."""
    retained_checkpoints: int = 3
    """Completed checkpoints kept restorable (besides savepoints): a restart whose latest checkpoint is
    damaged falls back to the newest intact one of these (Flink's state.checkpoints.num-retained)."""
    restore_from: int | None = None
    """Start from this completed checkpoint or savepoint (its epoch) instead of the latest one."""
    fresh_start: bool = False
    """Ignore (and delete) the checkpoints an earlier run of this job left in data_dir, instead of resuming."""
    message_timeout: float = 30.0
    max_spout_pending: int = 5000
    max_retries: int = 3
    batch_size: int = 1024
    batch_delay: float = 0.005
    """A spout round (one batch) ends after batch_size tuples or batch_delay seconds, whichever first:
    big batches under load, a bounded wait for the first tuple of a batch."""
    tick_interval: float = 0.01
    pe_idle_timeout: float | None = 60.0
    data_dir: Path = field(default_factory=lambda: Path("esault-data"))
    checkpoint_storage: str | None = None
    """Where exactly_once checkpoints live: None, the job's data_dir (one SQLite file, the embedded default); a
    local path (the same, in that folder); or s3://bucket/prefix on any S3-compatible store, its endpoint,
    region and credentials taken the usual AWS way (esault.storage.location): then the driver and the workers
    share nothing but the network (docs/CHECKPOINTS.md, "Where durable state lives")."""
    metrics_host: str = "127.0.0.1"
    metrics_port: int | None = None
    max_workers: int = 2
    cluster: str | None = None
    """Where `esault run` gets its workers when --cluster is not given: "processes" (the default: a local pool),
    "threads", "static", or a Ray cluster, "ray://HOST:PORT" (a Ray client server) or "ray://auto" (the Ray
    cluster of this node): then each worker is a Ray actor (docs/DEPLOYMENT.md, "Workers from Ray")."""
    gc_gen0_threshold: int | None = 100_000
    elasticity: bool = True
    """Job-wide switch for the latency monitors; each bolt also has its own `elastic` option."""
    max_spout_errors: int = 1000
    """A spout whose next_tuple() raises this many times in a row is stopped and the job fails: a broken
    source is reported, not called for ever (1000 failing calls take about 10 s: one per tick). A call that
    returns, with or without a tuple, resets the count."""

    def __post_init__(self) -> None:
        o = "JobConfig"
        if self.gc_gen0_threshold is not None:
            _whole(o, "gc_gen0_threshold", self.gc_gen0_threshold, 1)
        _positive(o, "message_timeout", self.message_timeout)
        if self.guarantee not in GUARANTEES:
            raise ConfigError(f"{o}.guarantee must be one of {', '.join(GUARANTEES)}, got {self.guarantee!r}")
        _positive(o, "checkpoint_interval", self.checkpoint_interval)
        _positive(o, "checkpoint_timeout", self.checkpoint_timeout)
        _whole(o, "snapshot_slice_keys", self.snapshot_slice_keys, 1)
        _whole(o, "retained_checkpoints", self.retained_checkpoints, 1)
        _whole(o, "tolerable_checkpoint_failures", self.tolerable_checkpoint_failures, 0)
        _whole(o, "checkpoint_min_free_bytes", self.checkpoint_min_free_bytes, 0)
        if self.restore_from is not None:
            _whole(o, "restore_from", self.restore_from, 1)
        if not isinstance(self.fresh_start, bool):
            raise ConfigError(f"{o}.fresh_start must be true or false, got {self.fresh_start!r}")
        _positive(o, "tick_interval", self.tick_interval)
        _positive(o, "batch_delay", self.batch_delay)
        _positive(o, "pe_idle_timeout", self.pe_idle_timeout, allow_none=True)
        for name in ("max_spout_pending", "batch_size", "max_workers"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{o}.{name} must be a whole number >= 1, got {value!r}")
        check_cluster(self.cluster, f"{o}.cluster")
        _whole(o, "max_retries", self.max_retries, 0)
        _whole(o, "max_spout_errors", self.max_spout_errors, 1)
        if not isinstance(self.elasticity, bool):
            raise ConfigError(f"{o}.elasticity must be true or false, got {self.elasticity!r}")
        if not isinstance(self.acking, bool):
            raise ConfigError(f"{o}.acking must be true or false, got {self.acking!r}")
        if self.guarantee == "none":
            object.__setattr__(self, "acking", False)
        if not isinstance(self.metrics_host, str) or not self.metrics_host:
            raise ConfigError(f"{o}.metrics_host must be a host name or address, got {self.metrics_host!r}")
        if self.metrics_port is not None and not (
            isinstance(self.metrics_port, int) and not isinstance(self.metrics_port, bool)
            and 0 <= self.metrics_port <= 65535
        ):
            raise ConfigError(f"{o}.metrics_port must be a port 0-65535 or None, got {self.metrics_port!r}")
        if not isinstance(self.data_dir, (str, os.PathLike)):
            raise ConfigError(f"{o}.data_dir must be a path, got {self.data_dir!r}")
        if not isinstance(self.data_dir, Path):
            object.__setattr__(self, "data_dir", Path(self.data_dir))
        if self.checkpoint_storage is not None:
            if isinstance(self.checkpoint_storage, os.PathLike):
                object.__setattr__(self, "checkpoint_storage", os.fspath(self.checkpoint_storage))
            StorageLocation.parse(self.checkpoint_storage)  # a clear error now, not at the first checkpoint

    @classmethod
    def load(
        cls,
        file: str | os.PathLike[str] | None = None,
        environ: Mapping[str, str] | None = None,
        defaults: Mapping[str, Any] | None = None,
        **overrides: Any,
    ) -> "JobConfig":
        """Built-in defaults, then `defaults` (a topology's own), a TOML file, ESAULT_<FIELD>
        variables, then keyword arguments: each overrides the ones before."""
        values: dict[str, Any] = {}
        if defaults:
            JobConfig.from_mapping(defaults, origin="the topology's JOB_DEFAULTS")
            values.update(defaults)
        if file is not None:
            values.update(_read_toml(Path(file)))
        env = os.environ if environ is None else environ
        check_environment(env)
        for f in fields(cls):
            raw = env.get(f"ESAULT_{f.name.upper()}")
            if raw is not None:
                values[f.name] = _parse_env(f.name, raw, f.type)
        values.update(overrides)
        return cls.from_mapping(values, origin="arguments")

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any], origin: str = "config") -> "JobConfig":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(
                f"{origin}: unknown setting(s) {_with_close_matches(unknown, known)}; "
                "valid settings are: " + ", ".join(sorted(known))
            )
        return cls(**values)

    def replace(self, **changes: Any) -> "JobConfig":
        return dataclasses.replace(self, **changes)


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist; pass an existing TOML file") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    section = data.get("job", data)
    if not isinstance(section, dict):
        raise ConfigError(f"config file {path}: [job] must be a table of settings")
    if "job" in data and len(data) > 1:
        outside = sorted(k for k in data if k != "job")
        raise ConfigError(
            f"config file {path}: {', '.join(repr(k) for k in outside)} outside the [job] table would be ignored; "
            "esault reads only [job]: move the setting(s) into it, or remove them")
    nested = sorted(k for k, v in section.items() if isinstance(v, dict))
    if nested:
        where = "[job] holds" if "job" in data else "the file holds"
        raise ConfigError(f"config file {path}: {where} table(s) {', '.join(repr(k) for k in nested)}, which esault "
                          "would ignore; it reads plain settings, in [job] or at the top level (no other tables)")
    try:
        JobConfig.from_mapping(section, origin=f"config file {path}")
    except ConfigError as exc:
        text = str(exc)
        raise ConfigError(text if text.startswith("config file") else f"config file {path}: {text}") from None
    except TypeError as exc:
        raise ConfigError(f"config file {path}: {exc}") from None
    return dict(section)


def _parse_env(name: str, raw: str, annotation: Any) -> Any:
    var = f"ESAULT_{name.upper()}"
    text = str(annotation)
    try:
        if "bool" in text:
            lowered = raw.strip().lower()
            if lowered in ("1", "true", "yes", "on"):
                return True
            if lowered in ("0", "false", "no", "off"):
                return False
            raise ValueError(raw)
        if raw.strip().lower() == "none" and "None" in text:
            return None
        if "int" in text and "float" not in text:
            return int(raw)
        if "float" in text:
            return float(raw)
        if "Path" in text:
            return Path(raw)
        return raw
    except ValueError:
        raise ConfigError(f"environment variable {var}={raw!r} is not a valid {text}") from None


OTHER_VARIABLES = {
    "ESAULT_SECRET_KEY": "esault run/worker --secret-key",
    "ESAULT_WORKER_KEYS": "esault run --worker-keys",
    "ESAULT_CLIENT_KEYS": "esault run --client-keys",
    "ESAULT_DRIVER_KEY": "esault worker/status/savepoint --driver-key",
    "ESAULT_CLIENT_SECRET_KEY": "esault status/savepoint --secret-key",
    "ESAULT_API_TOKEN": "esault run --api-token, esault rescale/move/assign --token",
    "ESAULT_RUNTIME_DIR": "where a local driver leaves its status key (esault.cluster.credentials)",
    "ESAULT_SPARK_MASTER": "the Spark sink's master URL (spark_sink.session)",
    "ESAULT_SPARK_WAREHOUSE": "the Spark sink's warehouse folder (spark_sink.session)",
    "ESAULT_SINK_FAILPOINT": "crash tests of the Spark sink (spark_sink.failpoints)",
    "ESAULT_KAFKA_SINK_FAILPOINT": "crash tests of the Kafka sink (esault.connectors.failpoints)",
    "ESAULT_KAFKA_SOURCE_FAILPOINT": "crash tests of the Kafka source (esault.connectors.failpoints)",
    "ESAULT_KAFKA_SINK_JOURNAL": "the Kafka sink's transaction journal, for tests (esault.connectors.transaction_journal)",
    "ESAULT_TANSU_BIN": "the test broker's binary (esault.testing.kafka)",
    "ESAULT_TAG": "the image tag docker-compose.yml runs",
    "ESAULT_KAFKA_BOOTSTRAP": "examples/kafka_clicks.py's broker (without it, the example starts one of its own)",
}
"""ESAULT_* variables read elsewhere than JobConfig, and by what: they are not unknown."""


def known_variables() -> list[str]:
    """Every ESAULT_* variable esault reads: one per JobConfig field, and OTHER_VARIABLES."""
    return sorted({f"ESAULT_{f.name.upper()}" for f in fields(JobConfig)} | set(OTHER_VARIABLES))


def check_environment(environ: Mapping[str, str]) -> None:
    """An ESAULT_* variable esault does not read is a typo that would be ignored: refuse it."""
    known = known_variables()
    unknown = sorted(name for name in environ if name.startswith("ESAULT_") and name not in known)
    if unknown:
        raise ConfigError(
            f"unknown environment variable(s) {_with_close_matches(unknown, known)}; esault would "
            "ignore them: fix the name or unset them. Valid ESAULT_* variables are: " + ", ".join(known))


def _with_close_matches(unknown: list[str], known: Any) -> str:
    """The unknown names, each with ' (did you mean x?)' where a known name is close."""
    named = []
    for name in unknown:
        close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
        named.append(f"{name} (did you mean {close[0]}?)" if close else name)
    return ", ".join(named)
