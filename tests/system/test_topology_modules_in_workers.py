"""A topology file is imported by every worker too: what runs where (the slow-import warning: a unit test)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.system

TOPOLOGY = """
import os
from pathlib import Path
import esault
from esault import Bolt, TopologyBuilder
from esault.testing import ListSpout

HERE = Path(__file__).parent
(HERE / f"imported-{'worker' if esault.in_worker() else 'driver'}-{os.getpid()}").touch()
if not esault.in_worker():
    (HERE / f"driver-only-{os.getpid()}").touch()

class Upper(Bolt):
    def process(self, tup):
        self.emit(tup.key, tup.value.upper())

b = TopologyBuilder('modules')
b.set_spout('src', ListSpout, params={'items': [[i, 'x'] for i in range(50)]})
b.set_bolt('up', Upper, 2, elastic=False).shuffle_grouping('src')
topology = b.build()
"""


def test_module_level_code_runs_in_each_worker_and_in_worker_tells_them_apart(tmp_path: Path):
    (tmp_path / "modules.py").write_text(TOPOLOGY)
    done = subprocess.run([sys.executable, "-m", "esault.cli", "run", "modules.py", "--workers", "2",
                           "--guarantee", "at_least_once", "--data-dir", str(tmp_path / "data"), "--timeout", "120"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=180, env={**os.environ})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "up           2 SPU(s), processed 50" in done.stdout, done.stdout
    names = [p.name for p in tmp_path.iterdir()]
    assert len([n for n in names if n.startswith("imported-driver-")]) == 1, names
    assert len([n for n in names if n.startswith("imported-worker-")]) == 2, "each worker imports the file once"
    assert len([n for n in names if n.startswith("driver-only-")]) == 1, "in_worker() guards driver-only code"
