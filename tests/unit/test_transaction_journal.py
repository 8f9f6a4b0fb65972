"""The KafkaSink's diagnostic journal: where each copy of a duplicated output record lies (a committed
transaction, or one whose commit was cut), the verdict a Kafka kill test prints on a mismatch."""

from __future__ import annotations

from esault.connectors.transaction_journal import TransactionJournal, explain_duplicates, read_journal


def test_the_journal_calls_a_copy_in_a_committed_transaction_unexplained(tmp_path):
    """The checker's other verdict: a record written twice by two committed transactions (what a replay bug
    would do) is not blamed on aborted records."""
    journal = TransactionJournal(tmp_path, "t.i0")
    journal.write(state="open")
    journal.write(state="produced", epoch=1, records=1, spans=[["out", 0, 0, 0]])
    journal.write(state="committed", epoch=1)
    journal.write(state="produced", epoch=2, records=1, spans=[["out", 0, 2, 2]])
    journal.write(state="committed", epoch=2)
    journal.write(state="produced", epoch=3, records=1, spans=[["out", 0, 4, 4]])  # cut: no "committed"
    journal.close()
    twice = [{"topic": "out", "partition": 0, "offset": o, "key": b"k", "value": b"1"} for o in (0, 2)]
    report = explain_duplicates(twice, tmp_path)
    assert report.startswith("1 extra copies lie in committed transactions"), report
    assert "epoch 2 of 't.i0' (attempt 1), committed" in report
    cut = [{"topic": "out", "partition": 0, "offset": o, "key": b"k", "value": b"1"} for o in (0, 4)]
    assert explain_duplicates(cut, tmp_path).startswith("every extra copy lies in a transaction whose commit"), \
        explain_duplicates(cut, tmp_path)


def test_a_torn_last_line_from_a_kill_is_skipped_and_a_retried_epoch_counts_its_attempts(tmp_path):
    journal = TransactionJournal(tmp_path, "t.i0")
    journal.write(state="produced", epoch=1, records=2, spans=[["out", 0, 0, 1]])
    journal.write(state="open")
    journal.write(state="produced", epoch=1, records=2, spans=[["out", 0, 3, 4]])
    journal.write(state="committed", epoch=1)
    journal.close()
    with open(tmp_path / "t.i0.jsonl", "a") as f:
        f.write('{"state": "produ')
    txns = read_journal(tmp_path).transactions
    assert [(t.epoch, t.attempt, t.committed) for t in txns] == [(1, 0, False), (1, 1, True)]
    assert explain_duplicates([{"topic": "out", "partition": 0, "offset": 0, "key": None, "value": b"x"}],
                              tmp_path) == "no record is there twice"

