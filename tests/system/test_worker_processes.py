"""SPUs in real `esault worker` processes linked by pyzmq: exact results, live reconfiguration."""

from __future__ import annotations

import json
import random
import sys
import threading
from pathlib import Path

import pytest

from esault import LocalCluster, ScalingError, TopologyBuilder
from esault.errors import EsaultError
from esault.testing import collected, reset_collected, wait_until

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT / "tests" / "integration"))
import wordcount  # noqa: E402
from test_elasticity import load_step_splits_then_merges  # noqa: E402
from test_assign_workload import random_assignment  # noqa: E402
from test_split_merge import assert_exact, sequenced_items  # noqa: E402
from topology_parts import (  # noqa: E402
    GATES, DriverCollectorBolt, GatedListSpout, SequenceCheckBolt,
)

pytestmark = pytest.mark.system


@pytest.fixture(scope="module")
def workers():
    """Two worker processes shared by this module's tests."""
    with LocalCluster(workers=2) as cluster:
        yield cluster


@pytest.fixture
def config(config):
    """These tests collect into the driver as a side effect, which a rollback cannot undo: at_least_once
    (tests/system/test_exactly_once.py covers the exactly-once paths on worker processes)."""
    return config.replace(guarantee="at_least_once")


@pytest.fixture(autouse=True)
def _fresh(workers):
    reset_collected()
    yield
    for job in list(workers.jobs.values()):
        job.stop()


def test_wordcount_across_two_worker_processes_equals_the_counter(workers, config):
    job = workers.submit(wordcount.build_topology(total=3000, seed=11, count_parallelism=3, sink=None), config)
    assert job.wait(60), job.status()
    assert all(workers.registry.spus_on[w] for w in workers.registry.workers), "both workers host SPUs"
    job.stop()
    counts = json.loads((job.data_dir / "wordcount.json").read_text())
    assert counts == dict(wordcount.oracle(3000, seed=11))


def test_drain_with_spus_in_worker_processes_says_it_cannot_and_what_to_do_instead(workers, config):
    job = workers.submit(wordcount.build_topology(total=300, seed=3, count_parallelism=2, sink=None), config)
    with pytest.raises(EsaultError, match=r"drain\(\) waits only on SPUs in the driver process.*count SPU .*"
                                          r"wait_until"):
        job.drain()
    assert job.wait(60), job.status()  # the job goes on: nothing was sent


