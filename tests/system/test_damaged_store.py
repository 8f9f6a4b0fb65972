"""A damaged checkpoint store (truncated, overwritten, one state row changed) under `esault run`: the run
falls back to the newest intact checkpoint and ends exact (counts and the sink's table), or stops with
exit 2 naming the file and the ways out; never a raw traceback, never a table with rows missing or twice.

One job is run and stopped mid-stream (its final checkpoint and the periodic ones before it recorded,
the table holding what they published); each test damages a copy of its data dir and runs it again.
"""

from __future__ import annotations

import random
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from esault import JobConfig, LocalCluster
from esault.testing import wait_until
from esault.transport.codec import decode

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT / "tests" / "system"))
import eo_parts  # noqa: E402

pytestmark = pytest.mark.system

NAME = "eo-damaged"
TOTAL = 2500
TOPOLOGY = """
import sys
sys.path[:0] = {paths!r}
import eo_parts
topology = eo_parts.build({name!r}, {total}, rate=1500, sink="pyarrow")
JOB_DEFAULTS = {{"elasticity": False, "checkpoint_interval": 0.3, "message_timeout": 300.0}}
"""


@pytest.fixture(scope="module")
def stopped(tmp_path_factory) -> tuple[Path, Path]:
    """(where the job ran, a copy) of the data dir of the job stopped mid-stream, after five checkpoints."""
    data = tmp_path_factory.mktemp("stopped") / "data"
    topology = eo_parts.build(NAME, TOTAL, rate=300, sink="pyarrow")
    config = JobConfig(data_dir=data, elasticity=False, checkpoint_interval=0.3, message_timeout=300.0)
    with LocalCluster(workers=2) as cluster:
        job = cluster.submit(topology, config)
        wait_until(lambda: job.checkpoints.stats.completed >= 5, 60, message="five checkpoints")
        job.stop()
    store = data / NAME / "checkpoints.sqlite"
    db = sqlite3.connect(store)
    (positions,) = db.execute("SELECT positions FROM checkpoints ORDER BY epoch DESC LIMIT 1").fetchone()
    assert decode(positions)[0]["sentences"][0] < TOTAL, "the job must stop mid-stream for a restart to replay"
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # everything in the main file, where the damage goes
    db.close()
    pristine = data.with_name("pristine")
    shutil.copytree(data, pristine)
    return data, pristine


def copy_of(stopped: tuple[Path, Path], tmp_path: Path) -> tuple[Path, Path]:
    """(data dir, its checkpoint store) of the stopped job as it was, in the place it ran (the restored
    state of the "latest" bolt holds the path of its output file)."""
    data, pristine = stopped
    shutil.rmtree(data)
    shutil.copytree(pristine, data)
    return data, data / NAME / "checkpoints.sqlite"


