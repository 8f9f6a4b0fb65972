"""Bolt.finish(): final results emitted once the input has ended, exactly once under exactly_once.

Under exactly_once, output after the final checkpoint cannot be committed (an exactly-once sink refuses
it), so a bolt that emits its results at the end emits them from finish(): every spout's final barrier says
whether its source had finished, and a bolt whose every input says so calls finish() before its snapshot.
A stop mid-stream does not finish (a restart goes on with the state); a job restored after its input ended
does not finish again. Workers are real processes, killed with SIGKILL.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

from esault import JobConfig, LocalCluster
from esault.checkpoint.store import CheckpointStore
from esault.testing import wait_until

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT / "tests" / "system"))
sys.path.insert(0, str(ROOT / "tests" / "integration"))  # topology_parts: the finishing bolts
import eo_parts  # noqa: E402

pytestmark = pytest.mark.system

TOTAL = 2000  # sentences: 20,000 words


def config(tmp_path: Path, **changes) -> JobConfig:
    return JobConfig(data_dir=tmp_path / "data", elasticity=False, checkpoint_interval=0.3, message_timeout=300.0,
                     **changes)


def finals(job) -> dict[str, list[int]]:
    return eo_parts.table_rows(job.data_dir / "warehouse", "finals")


def expected_finals() -> dict[str, list[int]]:
    """One row per word, its whole count: finish() ran once per key, and nothing else wrote the table."""
    return {w: [n] for w, n in eo_parts.oracle(TOTAL).items()}


def latest(job):
    """The newest checkpoint of a stopped job (its own store handle is closed)."""
    return CheckpointStore(job.checkpoints.store.path).latest()


def kill_worker_of(cluster: LocalCluster, spu: int) -> str:
    worker = next(w for w, spus in cluster.registry.spus_on.items() if spu in spus)
    os.kill(cluster.registry.pids[worker], signal.SIGKILL)
    return worker


@pytest.mark.parametrize("when", ["mid-stream", "as the job stops"])
def test_what_finish_emits_is_committed_exactly_once_through_a_kill_9(tmp_path, when):
    """Killed mid-stream, the job rolls back and finishes once at its end; killed as it stops (the final
    checkpoint in flight, some SPUs may have finished already), the final checkpoint is aborted, the job
    rolls back, completes again and finishes then: the table holds each word's count once either way."""
    with LocalCluster(workers=3, heartbeat_timeout=1.0) as cluster:
        job = cluster.submit(eo_parts.build_finals("finish-kill", TOTAL, rate=500), config(tmp_path))
        if when == "mid-stream":
            wait_until(lambda: job.checkpoints.stats.completed >= 2, 60, message="two checkpoints")
            assert not job.is_complete()
            kill_worker_of(cluster, job.spus("count")[0])
            wait_until(lambda: job.checkpoints.stats.recoveries, 60, message="the rollback")
            assert job.wait(120), job.status()
        else:
            assert job.wait(120), job.status()
            kill_worker_of(cluster, job.spus("count")[0])
        job.stop()
        assert job.checkpoints.stats.recoveries, "the kill was noticed"
        assert not job.final_status.get("close_errors"), job.final_status
    assert finals(job) == expected_finals()
    assert eo_parts.tally_total(job.data_dir) == eo_parts.words_in(TOTAL)


def test_a_stop_mid_stream_does_not_finish_and_a_rerun_after_the_end_does_not_finish_again(tmp_path):
    """job.stop() before the source finished: no finish() (a restart goes on with the counts, and finishes
    at the real end, once). A third run on the same data_dir restores the checkpoint in which the input had
    ended: its source has nothing new and it finishes nothing again."""
    topology = eo_parts.build_finals("finish-stop", TOTAL, rate=500)
    with LocalCluster(workers=2) as cluster:
        job = cluster.submit(topology, config(tmp_path))
        wait_until(lambda: job.checkpoints.stats.completed >= 2, 60, message="two checkpoints")
        job.stop()  # mid-stream: a final checkpoint, but the source had not finished
        assert job.restored_from is None and not latest(job).input_ended
        assert finals(job) == {}, "finish() ran at a stop mid-stream"
        job = cluster.submit(topology, config(tmp_path))
        assert job.restored_from is not None and not job.restored_from.input_ended
        assert job.wait(120), job.status()
        job.stop()
        assert latest(job).input_ended
        assert finals(job) == expected_finals()
        assert eo_parts.tally_total(job.data_dir) == eo_parts.words_in(TOTAL)
        job = cluster.submit(topology, config(tmp_path))
        assert job.restored_from is not None and job.restored_from.input_ended
        assert job.wait(120), job.status()
        job.stop()
        assert latest(job).input_ended, "the rerun's checkpoints lost the ended input"
    assert finals(job) == expected_finals(), "the rerun finished again"
