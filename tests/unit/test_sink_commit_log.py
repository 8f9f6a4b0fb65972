"""The sink's CommitLog: durable appends, torn tails, one writer at a time."""

from __future__ import annotations

import pyarrow as pa
import pytest

from esault.errors import SinkError, SinkFileDamaged
from spark_sink.commit_log import CommitLog
from spark_sink.layout import TablePaths
from spark_sink.stager import ArrowStager
from spark_sink.writer import BatchWriter


def test_a_reopened_log_remembers_every_batch_state_and_the_highest_seq(tmp_path):
    log = CommitLog(tmp_path / "w.log")
    assert log.max_seq == -1
    log.begin("w.0", 0, "p/esault_batch=w.0", 10)
    log.commit("w.0")
    log.begin("w.1", 1, "p/esault_batch=w.1", 5)
    log.abort("w.1")
    log.begin("w.2", 2, "p/esault_batch=w.2", 7)
    log.close()
    again = CommitLog(tmp_path / "w.log")
    assert again.is_committed("w.0") and not again.is_committed("w.1")
    assert again.get("w.1").state == "aborted"
    assert [r.batch for r in again.unfinished()] == ["w.2"]
    assert again.get("w.2").rows == 7 and again.get("w.2").path == "p/esault_batch=w.2"
    assert again.max_seq == 2
    assert [r.batch for r in again.committed()] == ["w.0"]


def test_a_torn_last_line_is_dropped_and_truncated(tmp_path):
    path = tmp_path / "w.log"
    log = CommitLog(path)
    log.begin("w.0", 0, "p", 1)
    log.commit("w.0")
    log.close()
    good = path.read_bytes()
    path.write_bytes(good + b'{"op":"begin","batch":"w.1","se')  # a crash mid-append
    again = CommitLog(path)
    assert again.dropped_torn_tail
    assert again.is_committed("w.0") and again.get("w.1") is None
    assert path.read_bytes() == good
    again.begin("w.1", 1, "p", 1)  # appends start on a clean line
    again.close()
    assert CommitLog(path).get("w.1").state == "begun"


def test_a_corrupt_line_before_the_end_is_an_error_naming_the_line(tmp_path):
    path = tmp_path / "w.log"
    path.write_bytes(b'{"op":"begin","batch":"a","seq":0,"path":"p","rows":1}\nnot json\n{"op":"commit","batch":"a"}\n')
    with pytest.raises(SinkError, match=rf"commit log {path} is damaged: line 2 \(b'not json'\).*Ways out: put back "
                                        r"a copy.*--fresh"):
        CommitLog(path)


def test_a_line_whose_bytes_changed_but_still_parse_fails_its_crc(tmp_path):
    path = tmp_path / "w.log"
    log = CommitLog(path)
    log.begin("w.0", 0, "p", 120)
    log.commit("w.0")
    log.close()
    path.write_bytes(path.read_bytes().replace(b'"rows":120', b'"rows":720', 1))
    with pytest.raises(SinkFileDamaged, match=r"is damaged: line 1 .* fails its CRC"):
        CommitLog(path)


def test_a_commit_log_that_lost_records_of_published_batches_is_refused_by_the_writer(tmp_path):
    """A log truncated mid-way looks like one whose last append was torn: the table's batch directories
    the log does not know give it away."""
    writer = BatchWriter(tmp_path / "t", "w", ArrowStager())
    for seq in range(3):
        writer.commit(f"w.{seq}", seq, f"esault_batch=w.{seq}", pa.table({"n": [seq]}))
    writer.close()
    log = TablePaths(tmp_path / "t").commit_log("w")
    log.write_bytes(log.read_bytes()[:len(log.read_bytes()) // 2])
    with pytest.raises(SinkFileDamaged, match=r"has no record of \d published batch\(es\) of writer w in the "
                                              r"table, e.g. .*esault_batch=w.[12].*move the table .* aside.*--fresh"):
        BatchWriter(tmp_path / "t", "w", ArrowStager())


def test_a_second_live_writer_on_the_same_log_is_refused(tmp_path):
    first = CommitLog(tmp_path / "w.log")
    with pytest.raises(SinkError, match="locked by another live sink writer"):
        CommitLog(tmp_path / "w.log")
    first.close()
    CommitLog(tmp_path / "w.log").close()  # a closed (or crashed) writer releases it


def test_appending_to_a_closed_log_is_an_error(tmp_path):
    log = CommitLog(tmp_path / "w.log")
    log.close()
    with pytest.raises(SinkError, match="is closed"):
        log.commit("x")
