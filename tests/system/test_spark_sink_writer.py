"""BatchWriter's refusals: reused ids, tampered tables, stagers that write nothing (no JVM)."""

from __future__ import annotations

import pytest
from spark_fixtures import arrow_rows, arrow_table

from esault.errors import SinkError
from spark_sink.failpoints import STEPS, InjectedCrash, StepFailpoint
from spark_sink.stager import ArrowStager
from spark_sink.writer import BatchWriter, Outcome

pytestmark = pytest.mark.system

REL = "event_date=2024-05-01/event_hour=12/esault_batch=w.0000000000"


def test_a_batch_id_reused_for_other_rows_is_an_error_not_a_skip(tmp_path):
    w = BatchWriter(tmp_path / "t", "w", ArrowStager())
    w.commit("w.0000000000", 0, REL, arrow_table(10))
    with pytest.raises(SinkError, match="batch w.0000000000 was already committed with 10 rows .* now offered with 11"):
        w.commit("w.0000000000", 0, REL, arrow_table(11))
    assert len(arrow_rows(tmp_path / "t")) == 10


def test_a_batch_directory_the_log_does_not_know_is_an_error_when_the_writer_opens(tmp_path):
    (tmp_path / "t" / REL).mkdir(parents=True)
    with pytest.raises(SinkError, match="commit log .* is damaged: it has no record of 1 published batch"):
        BatchWriter(tmp_path / "t", "w", ArrowStager())


def test_a_stager_that_writes_no_data_file_fails_the_commit(tmp_path):
    class Empty:
        name = "empty"

        def stage(self, table, directory):
            directory.mkdir(parents=True)
            (directory / "_SUCCESS").touch()

    w = BatchWriter(tmp_path / "t", "w", Empty())
    with pytest.raises(SinkError, match="stager 'empty' wrote no data file"):
        w.commit("w.0000000000", 0, REL, arrow_table(1))
    assert w.log.get("w.0000000000") is None  # nothing was begun


@pytest.mark.parametrize("step", STEPS)
def test_the_same_writer_retrying_after_an_error_at_any_step_commits_once(tmp_path, step):
    w = BatchWriter(tmp_path / "t", "w", ArrowStager(), failpoint=StepFailpoint(step, "raise"))
    with pytest.raises(InjectedCrash):
        w.commit("w.0000000000", 0, REL, arrow_table(25))
    outcome = w.commit("w.0000000000", 0, REL, arrow_table(25))  # the committer's retry
    assert outcome is (Outcome.ALREADY_COMMITTED if step == "committed" else Outcome.COMMITTED)
    assert len(arrow_rows(tmp_path / "t")) == 25
    assert w.is_committed("w.0000000000")
