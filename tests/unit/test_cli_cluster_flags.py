"""`esault run`'s cluster flags: one meant for another kind of cluster is refused before anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from esault import cli
from esault.job.outcome import ExitCode

WORDCOUNT = Path(__file__).resolve().parents[2] / "examples" / "wordcount.py"


@pytest.mark.parametrize("flags, names", [
    (["--cluster", "processes", "--ray-head-timeout", "10"], "--ray-head-timeout is for a ray:// cluster"),
    (["--cluster", "threads", "--max-workers", "4"], "--max-workers grows the local pool"),
    (["--cluster", "static"], "--cluster static needs --listen"),
])
def test_a_flag_for_another_kind_of_cluster_is_refused_naming_it(tmp_path, capfd, flags, names):
    code = cli.main(["run", str(WORDCOUNT), "--data-dir", str(tmp_path), *flags])
    assert code == int(ExitCode.NOT_STARTED)
    assert names in capfd.readouterr().err
    assert not list(tmp_path.iterdir()), "nothing may start (or write) before the flags are checked"
