"""bench/join_chain.py --quick runs its jobs on two worker processes and prints and writes every row."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.system

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ["keyed, 1 SPU (symmetric hash join)", "chain, 1 SPU(s)", "chain, 2 SPU(s)", "chain, 4 SPU(s)",
           "chain, 2 SPUs, exactly_once"]
PREDICATE_ONLY = ["chain, 4 SPUs, zeta 1", "chain, 4 SPUs, zeta 20", "chain, 4 SPUs, zeta 100",
                  "2x overload, no shedding", "2x overload, shed tau1 0.9", "2x overload, shed tau1 0.5"]


def test_the_quick_end_to_end_join_benchmark_prints_and_writes_every_configuration_with_all_pairs(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "join_chain.py"), "--quick", "--out", str(tmp_path)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=240, env={**os.environ})
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {(line.split()[0], line[10:46].strip()): line for line in done.stdout.splitlines()
            if line.split() and line.split()[0] in ("equi", "band", "predicate")}
    expected = [(join, c) for join in ("equi", "band", "predicate") for c in CONFIGS]
    expected += [("predicate", c) for c in PREDICATE_ONLY]
    probes = [key for key in rows if key[1].startswith("capacity probe")]  # as many as it took to fall behind
    assert probes and probes[0] == ("predicate", "capacity probe, paced 1x unpaced"), done.stdout
    scaling = [key for key in rows if key[1].startswith("scaling probe")]  # 1 and 2 SPUs, until each falls behind
    assert scaling[:3] == [("predicate", "scaling probe, 1 SPU(s), unpaced"),
                           ("predicate", "scaling probe, 1 SPU(s), 0.7x"),
                           ("predicate", "scaling probe, 2 SPU(s), 0.7x")], done.stdout
    assert sorted(rows) == sorted(expected + probes + scaling), done.stdout
    assert "Chain scaling (predicate join" in done.stdout or "no capacity ratio" in done.stdout, done.stdout
    for (join, config), line in rows.items():
        if "shed tau1" not in config:  # everything but shedding must deliver the oracle's pairs, exactly
            assert " 100.0% " in line, line
    section = (tmp_path / "joins_chain.md").read_text()
    assert section.startswith("## End to end on worker processes")
    assert section.count("\n| predicate |") == len(CONFIGS) + len(PREDICATE_ONLY) + len(probes) + len(scaling)
    assert "Scaling probes (part 4)" in section
    assert (tmp_path / "joins_chain.png").stat().st_size > 10_000
