"""Workers forked by the driver's warm zygote (esault/cluster/forker.py, cluster/zygote.py): each is what a fresh
`esault worker` would be (the requester's cwd, environment, sys.path and streams; its exit code), a malformed
request is refused without stopping the zygote, and a zygote killed -9 costs only speed: the pool starts fresh
interpreters and the workers it forked before are still watched to their end."""

from __future__ import annotations

import json
import os
import signal
import socket

import sys
from pathlib import Path

import pytest

from esault import JobConfig, LocalCluster, TopologyBuilder
from esault.cluster import processes
from esault.cluster.forker import ForkedProcess, ForkerUnavailable, WorkerForker
from esault.cluster.zygote import _validated
from esault.job.outcome import ExitCode
from esault.testing import ListSpout, wait_until

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import wordcount  # noqa: E402

pytestmark = pytest.mark.system
BOLT_MODULE = '''
import json, os, sys
from esault import Bolt

class WhereAmI(Bolt):
    """Writes where its worker runs: cwd, an environment variable, whether this module's folder is on sys.path."""

    def __init__(self, out: str) -> None:
        self.out = out

    def process(self, tup) -> None:
        with open(self.out, "w") as f:
            json.dump({"cwd": os.getcwd(), "mark": os.environ.get("ESAULT_FORKER_TEST_MARK"),
                       "on_path": os.path.dirname(__file__) in sys.path, "pid": os.getpid()}, f)
'''


@pytest.fixture
def forker():
    made = WorkerForker()
    yield made
    made._close()


def an_idle_worker(forker: WorkerForker, connect_timeout: float = 60.0) -> ForkedProcess:
    """A worker waiting for a driver that does not listen (a port nobody binds): it lives until killed."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return forker.start(["worker", "--driver", f"127.0.0.1:{port}", "--name", "idle", "--keys-stdin",
                         "--connect-timeout", str(connect_timeout)], keys_json())


def keys_json() -> str:
    from esault.cluster.credentials import WorkerKeys
    from esault.transport.keys import KeyPair

    return WorkerKeys(KeyPair.generate(), KeyPair.generate().public).to_json() + "\n"


def test_a_forked_worker_has_the_requesters_cwd_env_and_sys_path_set_after_the_zygote_started(
        tmp_path, monkeypatch):
    """The shared zygote started before this test changed anything: what the worker sees came with the request."""
    with LocalCluster(workers=1):
        pass  # the zygote runs now, with the cwd, environment and sys.path of before
    module_dir = tmp_path / "mods"
    module_dir.mkdir()
    (module_dir / "forker_where_bolt.py").write_text(BOLT_MODULE)
    workdir = tmp_path / "cwd"
    workdir.mkdir()
    monkeypatch.syspath_prepend(str(module_dir))
    monkeypatch.chdir(workdir)
    monkeypatch.setenv("ESAULT_FORKER_TEST_MARK", "set-after-the-zygote")
    import forker_where_bolt

    out = tmp_path / "where.json"
    builder = TopologyBuilder("where")
    builder.set_spout("src", ListSpout, params={"items": [("k", 1)]})
    builder.set_bolt("where", forker_where_bolt.WhereAmI, 1, params={"out": str(out)}).key_grouping("src")
    with LocalCluster(workers=1) as cluster:
        assert isinstance(cluster.pool.processes[0], ForkedProcess), "the worker was not forked by the zygote"
        job = cluster.submit(builder.build(), JobConfig(data_dir=tmp_path / "data", guarantee="at_least_once"))
        wait_until(out.exists, 60, message="the bolt in the worker writing where it runs")
        job.stop()
        worker_pid = cluster.pool.processes[0].pid
    where = json.loads(out.read_text())
    assert where == {"cwd": str(workdir), "mark": "set-after-the-zygote", "on_path": True, "pid": worker_pid}


def test_a_forked_workers_error_reaches_the_requesters_stderr_and_its_exit_code_comes_back(forker, capfd):
    process = forker.start(["worker", "--driver", "127.0.0.1:9", "--name", "nokeys"], "")
    assert process.wait(60) == ExitCode.NOT_STARTED, "a worker without keys exits with NOT_STARTED"
    assert "a worker needs its keys" in capfd.readouterr().err


def test_a_killed_forked_worker_reports_the_signal_and_a_late_signal_reaches_nobody(forker):
    process = an_idle_worker(forker)
    assert process.poll() is None
    process.kill()
    assert process.wait(30) == -signal.SIGKILL
    process.terminate()  # ended: no signal goes to whoever has its pid now
    assert process.returncode == -signal.SIGKILL


def test_a_malformed_request_is_refused_and_the_zygote_serves_the_next(forker):
    first = an_idle_worker(forker)  # starts the zygote
    for bad in (b"not json", json.dumps({"argv": ["run", "x.py"], "cwd": "/", "env": {}, "path": []}).encode(),
                json.dumps(["worker"]).encode()):
        r, w = os.pipe()
        try:
            socket.send_fds(forker._sock, [bad], [r, 1, 2])
        finally:
            os.close(r)
            os.close(w)
        reply = forker._reply()
        assert "pid" not in reply and "refused a malformed request" in reply["error"], reply
    second = an_idle_worker(forker)
    assert second.pid != first.pid and second.poll() is None
    for process in (first, second):
        process.kill()
        assert process.wait(30) == -signal.SIGKILL


@pytest.mark.parametrize("request_", [
    {"argv": ["worker", 3], "cwd": "/", "env": {}, "path": []},
    {"argv": ["worker"], "cwd": 1, "env": {}, "path": []},
    {"argv": ["worker"], "cwd": "/", "env": {"A": 1}, "path": []},
    {"argv": ["worker"], "cwd": "/", "env": {}, "path": "/x"},
    {"argv": [], "cwd": "/", "env": {}, "path": []},
])
def test_the_zygote_runs_only_the_worker_command_with_string_arguments(request_):
    with pytest.raises(ValueError):
        _validated(json.dumps(request_).encode())


def test_a_zygote_killed_9_leaves_its_workers_watched_and_the_pool_starts_fresh_interpreters(
        forker, monkeypatch, config):
    orphan = an_idle_worker(forker)
    zygote = forker.zygote_pid
    assert zygote is not None
    os.kill(zygote, signal.SIGKILL)
    wait_until(lambda: forker.zygote_pid is None, 30, message="the driver noticing its zygote is gone")
    with pytest.raises(ForkerUnavailable):
        an_idle_worker(forker)
    orphan.kill()  # through its pidfd: the zygote that could report its exit is gone
    assert orphan.wait(30) == -1, "its end is seen; its exit code died with the zygote"

    monkeypatch.setattr(processes, "shared_forker", lambda: forker)
    with LocalCluster(workers=2) as cluster:
        assert not any(isinstance(p, ForkedProcess) for p in cluster.pool.processes)
        job = cluster.submit(wordcount.build_topology(total=2000, seed=5, count_parallelism=2, sink=None),
                             config)
        assert job.wait(120), job.status()
        job.stop()
    assert json.loads((job.data_dir / "wordcount.json").read_text()) == dict(wordcount.oracle(2000, seed=5))


def test_a_forked_worker_shows_its_own_command_line_not_the_zygotes():
    """ps, top and pkill -f find a forked worker by what it is: `esault worker ... --name w1`."""
    with LocalCluster(workers=1) as cluster:
        process = cluster.pool.processes[0]
        assert isinstance(process, ForkedProcess)
        shown = Path(f"/proc/{process.pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
        assert shown.startswith("esault worker --driver ") and "--name w1" in shown, shown
        assert "zygote" not in shown, shown
