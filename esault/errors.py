"""Every exception esault raises, in one place.

Messages name the thing (bolt, key, field, file), what was given, and the fix.
"""

from __future__ import annotations


class EsaultError(Exception):
    """Base of every error esault raises on purpose."""


class TopologyError(EsaultError):
    """The topology is malformed: a cycle, an unknown source, a bad class..."""


class UnitStartError(TopologyError):
    """A unit's SPU could not start: its constructor, open() or restore raised, or its params cannot be sent
    to a worker process. The job fails at once instead of running without the unit."""


class NoWorkerLeft(UnitStartError):
    """Every worker process was lost and none is left to take an SPU. A cluster that can start workers waits
    for them and starts the SPU there; one that cannot fails the job with this."""


class ConfigError(EsaultError):
    """A configuration value (argument, file or ESAULT_* variable) is invalid."""


class SerializationError(EsaultError):
    """A value emitted by user code cannot cross a process boundary."""


class UnsaveableState(SerializationError):
    """A state a checkpoint or a key's move must keep cannot be encoded (a PE attribute, a spout's position).

    The message names the owner (bolt and key, spout, join), the attribute and its type, and the fix.
    Under exactly_once the job fails with it: no checkpoint completes without that state."""


class FrameError(EsaultError):
    """A frame read from a socket is malformed; it is dropped and counted."""


class RoutingError(EsaultError):
    """A routing table operation is impossible (unknown SPU, bad split point)."""


class ScalingError(EsaultError):
    """A split or merge was refused (bounds, grouping, a change in progress)."""


class ResourceError(EsaultError):
    """A resource (worker slot) could not be acquired or released."""


class DriverUnreachable(ResourceError):
    """`esault worker` heard nothing from its driver within --connect-timeout."""


class WorkerLost(ResourceError):
    """The worker process an SPU was being started on died before it answered."""


class RunIncomplete(EsaultError):
    """esault.testing.run_to_completion: the run did not process all its input (timed out, a spout stopped,
    tuples dead-lettered). `result` holds what it did produce: outputs so far, counts, dead letters."""

    def __init__(self, message: str, result: object = None) -> None:
        super().__init__(message)
        self.result = result


class SinkError(EsaultError):
    """A sink could not start or commit, or could not publish all it was given."""

    @classmethod
    def after_final_checkpoint(cls, sink: str, dropped: int, items: str, written: str) -> "SinkError":
        """An exactly-once sink got `dropped` `items` after the job's final checkpoint (a bolt's close() or a
        timer emitted them): none can be published exactly once, so they were dropped and the run fails."""
        return cls(f"{sink}: {dropped} {items}(s) arrived after the job's final checkpoint and were not {written}. "
                   f"Under guarantee 'exactly_once' a {items} is published only with a checkpoint that covers it, "
                   "and these came later: emitted by a bolt's close() (or a timer) after the last barrier. Emit "
                   "final results from the bolt's finish(), which runs before the final checkpoint once the input "
                   "ended, or from process() while the input flows; or run with guarantee='at_least_once'")



class GuaranteeBroken(EsaultError):
    """The job's guarantee cannot be kept any more, and no retry or rollback restores it (a sink's transaction
    the broker lost): raised into a checkpoint, it fails that checkpoint for good and the job with it."""


class TransactionLost(SinkError, GuaranteeBroken):
    """An exactly-once sink's transaction is gone from its broker (its state lost, or another producer with
    the same transactional id fenced it): its records may be visible already, so no replay is exact."""


class OutputMissing(SinkError):
    """An exactly-once sink found at the end that its output holds fewer rows than its committed epochs sent it:
    the run fails (exit 2), never passes for a success."""

    def __init__(self, message: str, rows: int) -> None:
        super().__init__(message)
        self.missing_rows = rows

class SchemaError(SinkError):
    """A row does not fit the declared or inferred table schema."""


class StoreDamaged(EsaultError):
    """A file the job keeps durably (the checkpoint store, a sink's commit log, a table's metadata) fails
    verification: the message names the file, the damage and the ways out."""


class SinkFileDamaged(SinkError, StoreDamaged):
    """A sink's commit log or a table's metadata fails verification (see StoreDamaged)."""


class ConnectorError(TopologyError):
    """A connector (esault.connectors: Kafka) was declared wrongly, or its system refused or did not answer.

    A TopologyError, so a bad declaration fails build() like any other.
    """
