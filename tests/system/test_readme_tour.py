"""The README's tour runs as written, on worker processes: its files are saved and run as the README says.

Each ```python block of the tour whose first line is `# NAME.py` is saved as
NAME.py in a fresh folder. A script is run with `python NAME.py` and its
output must be the ```text block after it; a `test_*.py` file is run with
pytest and must pass. So the README cannot rot.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOUR_HEADING = "## A 5-minute tour"

pytestmark = pytest.mark.system


def tour_files(readme: str) -> list[tuple[str, str, str | None]]:
    """(file name, code, expected stdout or None) for each named python block of the tour, in order."""
    start = readme.index(TOUR_HEADING)
    end = readme.find("\n## ", start + len(TOUR_HEADING))
    section = readme[start:end if end != -1 else None]
    files: list[tuple[str, str, str | None]] = []
    for block in re.finditer(r"^```(\w+)\n(.*?)^```$", section, re.S | re.M):
        language, body = block.group(1), block.group(2)
        named = re.match(r"# (\w+\.py)\n", body)
        if language == "python" and named:
            files.append((named.group(1), body, None))
        elif language == "text" and files and files[-1][2] is None:
            name, code, _ = files[-1]
            files[-1] = (name, code, body)
    return files


def run(args: list[str], folder: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, *args], cwd=folder, env=env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def tour(tmp_path_factory) -> tuple[Path, list[tuple[str, str, str | None]]]:
    folder = tmp_path_factory.mktemp("tour")
    files = tour_files((ROOT / "README.md").read_text())
    for name, code, _ in files:
        (folder / name).write_text(code)
    return folder, files


def test_the_tour_has_a_script_with_its_output_and_a_test_file(tour):
    _, files = tour
    scripts = [(name, out) for name, _, out in files if not name.startswith("test_")]
    assert scripts and all(out for _, out in scripts), "each script of the tour shows what it prints"
    assert any(name.startswith("test_") for name, _, _ in files), "the tour shows a test with the testing kit"


def test_the_tours_scripts_print_what_the_readme_says(tour):
    folder, files = tour
    for name, _, expected in files:
        if name.startswith("test_"):
            continue
        done = run([name], folder)
        assert done.returncode == 0, f"python {name} failed:\n{done.stderr[-3000:]}"
        assert done.stdout == expected, f"python {name} printed\n{done.stdout}\nthe README says\n{expected}"


def test_the_tours_test_file_passes_under_pytest(tour):
    folder, files = tour
    for name, _, _ in files:
        if name.startswith("test_"):
            done = run(["-m", "pytest", "-q", "-p", "no:cacheprovider", name], folder)
            assert done.returncode == 0 and " passed" in done.stdout, done.stdout[-3000:] + done.stderr[-3000:]


def test_a_script_that_starts_its_cluster_without_a_main_guard_fails_saying_to_add_one(tmp_path):
    """What a worker process does when it imports such a script for its classes (they would otherwise start
    clusters of their own)."""
    (tmp_path / "unguarded.py").write_text(
        "from esault import Bolt, LocalCluster, TopologyBuilder\n"
        "from esault.testing import ListSpout\n"
        "class Pass(Bolt):\n"
        "    def process(self, tup):\n"
        "        self.emit(tup.key, tup.value)\n"
        "b = TopologyBuilder('unguarded')\n"
        "b.set_spout('src', ListSpout, params={'items': [['k', 1]]})\n"
        "b.set_bolt('pass', Pass, 2).key_grouping('src')\n"
        "with LocalCluster(workers=1) as cluster:\n"
        "    cluster.submit(b.build())\n")
    done = run(["unguarded.py"], tmp_path)
    assert done.returncode != 0
    assert re.search(r"UnitStartError: unit 'pass' cannot start on worker w1: .*TopologyError: the driver's script "
                     r"\S*unguarded\.py started a LocalCluster while a worker process imported it for the "
                     r"topology's classes: put the code that runs the job under `if __name__ == \"__main__\":`",
                     done.stderr), done.stderr[-3000:]