def run_cli(data: Path, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    topo = tmp_path / "damaged_topology.py"
    topo.write_text(TOPOLOGY.format(paths=[str(ROOT), str(ROOT / "examples"), str(ROOT / "tests" / "system")],
                                    name=NAME, total=TOTAL))
    return subprocess.run([sys.executable, "-m", "esault.cli", "run", str(topo), "--data-dir", str(data),
                           "--workers", "2", "--timeout", "120", *extra],
                          capture_output=True, text=True, timeout=240)


def assert_exact(data: Path) -> None:
    expected = eo_parts.oracle(TOTAL)
    assert eo_parts.final_counts(data / NAME) == expected
    assert eo_parts.table_rows(data / NAME / "warehouse", "eo_counts") == eo_parts.exact_rows(expected), \
        "the table has a missing or duplicate row"


def epochs_with_rows(store: Path) -> list[int]:
    db = sqlite3.connect(store)
    try:
        return [e for (e,) in db.execute("SELECT DISTINCT b.epoch FROM buckets b JOIN checkpoints c "
                                         "ON c.epoch = b.epoch ORDER BY b.epoch")]
    finally:
        db.close()


def test_a_changed_state_row_of_the_latest_checkpoints_falls_back_to_the_one_before_and_ends_exact(
        stopped, tmp_path):
    data, store = copy_of(stopped, tmp_path)
    db = sqlite3.connect(store)
    newest = db.execute("SELECT MAX(epoch) FROM checkpoints").fetchone()[0]
    damaged = epochs_with_rows(store)[-1]
    blobs = [b for (b,) in db.execute("SELECT entries FROM buckets WHERE epoch = ? AND LENGTH(entries) "
                                      "BETWEEN 8 AND 1000", (damaged,))]
    before = db.execute("SELECT MAX(epoch) FROM checkpoints WHERE epoch < ?", (damaged,)).fetchone()[0]
    db.close()
    raw = bytearray(store.read_bytes())
    blob = next((b for b in blobs if raw.count(b) == 1), b"")  # a row whose bytes are on one page, once
    at = raw.find(blob)
    assert blob and at >= 0, "a row of the newest epoch with rows is found in the file"
    middle = at + len(blob) // 2
    raw[middle:middle + 2] = bytes(b ^ 0xFF for b in raw[middle:middle + 2])
    store.write_bytes(bytes(raw))

    run = run_cli(data, tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    assert (f"checkpoint {newest} in {store} is damaged (a state row of checkpoint {damaged}" in run.stdout
            and f"falling back to checkpoint {before}, the newest intact one" in run.stdout), run.stdout
    assert_exact(data)


DAMAGE = [("overwrite", 0.25), ("overwrite", 0.5), ("overwrite", 0.75),
          ("truncate", 0.25), ("truncate", 0.5), ("truncate", 0.9)]


@pytest.mark.parametrize(("how", "where"), DAMAGE)
def test_a_truncated_or_overwritten_store_either_falls_back_exactly_or_stops_naming_the_file_and_the_ways_out(
        stopped, tmp_path, how, where):
    """Whatever the damage hits (a page SQLite checks, a row's bytes, free space), the run ends exact or
    with exit 2 and a message that names the file and the ways out; --fresh then runs the job exactly."""
    data, store = copy_of(stopped, tmp_path)
    size = store.stat().st_size
    with open(store, "r+b") as fh:
        if how == "truncate":
            fh.truncate(int(size * where))
        else:
            fh.seek(int(size * where))
            fh.write(random.Random(f"{how}{where}").randbytes(1024))
    run = run_cli(data, tmp_path)
    assert "Traceback" not in run.stderr, run.stderr[-3000:]
    if run.returncode == 0:
        assert_exact(data)
        return
    assert run.returncode == 2, run.stderr[-3000:]
    assert (f"esault: error: the checkpoint store {store} is damaged: " in run.stderr and "--fresh" in run.stderr
            and "--restore-from" in run.stderr), run.stderr[-3000:]
    again = run_cli(data, tmp_path, "--fresh")
    assert again.returncode == 0, again.stderr[-3000:]
    assert_exact(data)


@pytest.mark.parametrize(("what", "how"), [("commit log", "truncate"), ("commit log", "overwrite"),
                                           ("table metadata", "overwrite")])
def test_a_damaged_commit_log_or_table_metadata_stops_the_run_naming_the_file_and_the_ways_out(
        stopped, tmp_path, what, how):
    data, _ = copy_of(stopped, tmp_path)
    meta = data / NAME / "warehouse" / "eo_counts" / "_esault"
    (path,) = meta.glob("commits/*.log") if what == "commit log" else [meta / "schema.json"]
    raw = bytearray(path.read_bytes())
    if how == "truncate":
        raw = raw[:len(raw) // 2]
    else:
        middle = len(raw) // 2
        raw[middle] = ord("7") if raw[middle] != ord("7") else ord("3")  # still text: JSON may well parse
    path.write_bytes(bytes(raw))
    run = run_cli(data, tmp_path)
    assert run.returncode == 2, run.stderr[-3000:]
    assert "Traceback" not in run.stderr and f"the {'sink' + chr(39) + 's ' if what == 'commit log' else ''}" \
        f"{what} {path} is damaged: " in run.stderr and "Ways out: put back a copy" in run.stderr, run.stderr[-3000:]
