"""A diagnostic journal of KafkaSink's transactions: which offsets each epoch's transaction wrote, and
whether its commit returned; and, from it, where each copy of a duplicated output record came from.

Off unless ESAULT_KAFKA_SINK_JOURNAL names a directory or an object-store URL (the tests set it; with
checkpoints on an object store, point it there too: a writer's successor may run on another host). In a
directory every transactional writer appends JSON lines to <dir>/<transactional id>.jsonl; on an object
store (which cannot append) each entry is an object <url>/<transactional id>/<time>.json, written whole:

    {"state": "open", "marker": M}                         init_transactions() returned (it aborts any
                                                            transaction an older writer of the id left open)
    {"state": "produced", "epoch": e, "spans": [[topic, partition, first, last], ...]}
                                                            every record of e delivered into the open
                                                            transaction, before its commit is asked for
    {"state": "committed", "epoch": e}                     commit_transaction() returned

A "produced" with no "committed" after it (of the same id) is a transaction whose commit was cut (a kill
-9 inside the commit step): the next writer's init_transactions() aborted it, unless the commit reached
the broker first. A broker that hides aborted records from read_committed readers (Kafka) shows none of
its records; Tansu shows them, which is the one way the sink's output can hold a record twice on it.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from esault.storage.location import StorageLocation
from esault.storage.objects import ObjectStore

JOURNAL_ENV = "ESAULT_KAFKA_SINK_JOURNAL"


class TransactionJournal:
    """Appends one writer's transaction steps (each line flushed, or each entry an object: it survives a kill -9
    of the process)."""

    def __init__(self, directory: Path | str, transactional_id: str) -> None:
        location = StorageLocation.parse(os.fspath(directory))
        self._objects = None if location.is_local else ObjectStore(location.child(transactional_id))
        self._file: Any = None
        if self._objects is None:
            Path(location.root).mkdir(parents=True, exist_ok=True)
            self._file = open(Path(location.root) / f"{transactional_id}.jsonl", "a", encoding="utf-8")  # noqa: SIM115

    def write(self, **entry: Any) -> None:
        if self._objects is not None:
            self._objects.put(f"{time.time_ns():016x}.json", json.dumps(entry).encode())
            return
        self._file.write(json.dumps(entry) + "\n")
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


def journal_from_env(transactional_id: str) -> TransactionJournal | None:
    directory = os.environ.get(JOURNAL_ENV)
    return TransactionJournal(directory, transactional_id) if directory else None


@dataclass
class Transaction:
    """One epoch's transaction of one writer, as the journal recorded it."""

    transactional_id: str
    epoch: int
    spans: list[tuple[str, int, int, int]]
    committed: bool = False
    attempt: int = 0
    """How many earlier transactions of this id the journal holds for the same epoch (a retried publish)."""

    def holds(self, topic: str, partition: int, offset: int) -> bool:
        return any(t == topic and p == partition and first <= offset <= last for t, p, first, last in self.spans)

    def describe(self) -> str:
        what = "committed" if self.committed else \
            "its commit never returned: cut, then aborted by the next writer's init_transactions()"
        return f"epoch {self.epoch} of {self.transactional_id!r} (attempt {self.attempt + 1}), {what}"


@dataclass
class Journal:
    transactions: list[Transaction] = field(default_factory=list)

    def find(self, topic: str, partition: int, offset: int) -> Transaction | None:
        return next((t for t in self.transactions if t.holds(topic, partition, offset)), None)

    @property
    def cut(self) -> list[Transaction]:
        return [t for t in self.transactions if not t.committed]


def _journals(directory: Path | str) -> Iterable[tuple[str, list[str]]]:
    """(transactional id, its entries as JSON texts in order) of every writer journaled at `directory`."""
    location = StorageLocation.parse(os.fspath(directory))
    if location.is_local:
        for path in sorted(Path(location.root).glob("*.jsonl")):
            yield path.name[:-len(".jsonl")], path.read_text(encoding="utf-8").splitlines()
        return
    objects = ObjectStore(location)
    by_writer: dict[str, list[str]] = {}
    for info in objects.list():  # sorted by name: per writer, in time order
        writer, _, _ = info.name.rpartition("/")
        by_writer.setdefault(writer, []).append(objects.get(info.name).decode())
    yield from sorted(by_writer.items())


def read_journal(directory: Path | str) -> Journal:
    """Every transaction the writers journaled in `directory` (a torn last line, from a kill, is skipped)."""
    journal = Journal()
    for transactional_id, lines in _journals(directory):
        open_ones: dict[int, Transaction] = {}
        tries: Counter[int] = Counter()
        for line in lines:
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            state, epoch = entry.get("state"), entry.get("epoch")
            if state == "produced":
                txn = Transaction(transactional_id, epoch, [tuple(s) for s in entry["spans"]], attempt=tries[epoch])
                tries[epoch] += 1
                open_ones[epoch] = txn
                journal.transactions.append(txn)
            elif state == "committed" and epoch in open_ones:
                open_ones.pop(epoch).committed = True
    return journal


def explain_duplicates(records: Iterable[dict[str, Any]], directory: Path | str) -> str:
    """For each (key, value) the records hold more than once: where each copy lies, by the journal.

    `records` are dicts with topic, partition, offset, key and value (KafkaBroker.read()). The answer is
    one line per copy, and a verdict: whether every extra copy is explained by a cut commit."""
    records = list(records)
    journal = read_journal(directory)
    copies: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
    for r in records:
        copies.setdefault((r["key"], r["value"]), []).append(r)
    lines: list[str] = []
    unexplained = 0
    for (key, value), found in sorted(copies.items(), key=lambda kv: repr(kv[0])):
        if len(found) < 2:
            continue
        lines.append(f"key {key!r} value {value!r} is there {len(found)} times:")
        in_cut = 0
        for r in sorted(found, key=lambda r: (r["partition"], r["offset"])):
            txn = journal.find(r["topic"], r["partition"], r["offset"])
            if txn is not None and not txn.committed:
                in_cut += 1
            lines.append(f"  {r['topic']}[{r['partition']}] offset {r['offset']}: "
                         + (txn.describe() if txn else "in no journaled transaction"))
        unexplained += max(0, len(found) - 1 - in_cut)
    if not lines:
        return "no record is there twice"
    verdict = ("every extra copy lies in a transaction whose commit was cut (aborted records, which this broker "
               "shows to read_committed readers)" if unexplained == 0 else
               f"{unexplained} extra copies lie in committed transactions (or none journaled): NOT explained "
               "by aborted records")
    return "\n".join([verdict, *lines, f"transactions journaled: {len(journal.transactions)}, cut: "
                      f"{[t.describe() for t in journal.cut]}"])
