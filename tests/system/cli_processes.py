"""`esault` commands started as processes of their own by the system tests, output to a log file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(
    [str(ROOT), str(ROOT / "examples"), str(ROOT / "tests" / "system"), os.environ.get("PYTHONPATH", "")])}
"""The tree, its examples and these tests' parts importable in every process (drivers and workers)."""


def start_esault(*args: str, cwd: Path, log: Path) -> subprocess.Popen:
    """An esault command whose output goes to the file `log` (a pipe nobody reads would block it)."""
    with log.open("a") as out:
        return subprocess.Popen([sys.executable, "-m", "esault.cli", *args], stdout=out, stderr=subprocess.STDOUT,
                                text=True, env=ENV, cwd=cwd)
