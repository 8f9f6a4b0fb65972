"""Random faults over real processes: every exactly-once run ends exact, or fails loudly; never a quiet loss.

Hypothesis draws a sequence of faults at random moments: a sink snapshot held past checkpoint_timeout (the
checkpoint times out and the job rolls back, to the start when none completed yet), kill -9 of a worker
(with a replacement started), a split or a merge of the keyed count, a rollback to the last checkpoint,
and whether the cores are kept busy meanwhile. The word count into a Spark table (pyarrow engine) is
then run to its end and stopped, and judged as `esault run` judges it: exit 0 must mean the counts and
the table equal the oracle; anything else must be a non-zero exit with its reasons (issue 48).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import tempfile
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st

from esault import JobConfig, LocalCluster
from esault.job.outcome import ExitCode, judge_run

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT / "tests" / "system"))
import eo_parts  # noqa: E402
from cpu_load import busy_cores  # noqa: E402

pytestmark = [pytest.mark.system, pytest.mark.busy, pytest.mark.timeout(900)]

TOTAL, RATE, TIMEOUT = 1200, 600.0, 2.0
FAULTS = st.sampled_from(["slow sink", "kill", "split", "merge", "rollback"])
PLANS = st.lists(st.tuples(FAULTS, st.floats(0.0, 1.5)), min_size=1, max_size=4)
_MOMENT = threading.Event()  # never set: wait() on it is the chaos's timing, not a synchronisation


def apply(fault: str, job, cluster: LocalCluster, gate: Path, replacements: list[str]) -> None:
    """One fault, now; an operation the job refuses (no SPU to merge, one running already) is part of it."""
    count = job.spus("count")
    if fault == "slow sink":
        gate.touch()
        threading.Timer(TIMEOUT + 0.5, lambda: gate.unlink(missing_ok=True)).start()
    elif fault == "kill":
        busy = [w for w, spus in cluster.registry.spus_on.items() if spus]
        if busy:
            os.kill(cluster.registry.pids[busy[0]], signal.SIGKILL)
            replacements.append(f"r{len(replacements)}")
            cluster.pool.spawn(replacements[-1])  # the cluster stays at three workers
    elif fault == "split" and count:
        job.split_async("count", count[0])
    elif fault == "merge" and len(count) > 1:
        job.merge_async("count", count[-1])
    elif fault == "rollback":
        job.coordinator.run_task(lambda: job.roll_back_now(frozenset(), "a rollback the chaos test asked for"))


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan=PLANS, busy=st.booleans())
def test_random_faults_end_in_exact_output_or_a_non_zero_exit(plan, busy):
    note(f"plan {plan}, busy cores: {busy}")
    with tempfile.TemporaryDirectory() as folder, (busy_cores(240) if busy else contextlib.nullcontext()):
        tmp = Path(folder)
        gate = tmp / "sink-slow"
        topology = eo_parts.build("chaos", TOTAL, RATE, sink="pyarrow", count_parallelism=2,
                                  sink_gates={"snapshot_gate": str(gate)})
        config = JobConfig(data_dir=tmp / "data", elasticity=False, checkpoint_interval=0.3,
                           checkpoint_timeout=TIMEOUT, message_timeout=300.0)
        replacements: list[str] = []
        with LocalCluster(workers=3, heartbeat_timeout=1.0) as cluster:
            job = cluster.submit(topology, config)
            for fault, delay in plan:
                _MOMENT.wait(delay)
                apply(fault, job, cluster, gate, replacements)
            if replacements:  # a job whose every worker died fails (as it must): not what this test is about
                cluster.wait_for_workers(3, 120)
            completed = job.wait(180)
            gate.unlink(missing_ok=True)
            job.stop()
        outcome = judge_run(job.final_status or {}, completed, timeout=180, duration=None,
                            dead_letter_path=str(job.dead_letter_path))
        note(f"exit {int(outcome.exit_code)}: {outcome.problems}; checkpoints {job.final_status['checkpoints']}")
        event(f"exit {int(outcome.exit_code)}")
        if outcome.exit_code is ExitCode.OK:
            expected = eo_parts.oracle(TOTAL)
            assert eo_parts.final_counts(job.data_dir) == expected, "exit 0 with counts that are not exact"
            assert eo_parts.table_rows(job.data_dir / "warehouse", "eo_counts") == eo_parts.exact_rows(expected), \
                "exit 0 with a table that is not exact"
        else:
            assert outcome.problems, "a non-zero exit says why"
