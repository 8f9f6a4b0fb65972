"""The `esault` command, run as a real subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def esault(*args: str, cwd: Path, env: dict | None = None, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "esault.cli", *args], cwd=cwd, capture_output=True, text=True,
        timeout=timeout, env={**os.environ, **(env or {})},
    )


def test_run_executes_a_topology_file_to_completion_and_prints_counts(tmp_path):
    topo = tmp_path / "tiny.py"
    topo.write_text(
        "from esault import Bolt, TopologyBuilder\n"
        "from esault.testing import ListSpout\n"
        "class Upper(Bolt):\n"
        "    def process(self, tup):\n"
        "        self.emit(tup.key, tup.value.upper())\n"
        "b = TopologyBuilder('tiny')\n"
        "b.set_spout('src', ListSpout, params={'items': [[i, 'x'] for i in range(50)]})\n"
        "b.set_bolt('up', Upper, 2).shuffle_grouping('src')\n"
        "topology = b.build()\n"
        "def summarize(job):\n"
        "    return 'summary: done'\n"
    )
    result = esault("run", str(topo), "--data-dir", str(tmp_path / "data"), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "src          1 SPU(s), emitted 50, acked 50, failed 0" in result.stdout
    assert "up           2 SPU(s), processed 50" in result.stdout
    assert result.stdout.rstrip().endswith("summary: done")


@pytest.mark.parametrize(
    "content, expected",
    [
        ("x = (\n", r"tiny\.py:1: syntax error"),
        ("import nonexistent_module_xyz\n", r"tiny\.py:1: importing the topology raised ModuleNotFoundError"),
        ("y = 1\n", r"defines neither `topology` nor `build_topology\(\)`"),
        ("topology = 42\n", r"expected a Topology .* got int"),
        ("from esault import TopologyBuilder\nb = TopologyBuilder('t')\ntopology = b.build()\n", r"has no spout"),
    ],
)
def test_a_bad_topology_file_gets_one_clear_line_and_exit_code_2(tmp_path, content, expected):
    import re

    (tmp_path / "tiny.py").write_text(content)
    result = esault("run", "tiny.py", "--data-dir", str(tmp_path / "d"), cwd=tmp_path, timeout=60)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("esault: error: "), result.stderr
    assert re.search(expected, lines[0]), lines[0]


def test_a_bad_config_names_the_file_and_field(tmp_path):
    (tmp_path / "job.toml").write_text("[job]\nmax_spout_pending = 0\n")
    result = esault("run", str(ROOT / "examples" / "wordcount.py"), "--config", "job.toml", cwd=tmp_path, timeout=60)
    assert result.returncode == 2
    assert "config file job.toml: JobConfig.max_spout_pending must be a whole number >= 1, got 0" in result.stderr


def test_a_bad_environment_override_is_reported(tmp_path):
    result = esault("run", str(ROOT / "examples" / "wordcount.py"), cwd=tmp_path,
                    env={"ESAULT_BATCH_SIZE": "lots"}, timeout=60)
    assert result.returncode == 2
    assert "environment variable ESAULT_BATCH_SIZE='lots' is not a valid int" in result.stderr


def test_the_main_job_counts_exactly_and_ends_with_a_spark_sql_result(tmp_path):
    """The README's main command: word count into a Spark table, then Spark SQL over it."""
    result = esault("run", str(ROOT / "examples" / "wordcount.py"), "--data-dir", str(tmp_path), cwd=tmp_path,
                    timeout=400)
    assert result.returncode == 0, result.stderr
    sys.path.insert(0, str(ROOT / "examples"))
    import wordcount

    oracle = wordcount.oracle(20000)
    counts = json.loads((tmp_path / "wordcount" / "wordcount.json").read_text())
    assert counts == dict(oracle)
    assert "sentences    1 SPU(s), emitted 20000, acked 20000, failed 0, replayed 0" in result.stdout
    assert "Spark SQL over table word_counts" in result.stdout
    spark_lines = result.stdout.split("Spark SQL over table word_counts")[1].splitlines()[4:9]
    top5 = [(w, c) for w, c in oracle.most_common(5)]
    assert [tuple(line.split()) for line in spark_lines] == [(w, str(c)) for w, c in top5]


def test_an_unknown_esault_variable_stops_the_run_before_it_starts(tmp_path):
    result = esault("run", str(ROOT / "examples" / "wordcount.py"), cwd=tmp_path,
                    env={"ESAULT_MAX_RETRY": "2"}, timeout=60)
    assert result.returncode == 2
    assert "unknown environment variable(s) ESAULT_MAX_RETRY (did you mean ESAULT_MAX_RETRIES?)" in result.stderr


