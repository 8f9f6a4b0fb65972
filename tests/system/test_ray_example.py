"""examples/ray_wordcount.py as a user runs it: the word count on a Ray cluster it starts itself, exact."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cli_processes import ENV  # noqa: E402

pytestmark = [pytest.mark.system, pytest.mark.ray, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]


def test_the_ray_word_count_example_runs_on_ray_workers_and_counts_exactly():
    env = {k: v for k, v in ENV.items() if k != "RAY_ADDRESS"}
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "ray_wordcount.py")], capture_output=True,
                          text=True, timeout=280, env={**env, "RAY_WORDCOUNT_SENTENCES": "5000"}, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "every count exact: True" in done.stdout, done.stdout[-3000:]
    workers = [line for line in done.stdout.splitlines() if line.startswith("  ray-")]
    assert workers and all(": ray ray node " in line for line in workers), done.stdout[-3000:]
