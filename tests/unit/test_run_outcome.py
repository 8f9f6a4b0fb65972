"""judge_run: a run that did not process all its input never looks like success."""

from __future__ import annotations

from esault.job.outcome import ExitCode, judge_run


def status(emitted=50, processed=50, dead=0, spout_errors=(), pending=0):
    return {
        "topology": "t", "pending_trees": pending, "spout_errors": list(spout_errors), "dead_letters": dead,
        "units": {"src": {"kind": "spout", "emitted": emitted, "processed": 0, "dead_letters": 0},
                  "up": {"kind": "bolt", "emitted": 0, "processed": processed, "dead_letters": dead}},
    }


def test_a_complete_run_with_nothing_given_up_exits_0():
    outcome = judge_run(status(), True, timeout=None, duration=None, dead_letter_path="d/t/dead_letters.jsonl")
    assert outcome.ok and outcome.exit_code == 0 and outcome.problems == ()


def test_dead_letters_fail_the_run_and_say_how_many_by_unit_and_where():
    outcome = judge_run(status(dead=5), True, timeout=None, duration=None, dead_letter_path="d/t/dead_letters.jsonl")
    assert outcome.exit_code is ExitCode.INCOMPLETE
    assert outcome.problems == ("5 tuple(s) dead-lettered (up 5): each failed every retry; they, their errors and "
                                "file:line are in d/t/dead_letters.jsonl",)


def test_a_close_that_raised_fails_the_run_naming_the_units_and_what_may_be_missing():
    closing = {**status(), "close_errors": {"up": 2, "src": 1}}
    outcome = judge_run(closing, True, timeout=None, duration=None, dead_letter_path="d")
    assert outcome.exit_code is ExitCode.INCOMPLETE
    assert outcome.problems == ("finish() or close() raised 3 time(s) (src 1, up 2): what those bolts or spouts "
                                "emit or write at the end (final results, a last flush) may be missing; the log has "
                                "each error",)


def test_a_run_that_timed_out_says_how_much_was_processed():
    outcome = judge_run(status(emitted=50, processed=20, pending=3), False, timeout=30.0, duration=None,
                        dead_letter_path="x")
    assert outcome.exit_code is ExitCode.INCOMPLETE
    assert outcome.problems[0].startswith("the job did not complete within 30 s (--timeout): 20 of 50 emitted tuples "
                                          "were processed")
    assert "3 tuple tree(s) still in flight" in outcome.problems[0]


def test_a_spout_stopped_by_errors_is_the_reason_given():
    error = "spout 'src' next_tuple() raised 5 times in a row (last: ValueError: x at s.py:3); it was stopped"
    outcome = judge_run(status(processed=10, spout_errors=[error]), False, timeout=None, duration=None,
                        dead_letter_path="x")
    assert outcome.exit_code is ExitCode.INCOMPLETE and outcome.problems == (error,)


def test_a_failed_job_leads_the_summary_with_why_and_no_completion_guess():
    failure = ("unit 'count' could not be restored after a worker died holding SPUs [2]: unit 'count' has no worker "
               "to run on: every worker process was lost (w1, w2) ...")
    outcome = judge_run({**status(processed=10), "failures": [failure]}, False, timeout=60.0, duration=None,
                        dead_letter_path="x")
    assert outcome.exit_code is ExitCode.NOT_STARTED and outcome.problems == (failure,)


def test_a_duration_run_is_judged_by_what_it_gave_up_not_by_completion():
    assert judge_run(status(processed=20, pending=4), False, timeout=None, duration=5.0, dead_letter_path="x").ok
    bad = judge_run(status(dead=1), False, timeout=None, duration=5.0, dead_letter_path="x")
    assert bad.exit_code is ExitCode.INCOMPLETE


def test_the_exit_codes_are_distinct_and_documented():
    assert [int(c) for c in ExitCode] == [0, 1, 2, 3, 4, 130]
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    for code in ExitCode:
        assert f"| {int(code)} |" in readme, f"README's exit code table lacks {code.name}"


def test_tuples_a_dead_worker_took_with_it_under_guarantee_none_fail_the_run_naming_the_spus():
    lost = {**status(emitted=50, processed=41), "unaccounted": 9, "lost_spus": [3, 4]}
    outcome = judge_run(lost, True, timeout=None, duration=None, dead_letter_path="x")
    assert outcome.exit_code is ExitCode.INCOMPLETE
    assert outcome.problems == ("9 emitted tuple(s) were never processed: worker process(es) died holding SPUs [3, 4] "
                                "and guarantee 'none' does not replay; run with --guarantee at_least_once or "
                                "exactly_once to replay what a dead worker held",)


def test_a_job_that_could_not_keep_its_guarantee_exits_2_with_the_reason_first():
    failure = ("topology 't': bolt 'count' cannot save the state of key 'k': attribute 'path' is a PosixPath, ...")
    outcome = judge_run({**status(), "failures": [failure]}, False, timeout=None, duration=None, dead_letter_path="x")
    assert outcome.exit_code is ExitCode.NOT_STARTED == 2
    assert outcome.problems == (failure,), "a failed job is not also reported as merely incomplete"


def test_a_job_that_could_not_go_on_exits_2_with_its_reason_first_and_no_misleading_timeout():
    fatal = ("4 checkpoints in a row failed (tolerable_checkpoint_failures=3), the last: ... The checkpoint store "
             "is d/t/checkpoints.sqlite (0 bytes free there); ... run the same command again")
    outcome = judge_run({**status(emitted=50, processed=20), "failures": [fatal]}, False, timeout=30.0, duration=None,
                        dead_letter_path="x")
    assert outcome.exit_code is ExitCode.NOT_STARTED and outcome.problems == (fatal,)


def test_rows_an_exactly_once_sink_found_missing_from_its_output_fail_the_run_with_exit_2():
    missing = {**status(), "close_errors": {"sink": 1}, "output_missing": {"sink": 1250}}
    outcome = judge_run(missing, True, timeout=None, duration=None, dead_letter_path="d")
    assert outcome.exit_code is ExitCode.NOT_STARTED
    assert ("exactly_once: 1250 row(s) that committed checkpoints sent to sinks are not in their output (sink 1250); "
            "the log names each sink, its table and its counts") in outcome.problems


def test_a_close_that_found_output_missing_counts_its_rows():
    from esault.errors import OutputMissing
    from esault.metrics.stats import SpuStats

    stats = SpuStats("t", "sink", 3)
    stats.close_failed(OutputMissing("SparkSink 't': 7 row(s) missing", 7))
    stats.close_failed(RuntimeError("a close that failed otherwise"))
    assert (stats.close_errors, stats.output_missing) == (2, 7)