def test_splits_and_merges_across_processes_keep_every_key_exact(workers, config):
    keys, per_key = 200, 30
    items = sequenced_items(keys, per_key, seed=21)
    GATES["mp"] = threading.Event()
    builder = TopologyBuilder("mp")
    builder.set_spout("src", GatedListSpout, params={"items": items, "gate": "mp", "hold_at": len(items) // 3})
    builder.set_bolt("check", SequenceCheckBolt, 2, pe_idle_timeout=None).key_grouping("src")
    builder.set_bolt("out", DriverCollectorBolt, params={"name": "mp"}).global_grouping("check")
    job = workers.submit(builder.build(), config)
    wait_until(lambda: len(collected("mp")) >= len(items) // 4, 30, message="a quarter collected")
    first = job.split("check", job.spus("check")[0])
    job.merge("check", first.giver)
    GATES["mp"].set()
    second = job.split("check", job.spus("check")[-1])
    job.merge("check", second.receiver)
    assert job.wait(60), job.status()
    assert_exact("mp", keys, per_key)
    check_spus = set(job.spus("check"))
    assert check_spus <= set().union(*workers.registry.spus_on.values()), "check's SPUs live in workers"


def flowing_sequence_job(workers, config, name: str, spus: int, seed: int, keys: int = 200, per_key: int = 150,
                         flowing: bool = True):
    """A sequence-checked job on the workers with a tenth of its input through and the rest flowing (or, if
    not `flowing`, waiting for GATES[name])."""
    items = sequenced_items(keys, per_key, seed=seed)
    GATES[name] = threading.Event()
    builder = TopologyBuilder(name)
    builder.set_spout("src", GatedListSpout, params={"items": items, "gate": name, "hold_at": len(items) // 5})
    builder.set_bolt("check", SequenceCheckBolt, spus, pe_idle_timeout=None).key_grouping("src")
    builder.set_bolt("out", DriverCollectorBolt, params={"name": name}).global_grouping("check")
    job = workers.submit(builder.build(), config)
    wait_until(lambda: len(collected(name)) >= len(items) // 10, 30, message="a tenth collected")
    if flowing:
        GATES[name].set()
    return job, items, keys, per_key


def test_random_workload_assignments_across_processes_keep_every_key_exact(workers, config):
    """assign_workload moves several ranges at once between SPUs on both workers, starting and retiring
    SPUs, while tuples flow: every key's sequence stays exact."""
    job, items, keys, per_key = flowing_sequence_job(workers, config, "mpa", spus=3, seed=31)
    rnd = random.Random(8)
    done = 0
    while done < 4 or (len(collected("mpa")) < len(items) and done < 20):
        try:
            job.assign_workload("check", random_assignment(rnd, job.workload("check")))
            done += 1
        except ScalingError as exc:
            assert "the assignment is the current one" in str(exc)
    job.rescale("check", 2)
    assert job.wait(60), job.status()
    assert_exact("mpa", keys, per_key)
    assert set(job.spus("check")) <= set().union(*workers.registry.spus_on.values())


def test_an_spu_moves_to_another_worker_with_its_state_while_tuples_flow(workers, config):
    job, items, keys, per_key = flowing_sequence_job(workers, config, "mpr", spus=2, seed=32)
    spus_on = workers.registry.spus_on
    for spu in job.spus("check"):
        here = next(w for w, spus in spus_on.items() if spu in spus)
        there = next(w for w in sorted(spus_on) if w != here)
        owned = job.workload("check")[spu]
        moved = job.assign_resource("check", spu, there)
        assert moved.giver == spu and moved.retired == (spu,) and moved.started == (moved.receiver,)
        assert moved.receiver in spus_on[there] and spu not in spus_on[here]
        assert job.workload("check")[moved.receiver] == owned
    with pytest.raises(ScalingError, match="no worker 'nowhere' has joined the driver; workers: "):
        job.assign_resource("check", job.spus("check")[0], "nowhere")
    assert job.wait(60), job.status()
    assert_exact("mpr", keys, per_key)


def test_a_bolts_code_is_swapped_on_the_workers_with_every_key_exact(workers, config):
    from test_assign_workload import swapped_exactly
    from topology_parts import SequenceCheckBoltV2

    job, items, keys, per_key = flowing_sequence_job(workers, config, "mpl", spus=2, seed=33, flowing=False)
    before = {spu: job.worker_of(spu) for spu in job.spus("check")}
    result = job.assign_logic("check", SequenceCheckBoltV2)
    GATES["mpl"].set()  # the rest (four fifths) is the new code's, with the state the old code left
    assert set(result.retired) == set(before) and len(result.started) == 2
    assert sorted(job.worker_of(s) for s in result.started) == sorted(before.values())  # each where its old one ran
    assert job.wait(60), job.status()
    assert_exact("mpl", keys, per_key)
    assert swapped_exactly("mpl") > 0  # the workers run the new class


def test_a_load_step_splits_a_bolt_across_processes_and_the_lull_merges_it(workers, config):
    job = load_step_splits_then_merges(workers, config, "mp-elastic", DriverCollectorBolt)
    assert set(job.spus("check")) <= set().union(*workers.registry.spus_on.values()), "SPUs live in workers"


@pytest.mark.parametrize("message_timeout", [2.0, 300.0])
def test_at_least_once_killing_a_worker_mid_run_still_counts_every_word_at_least_once(tmp_path, config, message_timeout):
    """With a 300 s message_timeout the job still ends in time: trees held by the dead worker fail as
    soon as its SPUs are replaced, not after the timeout."""
    import collections
    import random

    from topology_parts import SlowIncrementBolt

    rnd = random.Random(41)
    words = [f"w{rnd.randrange(60)}" for _ in range(1500)]
    items = [(w, i) for i, w in enumerate(words)]
    GATES["kill"] = threading.Event()
    builder = TopologyBuilder("kill")
    builder.set_spout("src", GatedListSpout, params={"items": items, "gate": "kill", "hold_at": 300},
                      max_pending=200)
    builder.set_bolt("count", SlowIncrementBolt, 2, params={"seconds": 0.001}, elastic=False).key_grouping("src")
    builder.set_bolt("out", DriverCollectorBolt, params={"name": "kill"}).global_grouping("count")
    with LocalCluster(workers=2, heartbeat_timeout=1.0) as cluster:
        job = cluster.submit(builder.build(), config.replace(message_timeout=message_timeout, data_dir=tmp_path,
                                                             guarantee="at_least_once"))
        wait_until(lambda: len(collected("kill")) >= 200, 30, message="the first tuples counted")
        GATES["kill"].set()
        wait_until(lambda: job.status()["units"]["src"]["inflight"] >= 50, 30, message="tuples in flight")
        victim = max(cluster.registry.workers, key=lambda w: len(cluster.registry.spus_on[w]))
        lost = set(cluster.registry.spus_on[victim])
        cluster.pool.processes[int(victim[1:]) - 1].kill()
        replaced = wait_until(lambda: [r for r in job.scaling_history if r.action == "replace"], 30,
                              message="the dead worker's SPUs replaced")
        assert {r.giver for r in replaced} <= lost and replaced[0].reason == "worker lost"
        assert job.wait(90), job.status()
        counts = collections.Counter(word for word, _ in collected("kill"))
        oracle = collections.Counter(words)
        assert all(counts[w] >= n for w, n in oracle.items()), "a word lost a count"
        duplicates = sum(counts.values()) - sum(oracle.values())
        src = job.status()["units"]["src"]
        assert src["acked"] == len(items) and src["replayed"] >= 1
        print(f"\n[worker kill] {src['replayed']} tuples replayed, {duplicates} duplicate counts")
        assert list(cluster.registry.workers) == [w for w in ("w1", "w2") if w != victim]


def test_guarantee_none_losing_a_worker_ends_the_job_without_a_timeout_and_counts_the_loss(tmp_path, config):
    """Nothing tracks tuples under "none": the job must still end once the loss settles, and say so."""
    from topology_parts import GatedIncrementBolt

    from esault.job.outcome import ExitCode, judge_run

    items = [(f"w{i % 40}", i) for i in range(1200)]
    GATES["none-kill"] = threading.Event()
    builder = TopologyBuilder("none-kill")
    builder.set_spout("src", GatedListSpout, params={"items": items, "gate": "none-kill", "hold_at": 200})
    gate = tmp_path / "hold"
    builder.set_bolt("count", GatedIncrementBolt, 2, params={"gate": str(gate)}, elastic=False).key_grouping("src")
    builder.set_bolt("out", DriverCollectorBolt, params={"name": "none-kill"}).global_grouping("count")
    with LocalCluster(workers=2, heartbeat_timeout=1.0) as cluster:
        job = cluster.submit(builder.build(), config.replace(data_dir=tmp_path, guarantee="none"))
        wait_until(lambda: len(collected("none-kill")) >= 100, 30, message="the first tuples counted")
        gate.touch()  # the count SPUs hold their next tuple: what comes after waits in their inboxes
        GATES["none-kill"].set()
        # Queued in both count SPUs, which hold: the spout's own count is live (it runs here), the SPUs' come
        # with heartbeats, so a backlog read from them can be stale (seen: the kill came before anything was
        # queued, and nothing was lost). A local worker's death is seen at once, so only what sits in the
        # victim's inbox, or is sent to it before its replacement, is lost.
        wait_until(lambda: job.status()["units"]["src"]["emitted"] >= 600, 30, message="tuples queued in workers")
        counting = set(job.spus("count"))
        victim = max((w for w in cluster.registry.workers if counting & set(cluster.registry.spus_on[w])),
                     key=lambda w: len(cluster.registry.spus_on[w]))
        lost = set(cluster.registry.spus_on[victim])
        cluster.pool.processes[int(victim[1:]) - 1].kill()
        gate.unlink()  # the survivor goes on
        assert job.wait(60), f"the job must end once the loss settled: {job.status()}"
        job.stop()
        status = job.status()
        assert set(status["lost_spus"]) == lost
        totals = {u: (v["emitted"], v["processed"]) for u, v in status["units"].items()}
        assert 0 < status["unaccounted"] <= len(items) - 100, (status["unaccounted"], totals)
        outcome = judge_run(status, True, timeout=None, duration=None, dead_letter_path="x")
        assert outcome.exit_code is ExitCode.INCOMPLETE and "guarantee 'none' does not replay" in outcome.problems[0]


def test_a_bolt_behind_a_worker_hosted_keyed_bolt_keeps_its_own_spus_through_that_bolts_splits_and_merges(
        workers, config):
    """relay has check's parallelism and is its only reader, yet is not fused into check's SPUs: they split and
    merge by key range, and a fused bolt's per-SPU state would follow no key (GUARANTEES.md)."""
    from topology_parts import RaiseOnBadBolt

    keys, per_key = 120, 20
    items = sequenced_items(keys, per_key, seed=5)
    GATES["mp-chain"] = threading.Event()
    builder = TopologyBuilder("mp-chain")
    builder.set_spout("src", GatedListSpout, params={"items": items, "gate": "mp-chain", "hold_at": len(items) // 3})
    builder.set_bolt("check", SequenceCheckBolt, 2, pe_idle_timeout=None).key_grouping("src")
    builder.set_bolt("relay", RaiseOnBadBolt, 2, elastic=False).shuffle_grouping("check")
    builder.set_bolt("out", DriverCollectorBolt, params={"name": "mp-chain"}).global_grouping("relay")
    topology = builder.build()
    assert topology.host_of("relay") == "relay" and topology.unit("check").stages == ()
    job = workers.submit(topology, config)
    wait_until(lambda: len(collected("mp-chain")) >= len(items) // 4, 30, message="a quarter collected")
    split = job.split("check", job.spus("check")[0])
    GATES["mp-chain"].set()
    job.merge("check", split.receiver)
    assert job.wait(60), job.status()
    seen: dict[str, list[int]] = {}
    for key, (seq, in_order) in collected("mp-chain"):
        assert in_order, f"check saw key {key}'s {seq} out of order"
        seen.setdefault(key, []).append(seq)
    # Every sequence number once; their order after relay's shuffle grouping is not promised (GUARANTEES.md).
    assert {k: sorted(v) for k, v in seen.items()} == {f"k{i}": list(range(1, per_key + 1)) for i in range(keys)}
    relay_spus = set(job.spus("relay"))
    job.stop()  # the final status waits for the workers' last counts
    relay = job.final_status["units"]["relay"]
    assert relay.get("chained_into") is None and relay["processed"] == len(items) == relay["emitted"]
    assert set(relay["spus"]) == relay_spus and len(relay_spus) == 2


def test_spouts_placed_in_workers_read_their_partitions_and_the_job_completes_exactly(workers, config, tmp_path):
    sys.path.insert(0, str(ROOT / "bench"))
    import esault_wordcount
    import wordcount_input

    path = wordcount_input.make_input(tmp_path / "words.txt", words=60_000, vocabulary=3_000)
    topology = esault_wordcount.build(str(path), count_spus=2, spout_placement="worker")
    assert topology.unit("lines").where == "worker" and topology.host_of("split") == "lines"
    job = workers.submit(topology, config.replace(data_dir=tmp_path / "data"))
    assert job.wait(60), job.status()
    spout_spus = set(job.spus("lines"))
    hosted = set().union(*workers.registry.spus_on.values())
    assert spout_spus <= hosted, "the spout SPUs ran in the workers"
    job.stop()
    assert esault_wordcount.final_counts(tmp_path / "data") == dict(wordcount_input.oracle(path))
    lines = job.final_status["units"]["lines"]
    assert lines["acked"] == 6_000 and len(lines["spus"]) == 2


SCRIPT = '''
import json, sys, tempfile
from esault import Bolt, JobConfig, LocalCluster, TopologyBuilder
from esault.testing import ListSpout


class Count(Bolt):  # defined in the script: workers load this file under another name
    def open(self, context):
        self.n = 0

    def process(self, tup):
        self.n += 1

    def close(self):
        self.emit(self.key, self.n)


class Gather(Bolt):
    esault_placement = "driver"
    seen = {}

    def process(self, tup):
        Gather.seen[tup.key] = tup.value


if __name__ == "__main__":  # must not run in the workers
    words = [("a", 1), ("b", 1), ("a", 1), ("c", 1), ("a", 1)] * 40
    b = TopologyBuilder("script")
    b.set_spout("src", ListSpout, params={"items": words})
    b.set_bolt("count", Count, 2).key_grouping("src")
    b.set_bolt("out", Gather).global_grouping("count")
    with LocalCluster(workers=2) as cluster:
        job = cluster.submit(b.build(), JobConfig(data_dir=tempfile.mkdtemp()))
        assert job.wait(60)
        job.stop()
    print(json.dumps(Gather.seen, sort_keys=True))
'''


def test_bolts_defined_in_the_script_being_run_work_in_worker_processes(tmp_path):
    import subprocess

    script = tmp_path / "my_job.py"
    script.write_text(SCRIPT)
    env = {**__import__("os").environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"a": 120, "b": 40, "c": 40}


def test_a_unit_no_worker_can_load_fails_the_submit_at_once_naming_it(workers, config):
    import types

    from esault import Bolt
    from esault.errors import TopologyError

    module = types.ModuleType("only_in_the_driver")  # importable here, nowhere else
    exec("from esault import Bolt\nclass Ghost(Bolt):\n    def process(self, tup):\n        pass\n", module.__dict__)
    sys.modules["only_in_the_driver"] = module
    try:
        builder = TopologyBuilder("ghost")
        builder.set_spout("src", GatedListSpout, params={"items": [("k", 1)], "gate": "none", "hold_at": 1})
        builder.set_bolt("ghost", module.Ghost, 2).key_grouping("src")
        started = __import__("time").monotonic()
        with pytest.raises(TopologyError, match=r"unit 'ghost' cannot start on worker w\d: TopologyError: worker "
                                                r"cannot import only_in_the_driver:Ghost"):
            workers.submit(builder.build(), config)
        assert __import__("time").monotonic() - started < 20
    finally:
        del sys.modules["only_in_the_driver"]
    assert issubclass(module.Ghost, Bolt)


def test_status_names_the_process_of_every_spu(workers, config):
    job = workers.submit(wordcount.build_topology(total=200, seed=2, count_parallelism=2, sink=None), config)
    assert job.wait(60)
    pids = {p.pid for p in workers.pool.processes}
    for unit, expected in (("count", pids), ("sentences", {__import__("os").getpid()})):
        spus = job.status()["units"][unit]["spus"]
        assert spus and {s["pid"] for s in spus.values()} <= expected, spus
        assert all(s["worker"] and s["address"].startswith("tcp://") for s in spus.values())
    assert {s["worker"] for s in job.status()["units"]["count"]["spus"].values()} == {"w1", "w2"}


DRIVER_SCRIPT = """
import sys, threading
from esault import LocalCluster
from esault.cluster.forker import shared_forker
with LocalCluster(workers=2, heartbeat_timeout=2.0) as cluster:
    print(" ".join(str(p.pid) for p in cluster.pool.processes), shared_forker().zygote_pid, flush=True)
    threading.Event().wait()  # until killed
"""


def test_workers_exit_when_their_driver_is_killed():
    import os
    import signal
    import subprocess

    driver = subprocess.Popen([sys.executable, "-c", DRIVER_SCRIPT], stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(p) for p in driver.stdout.readline().split()]  # the workers', then their zygote's
        assert len(pids) == 3, "the driver did not start its workers from a zygote"

        def alive(pid: int) -> bool:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return False
            with open(f"/proc/{pid}/stat") as stat:  # a zombie (exited, not yet reaped) is gone too
                return stat.read().split(")")[-1].split()[0] != "Z"

        assert all(alive(pid) for pid in pids)
        driver.send_signal(signal.SIGKILL)
        driver.wait(10)
        wait_until(lambda: not any(alive(pid) for pid in pids), 30,
                   message="both workers and the zygote that forked them gone after the driver")
    finally:
        if driver.poll() is None:
            driver.kill()
        driver.stdout.close()


def test_idle_keys_keep_their_state_in_worker_processes(workers, config):
    """Parked state lives in the unit's SQLite file under the data_dir, written from worker processes."""
    keys, per_key = 30, 6
    items = sequenced_items(keys, per_key, seed=12)
    GATES["mp-park"] = threading.Event()
    builder = TopologyBuilder("mp-park")
    builder.set_spout("src", GatedListSpout, params={"items": items, "gate": "mp-park", "hold_at": len(items) // 2})
    builder.set_bolt("check", SequenceCheckBolt, 2, pe_idle_timeout=0.5).key_grouping("src")
    builder.set_bolt("out", DriverCollectorBolt, params={"name": "mp-park"}).global_grouping("check")
    job = workers.submit(builder.build(), config)
    wait_until(lambda: len(collected("mp-park")) == len(items) // 2, 30, message="first half collected")
    parked = job.data_dir / "state" / "check.sqlite"  # (counts lag a heartbeat: wait for the file too)
    wait_until(lambda: parked.exists() and job.status()["units"]["check"]["pes"] == 0, 30,
               message="every PE expired and parked")
    GATES["mp-park"].set()
    assert job.wait(60), job.status()
    job.stop()
    assert_exact("mp-park", keys, per_key)


def test_a_cluster_shutting_down_its_workers_leaves_no_frame_queued_for_them():
    """The driver stops beating the workers it tells to exit: a beat queued for a process that is gone made
    closing the transport wait out its whole linger (1 s a cluster) and then drop it."""
    for _ in range(3):  # beats go out every 0.1 s and a worker exits within a few: each round had some queued
        with LocalCluster(workers=2) as cluster:
            endpoint = cluster.postman.endpoint
            cluster.wait_for_workers(2, 60)
        assert endpoint.dropped() == {}, f"frames dropped when the cluster closed: {endpoint.dropped()}"
