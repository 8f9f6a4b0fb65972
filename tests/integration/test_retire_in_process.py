"""A non-keyed bolt's instance retired under exactly_once, with every actor in one process: its close()
output reaches the sum ahead of the savepoint that follows at once (the retiring SPU waits for the sum's
answer to its marker, sent to its own actor ref here; tests/system/test_instance_states.py does it across
worker processes)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from esault import JobConfig, LocalCluster
from esault.testing import wait_until

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT / "tests" / "system"))
import eo_parts  # noqa: E402

TOTAL = 2000


@pytest.mark.parametrize("ones", [False, True], ids=["one-tuple", "thousands"])
def test_a_rescale_down_then_a_stopping_savepoint_counts_every_word_once(tmp_path, ones):
    config = JobConfig(data_dir=tmp_path / "data", elasticity=False, checkpoint_interval=3600.0)
    with LocalCluster() as cluster:
        job = cluster.submit(eo_parts.build_tally("tally-local", TOTAL, rate=4000, ones=ones), config)
        counted = lambda spu: sum(s.processed for s in job.spu_counters() if s.unit == "tally" and s.spu == spu)  # noqa: E731
        wait_until(lambda: all(counted(s) > 1000 for s in job.spus("tally")), 60, message="both tally SPUs counting")
        result = job.rescale("tally", 1)
        assert len(result.retired) == 1
        epoch = job.savepoint(stop=True, timeout=60)  # the spouts end at its barrier
        assert job.wait(60), job.status()
        job.stop()
        restored = cluster.submit(eo_parts.build_tally("tally-local", TOTAL, rate=4000, ones=ones),
                                  config.replace(restore_from=epoch))
        assert restored.restored_from.epoch == epoch
        assert restored.wait(60), restored.status()
        restored.stop()
    assert eo_parts.tally_total(restored.data_dir) == eo_parts.words_in(TOTAL)
