"""`esault run` (a real subprocess, with worker processes) runs what was declared and says what it does: it
never looks like it kept a guarantee it did not, never resumes an earlier run silently, and shows its
physical plan (which bolts run chained into which)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from test_cli import ROOT, esault

PATH_STATE = '''
from pathlib import Path
from esault import Bolt, TopologyBuilder
from esault.testing import ListSpout

class Count(Bolt):
    def open(self, context):
        self.path = Path(context.data_dir) / str(self.key)  # a new user's PE: msgpack cannot encode it
        self.n = 0
    def process(self, tup):
        self.n += 1
        self.emit(tup.key, self.n)

b = TopologyBuilder('pathstate')
b.set_spout('src', ListSpout, params={'items': [[f"k{i % 5}", i] for i in range(200)]})
b.set_bolt('count', Count, 2).key_grouping('src')
topology = b.build()
'''

TINY = '''
from esault import Bolt, TopologyBuilder
from esault.testing import ListSpout

class Upper(Bolt):
    def process(self, tup):
        self.emit(tup.key, tup.value.upper())

b = TopologyBuilder('tiny')
b.set_spout('src', ListSpout, params={'items': [[i, 'x'] for i in range(50)]})
b.set_bolt('up', Upper, 2).shuffle_grouping('src')
topology = b.build()
'''


@pytest.mark.parametrize("until", [[], ["--duration", "600"]], ids=["to-completion", "duration"])
def test_a_pe_state_msgpack_cannot_encode_fails_the_exactly_once_run_with_exit_2_and_no_checkpoint_completed(
        tmp_path, until):
    (tmp_path / "pathstate.py").write_text(PATH_STATE)
    result = esault("run", "pathstate.py", "--data-dir", "d", "--workers", "1", *until, cwd=tmp_path, timeout=180)
    assert result.returncode == 2, result.stderr  # with --duration 600 too: it ends at the failure (timeout 180)
    assert "esault: error: topology 'pathstate' failed (exit code 2):" in result.stderr
    problem = re.search(r"^  - (.*)$", result.stderr, re.M).group(1)
    assert re.match(r"topology 'pathstate': bolt 'count' cannot save the state of key 'k\d': attribute 'path' is a "
                    r"PosixPath, which msgpack cannot encode; keep the attributes to str, .*\(a path as str\(path\)",
                    problem), problem
    assert "Guarantee 'exactly_once' needs every state in every checkpoint, so the job fails" in problem
    assert re.search(r"exactly_once: 0 checkpoint\(s\), last epoch None, [1-9]\d* failed", result.stdout), \
        result.stdout


def test_running_the_same_command_again_says_it_resumes_from_which_checkpoint_and_file_and_that_nothing_is_left(
        tmp_path):
    (tmp_path / "tiny.py").write_text(TINY)
    first = esault("run", "tiny.py", "--workers", "1", cwd=tmp_path, timeout=180)  # the default data dir
    assert first.returncode == 0, first.stderr
    assert "resuming" not in first.stdout and "nothing left to do" not in first.stdout
    epoch = re.search(r"exactly_once: 1 checkpoint\(s\), last epoch (\d+)", first.stdout).group(1)

    again = esault("run", "tiny.py", "--workers", "1", cwd=tmp_path, timeout=180)
    assert again.returncode == 0, again.stderr
    lines = again.stdout.splitlines()
    assert lines[0] == (f"resuming topology 'tiny' from checkpoint {epoch} (final) in "
                        f"{Path('esault-data') / 'tiny' / 'checkpoints.sqlite'}: the spouts continue where the run "
                        "that wrote it stopped; to start over instead, add --fresh to this command (esault run "
                        "tiny.py ... --fresh discards these checkpoints)"), "the first line of the output"
    assert "src          1 SPU(s), emitted 0," in again.stdout
    assert (f"nothing left to do: topology 'tiny' had already finished at checkpoint {epoch}, so its spouts emitted "
            "nothing this run. Add --fresh to run it again from the start") in again.stdout

    fresh = esault("run", "tiny.py", "--workers", "1", "--fresh", cwd=tmp_path, timeout=180)
    assert fresh.returncode == 0, fresh.stderr
    assert "resuming" not in fresh.stdout and "nothing left to do" not in fresh.stdout
    assert "src          1 SPU(s), emitted 50, acked 50" in fresh.stdout


PLAN = '''
from esault import Bolt, TopologyBuilder
from esault.testing import ListSpout

class Same(Bolt):
    def process(self, tup):
        self.emit(tup.key, tup.value)

b = TopologyBuilder('plan')
b.set_spout('src', ListSpout, params={'items': [[i, 'x'] for i in range(50)]})
b.set_bolt('parse', Same, elastic=False).shuffle_grouping('src')
b.set_bolt('enrich', Same).shuffle_grouping('parse')
b.set_bolt('count', Same, 2).key_grouping('enrich')
topology = b.build()
'''


def test_the_start_up_log_shows_the_physical_plan_with_the_chained_bolts_and_the_elastic_ones(tmp_path):
    (tmp_path / "plan.py").write_text(PLAN)
    result = esault("run", "plan.py", "--data-dir", "d", "--workers", "1", cwd=tmp_path, timeout=180)
    assert result.returncode == 0, result.stderr
    assert ("physical plan of topology 'plan' (3 unit(s) with SPUs of their own):\n"
            "  src + parse (chained)  spout, 1 SPU; parse runs in its SPUs\n"
            "  enrich                 bolt, 1 SPU, elastic up to 8 SPUs\n"
            "  count                  bolt, 2 SPUs, elastic up to 8 SPUs\n") in result.stderr, result.stderr
    assert "enrich       1 SPU(s), processed 50" in result.stdout


def readme_spout_section() -> tuple[str, str]:
    """The README tour's "Your own spout" section: its spout code and the refusal it quotes."""
    readme = (ROOT / "README.md").read_text()
    start = readme.index("### Your own spout, exactly-once")
    section = readme[start:readme.index("\n## ", start)]
    code = re.search(r"^```python\n(.*?)^```$", section, re.S | re.M).group(1)
    refusal = re.search(r"^```console\n(.*?)\n^```$", section, re.S | re.M).group(1)
    return code, refusal


