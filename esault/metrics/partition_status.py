"""What a source SPU shows of each partition it reads, and the check such a report passes wherever it arrives.

A partitioned source (KafkaSource) answers Spout.partition_status() with one row per partition it reads:
(topic, partition, offset, end_offset, lag, idle). The spout SPU keeps the checked rows on its SpuStats; a
worker's heartbeat carries them to the driver, which checks them again (nothing from a socket is trusted):
Job.status(), `esault status`, the REST API and the web page show them. A row that is not well formed is
dropped, never raised: a bad report costs its rows, not the SPU or the driver.
"""

from __future__ import annotations

from typing import Any, Final

PartitionRow = tuple[str, int, int, int | None, int | None, bool]
"""(topic, partition, offset: the next one to emit, end_offset: the high watermark as last fetched or None,
lag: records between them or None, idle: left out of the watermark for now)."""

FIELDS: Final = ("topic", "partition", "offset", "end_offset", "lag", "idle")
"""The names of a row's fields, as Job.status() and the REST API spell them."""

MAX_ROWS: Final = 1000
"""Rows one SPU's report may hold; the rest are dropped (a heartbeat's size stays bounded)."""

MAX_TOPIC_CHARS: Final = 249
"""Kafka's own bound on a topic name."""

_MAX_PARTITION = 2**31 - 1
_MAX_OFFSET = 2**63 - 1


def _whole(value: Any, top: int) -> bool:
    return type(value) is int and 0 <= value <= top


def checked_row(entry: Any) -> PartitionRow | None:
    """`entry` as a row if it is one (a list or tuple of the six fields, each of its type and range), else None."""
    if not isinstance(entry, (list, tuple)) or len(entry) != len(FIELDS):
        return None
    topic, partition, offset, end, lag, idle = entry
    if not (type(topic) is str and 0 < len(topic) <= MAX_TOPIC_CHARS and topic.isprintable()):
        return None  # printable: a name from a socket never reaches a terminal as an escape sequence
    if not (_whole(partition, _MAX_PARTITION) and _whole(offset, _MAX_OFFSET) and type(idle) is bool):
        return None
    if not all(value is None or _whole(value, _MAX_OFFSET) for value in (end, lag)):
        return None
    return (topic, partition, offset, end, lag, idle)


def checked_rows(report: Any) -> tuple[tuple[PartitionRow, ...], int]:
    """The well-formed rows of `report` (a list of rows), sorted by (topic, partition), and how many entries
    were dropped: malformed ones, a second row of one partition, those past MAX_ROWS. O(n log n)."""
    if not isinstance(report, (list, tuple)):
        return (), 1
    rows: dict[tuple[str, int], PartitionRow] = {}
    dropped = max(0, len(report) - MAX_ROWS)
    for entry in report[:MAX_ROWS]:
        row = checked_row(entry)
        if row is None or (row[0], row[1]) in rows:
            dropped += 1
        else:
            rows[(row[0], row[1])] = row
    return tuple(rows[tp] for tp in sorted(rows)), dropped


def as_dicts(rows: Any) -> list[dict[str, Any]]:
    """Rows as Job.status() shows them: {"topic", "partition", "offset", "end_offset", "lag", "idle"} each."""
    return [dict(zip(FIELDS, row)) for row in rows]


def rows_of_dicts(value: Any) -> tuple[PartitionRow, ...]:
    """as_dicts() read back and checked (a status that crossed a socket, e.g. to `esault status`)."""
    if not isinstance(value, list):
        return ()
    entries = [[item.get(name) for name in FIELDS] if isinstance(item, dict) else item for item in value]
    return checked_rows(entries)[0]


def describe(row: PartitionRow) -> str:
    """One row as `esault status` prints it: 'orders[2] offset 120, end 200, lag 80, idle'."""
    topic, partition, offset, end, lag, idle = row
    return (f"{topic}[{partition}] offset {offset}, end {'?' if end is None else end}, "
            f"lag {'?' if lag is None else lag}{', idle' if idle else ''}")