FAILING = '''
import threading
from esault import Bolt, TopologyBuilder
from esault.testing import ListSpout

class Upper(Bolt):
    def __init__(self, lock=None):
        self.lock = lock
    def process(self, tup):
        if tup.key % 10 == 0:
            raise ValueError("no multiples of ten")
        self.emit(tup.key, tup.value.upper())

class NoDatabase(Bolt):
    def open(self, context):
        raise OSError("no database")
    def process(self, tup):
        pass

class Broken(ListSpout):
    def next_tuple(self):
        raise RuntimeError("broken source")

b = TopologyBuilder('failing')
b.set_spout('src', {spout}, params={{'items': [[i, 'x'] for i in range(50)]}})
b.set_bolt('up', {bolt}, 2, chain=False{params}).shuffle_grouping('src')
topology = b.build()
'''


def failing(tmp_path: Path, spout: str = "ListSpout", bolt: str = "Upper", params: str = "") -> Path:
    path = tmp_path / "failing.py"
    path.write_text(FAILING.format(spout=spout, bolt=bolt, params=params))
    return path


def line_of(path: Path, text: str) -> int:
    return next(n for n, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def test_dead_lettered_tuples_make_the_run_exit_1_with_the_dead_letter_file_named(tmp_path):
    result = esault("run", str(failing(tmp_path)), "--data-dir", str(tmp_path / "d"), cwd=tmp_path,
                    env={"ESAULT_MAX_RETRIES": "0"})
    assert result.returncode == 1, result.stderr
    assert "up           2 SPU(s), processed 50" in result.stdout
    assert "esault: error: topology 'failing' did not process all its input (exit code 1):" in result.stderr
    assert (f"  - 5 tuple(s) dead-lettered (up 5): each failed every retry; they, their errors and file:line are in "
            f"{tmp_path / 'd' / 'failing' / 'dead_letters.jsonl'}") in result.stderr


@pytest.mark.parametrize("bolt, params, expected", [
    ("NoDatabase", "", r"unit 'up' cannot start on worker w\d: bolt 'up' constructor or open\(\) raised OSError: "
                       r"no database at .*failing\.py:{line}"),
    ("Upper", ", params={'lock': threading.Lock()}", r"bolt 'up': param 'lock' \(lock\) cannot be sent to the worker "
                                                     r"processes"),
])
def test_a_unit_that_cannot_start_fails_the_run_at_once_with_exit_2(tmp_path, bolt, params, expected):
    import re

    path = failing(tmp_path, bolt=bolt, params=params)
    result = esault("run", str(path), "--data-dir", str(tmp_path / "d"), cwd=tmp_path, timeout=120)
    assert result.returncode == 2, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("esault: error: ") and re.search(expected.format(line=line_of(path, "no database")), last)
    assert "ran" not in result.stdout, "nothing ran: no summary of counts"


def test_a_spout_that_keeps_raising_is_stopped_and_the_run_exits_1(tmp_path):
    path = failing(tmp_path, spout="Broken")
    result = esault("run", str(path), "--data-dir", str(tmp_path / "d"), cwd=tmp_path,
                    env={"ESAULT_MAX_SPOUT_ERRORS": "20"}, timeout=120)
    assert result.returncode == 1, result.stderr
    assert (f"  - spout 'src' next_tuple() raised 20 times in a row (last: RuntimeError: broken source at {path}:"
            f"{line_of(path, 'broken source')}); it was stopped") in result.stderr
    assert result.stderr.count("Traceback (most recent call last)") == 5, "the first 5 errors in full, then counts"


def test_status_shows_why_a_job_cannot_go_on_first_under_its_job(tmp_path):
    """Job.status()["failures"]: each reason on its own line under the job's, before the units' rates."""
    import threading

    from esault import JobConfig, LocalCluster, TopologyBuilder
    from esault.testing import CollectorBolt, reset_collected
    from topology_parts import GATES, GatedListSpout

    reset_collected()
    GATES["failing"] = threading.Event()
    builder = TopologyBuilder("failing")
    builder.set_spout("src", GatedListSpout, params={"items": [["k", 1]] * 10, "gate": "failing", "hold_at": 5})
    builder.set_bolt("out", CollectorBolt, params={"name": "failing"}).global_grouping("src")
    reason = "SPU 7 of bolt 'out' was lost and no worker could take it back: add a worker"
    with LocalCluster(listen="127.0.0.1:0") as cluster:
        job = cluster.submit(builder.build(), JobConfig(data_dir=tmp_path / "data", elasticity=False,
                                                        guarantee="at_least_once"))
        try:
            healthy = esault("status", cluster.address, cwd=tmp_path, timeout=60)
            assert healthy.returncode == 0, healthy.stderr
            assert "job 'failing': " in healthy.stdout
            assert "FAILED" not in healthy.stdout
            job.fail(reason)
            job.fail("a second reason")
            result = esault("status", cluster.address, cwd=tmp_path, timeout=60)
        finally:
            GATES["failing"].set()
            job.stop()
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("job 'failing': "))
    assert lines[header].startswith("job 'failing': FAILED, "), lines[header]
    assert lines[header + 1:header + 3] == [f"  FAILED: {reason}", "  FAILED: a second reason"], result.stdout