RUN_LINES = '''
from esault import TopologyBuilder
from esault.testing import CollectorBolt
b = TopologyBuilder('lines')
b.set_spout('lines', Lines, params={'path': 'input.txt'})
b.set_bolt('out', CollectorBolt).shuffle_grouping('lines')
topology = b.build()
'''


def test_the_readme_spout_with_its_two_methods_runs_exactly_once_and_without_them_is_refused_as_the_readme_says(
        tmp_path):
    code, refusal = readme_spout_section()
    (tmp_path / "input.txt").write_text("".join(f"line {i}\n" for i in range(30)))
    (tmp_path / "lines.py").write_text(code + RUN_LINES)
    ran = esault("run", "lines.py", "--data-dir", "d", "--workers", "1", cwd=tmp_path, timeout=180)
    assert ran.returncode == 0, ran.stderr
    assert "lines        1 SPU(s), emitted 30, acked 30, failed 0" in ran.stdout
    assert re.search(r"exactly_once: [1-9]\d* checkpoint\(s\)", ran.stdout), ran.stdout

    without = re.sub(r"    def (snapshot|restore)_position\(.*?\n.*?\n", "", code)
    assert "position" not in without, "both methods taken out"
    (tmp_path / "lines.py").write_text(without + RUN_LINES)
    refused = esault("run", "lines.py", "--data-dir", "d2", "--workers", "1", cwd=tmp_path, timeout=180)
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.strip().splitlines()[-1] == refusal
    assert "ran" not in refused.stdout, "nothing ran"
