"""DeadLetterWriter: one JSON line per dead letter, safe from many threads."""

from __future__ import annotations

import json
import threading
from datetime import datetime, timezone
from pathlib import Path

import pytest

from esault.errors import EsaultError
from esault.reliability import DeadLetterWriter, read_dead_letters

FIXED = datetime(2024, 5, 1, 12, 30, 0, tzinfo=timezone.utc)


def write(writer: DeadLetterWriter, **fields):
    args = dict(topology="wc", unit="count", msg_id=1, key="k", value=1, error="boom", attempts=3)
    args.update(fields)
    return writer.write(**args)


def test_writes_one_json_line_per_dead_letter_and_creates_parent_dirs(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "dead.jsonl"
    writer = DeadLetterWriter(path, now=lambda: FIXED)
    assert not path.parent.exists()  # nothing is created until something dies
    write(writer, msg_id=7, key="apple", value={"n": 1}, error=ValueError("bad value"), attempts=4)
    write(writer, key=("a", 1), value=[1, 2])
    writer.close()
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 2
    assert json.loads(lines[0]) == {
        "topology": "wc", "unit": "count", "msg_id": 7, "key": "apple", "value": {"n": 1},
        "error": "ValueError: bad value", "attempts": 4, "time": "2024-05-01T12:30:00+00:00",
    }
    assert writer.count == 2
    assert read_dead_letters(path)[1]["key"] == ["a", 1]


def test_values_that_are_not_json_are_stored_as_their_repr(tmp_path: Path) -> None:
    path = tmp_path / "dead.jsonl"
    with DeadLetterWriter(path) as writer:
        record = write(writer, msg_id=object.__new__(object), key=b"\xff", value={1, 2})
        write(writer, value=float("nan"), key="\u00e9t\u00e9")
    [first, second] = read_dead_letters(path)
    assert first == record
    assert first["key"] == "b'\\xff'" and first["value"] == "{1, 2}"
    assert first["msg_id"].startswith("<object object at")
    assert second["value"] == "nan" and second["key"] == "\u00e9t\u00e9"
    datetime.fromisoformat(second["time"])  # a real ISO timestamp


def test_appends_to_an_existing_file_after_reopening(tmp_path: Path) -> None:
    path = tmp_path / "dead.jsonl"
    w1 = DeadLetterWriter(path)
    write(w1, msg_id=1)
    w1.close()
    w2 = DeadLetterWriter(path)
    write(w2, msg_id=2)
    w2.close()
    write(w2, msg_id=3)  # reopens in append mode
    w2.close()
    assert [r["msg_id"] for r in read_dead_letters(path)] == [1, 2, 3]
    assert w2.count == 2


def test_concurrent_writers_never_interleave_lines(tmp_path: Path) -> None:
    path = tmp_path / "dead.jsonl"
    writer = DeadLetterWriter(path)
    big = "x" * 20_000  # larger than one buffer: a torn write would show
    gate = threading.Barrier(8)

    def worker(t: int) -> None:
        gate.wait()
        for i in range(50):
            write(writer, msg_id=[t, i], value=big)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    writer.close()
    records = read_dead_letters(path)
    assert len(records) == 400 == writer.count
    assert sorted(tuple(r["msg_id"]) for r in records) == [(t, i) for t in range(8) for i in range(50)]
    assert all(r["value"] == big for r in records)


def test_each_dead_letter_is_on_disk_when_write_returns(tmp_path: Path) -> None:
    path = tmp_path / "dead.jsonl"
    writer = DeadLetterWriter(path)
    write(writer, msg_id=1)
    assert [r["msg_id"] for r in read_dead_letters(path)] == [1]  # readable without close()
    write(writer, msg_id=2)
    assert [r["msg_id"] for r in read_dead_letters(path)] == [1, 2]
    writer.close()


def test_reading_a_missing_file_gives_no_dead_letters(tmp_path: Path) -> None:
    assert read_dead_letters(tmp_path / "nope.jsonl") == []


def test_a_torn_last_line_is_skipped_but_a_bad_middle_line_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "dead.jsonl"
    with DeadLetterWriter(path) as writer:
        write(writer, msg_id=1)
    with path.open("a", encoding="utf-8") as fh:
        fh.write('{"topology": "wc", "un')  # the process died mid-write
    assert [r["msg_id"] for r in read_dead_letters(path)] == [1]
    path.write_text('{"msg_id": 1}\nnot json\n{"msg_id": 2}\n', encoding="utf-8")
    with pytest.raises(EsaultError, match=r"dead\.jsonl:2: not a dead-letter JSON line"):
        read_dead_letters(path)
    path.write_text("[1, 2]\n", encoding="utf-8")
    with pytest.raises(EsaultError, match=r"dead\.jsonl:1: expected a JSON object per line, got list"):
        read_dead_letters(path)
