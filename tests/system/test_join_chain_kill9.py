"""kill -9 of a worker process hosting a join chain SPU (mode="chain"), at each step of the chain's protocol:
the job rolls back to its last checkpoint, completes, and every pair comes out exactly once (a nested loop's
Counter, equal, not merely covered).

Holding an SPU at a step: the chain's bolt asks for ticks, and its tick blocks while the file gate-<pid> of its
worker process exists (chain_kill_parts.GatedChainJoinBolt); a blocked SPU handles no message, so what the
protocol sends it (a split's PrepareGive, a payments spout's EpochMarker, a neighbour's Quiet or Mark) waits in
its mailbox. A spout is held the same way (its backlog() blocks while its gate exists), so a split or merge waits
for its route switch. The driver's UnitActor is watched (Prepared answers) to know that both sides prepared.
The pairs are counted by a collector whose count is checkpointed state, published when the job stops.

How deterministic: the tail-add steps are exact (the old tail answered Prepared, then is held before the EpochMarker
that makes it Link); in the merge, the retiring tail's kill races (by milliseconds) with it handling its marker and
sending Quiet (either way no Handoff has left); in quiescing, the kill races with the neighbours' barrier alignment
after the coordinator started the checkpoint; mid-flow kills at whatever moment the second third is entering.

Found by these tests: pairs doubled after a rollback, now and then. The cause was outside the chain: the test
rewrote its limit files in place, a spout could read one empty, and ListSpout.next_tuple() then set its position
back to 0 (a limit that goes down now holds a ListSpout back, never rewinds it; the files are replaced atomically).
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

from esault import JobConfig, LocalCluster, TopologyBuilder
from esault.dsl.topology import Grouping
from esault.errors import ScalingError
from esault.job.unit import UnitActor
from esault.testing import reset_collected, wait_until

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT / "tests" / "system"))
sys.path.insert(0, str(ROOT / "tests" / "integration"))
import chain_kill_parts as parts  # noqa: E402
from test_join_chain_spus import make_stream, oracle  # noqa: E402


pytestmark = pytest.mark.system

N, WINDOW = 180, 40
STAGE = N // 3  # emitted before the step is set up


def chain_kill_topology(name: str, lefts: list, rights: list, spus: int, files: Path):
    b = TopologyBuilder(name)
    b.set_spout("orders", parts.FileStagedSpout,
                params={"items": lefts, "limit_file": str(files / "orders.limit"), "gate": str(files / "orders.gate")})
    b.set_spout("payments", parts.FileStagedSpout,
                params={"items": rights, "limit_file": str(files / "payments.limit"),
                        "gate": str(files / "payments.gate")})
    queries = [{"name": "j", "kind": "equi", "on": "k", "band": 0.0},
               {"name": "near", "kind": "band", "on": "x", "band": 1},
               {"name": "odd", "kind": "test_join_chain_spus:odd_sum"}]
    b.set_bolt("j", parts.GatedChainJoinBolt, spus,
               params={"left": "orders", "right": "payments", "queries": queries, "window": WINDOW, "time": "ts",
                       "zeta": 3, "shed": None}
               )._add("orders", Grouping.CHAIN_HEAD)._add("payments", Grouping.CHAIN_TAIL)
    b.set_bolt("out", parts.CheckpointedCollectorBolt, params={"name": "pairs"}).global_grouping("j")
    return b.build()


class ChainRun:
    """One job on three worker processes, with the files that release and hold its parts."""

    def __init__(self, cluster: LocalCluster, tmp_path: Path, name: str, spus: int) -> None:
        self.cluster, self.files = cluster, tmp_path
        self.lefts, self.rights = make_stream(N, 11), make_stream(N, 12)
        self.release(STAGE)
        self.job = cluster.submit(chain_kill_topology(name, self.lefts, self.rights, spus, tmp_path), JobConfig(
            data_dir=tmp_path / "data", elasticity=False, guarantee="exactly_once", checkpoint_interval=0.25,
            message_timeout=300.0))
        wait_until(lambda: self.processed() == 2 * STAGE and self.job.checkpoints.stats.completed >= 2, 30,
                   message="the first third joined and checkpointed")

    def release(self, upto: int, streams: tuple[str, ...] = ("orders", "payments")) -> None:
        for stream in streams:  # atomically: a spout reading a half-written file would see no limit at all
            tmp = self.files / f"{stream}.limit.tmp"
            tmp.write_text(str(upto))
            tmp.replace(self.files / f"{stream}.limit")

    def processed(self) -> int:
        return self.job.status()["units"]["j"]["processed"]

    def chain(self) -> list[int]:
        return self.job.spus("j")

    def worker_of(self, spu: int) -> str:
        return next(w for w, spus in self.cluster.registry.spus_on.items() if spu in spus)

    def pid_of(self, spu: int) -> int:
        return self.cluster.registry.pids[self.worker_of(spu)]

    def hold(self, spu: int) -> Path:
        """Block `spu` (every chain SPU of its process) at its next tick; returns the gate file."""
        gate = parts.gate_of(self.files, self.pid_of(spu))
        gate.touch()
        wait_until(parts.reached(gate).exists, 20, message=f"chain SPU {spu} held")
        return gate

    def hold_spout(self, stream: str) -> Path:
        gate = self.files / f"{stream}.gate"
        gate.touch()
        wait_until(parts.reached(gate).exists, 20, message=f"spout {stream} held")
        return gate

    def kill(self, spu: int, recoveries: int = 1) -> None:
        worker = self.worker_of(spu)
        os.kill(self.cluster.registry.pids[worker], signal.SIGKILL)
        self.cluster.pool.spawn(f"r{recoveries}")  # the cluster stays at three workers

    def finish(self, gates: list[Path]) -> None:
        """Gates open, the rollback awaited, the rest released: the job completes with every pair once."""
        for gate in gates:
            gate.unlink(missing_ok=True)
        wait_until(lambda: self.job.checkpoints.stats.recoveries, 60, message="the rollback")
        self.release(N)
        assert self.job.wait(60), self.job.status()
        self.job.stop()
        got, expected = parts.collected_pairs("pairs"), oracle(self.lefts, self.rights, WINDOW)
        missing, twice = expected - got, got - expected
        assert not missing and not twice, f"{sum(missing.values())} pairs missing, {sum(twice.values())} extra " \
                                          f"(e.g. {list(missing)[:3]} / {list(twice)[:3]})"
        assert sum(expected.values()) > 1000


@pytest.fixture
def cluster(monkeypatch, tmp_path):
    monkeypatch.setenv(parts.GATES_ENV, str(tmp_path))  # inherited by the workers (and the respawned one)
    reset_collected()
    with LocalCluster(workers=3, heartbeat_timeout=1.0) as cluster:
        yield cluster
    reset_collected()


@pytest.fixture
def prepared(monkeypatch):
    """(spu, role) of every Prepared a unit got, in order: both sides of a split or merge are ready."""
    seen: list[tuple[int, str]] = []
    original = UnitActor._on_prepared

    def spy(self, msg):
        seen.append((msg.spu_id, msg.role))
        return original(self, msg)

    monkeypatch.setattr(UnitActor, "_on_prepared", spy)
    return seen


@pytest.fixture
def started(monkeypatch):
    """Epochs of the checkpoints the coordinator started, in order."""
    from esault.checkpoint.coordinator import CheckpointCoordinator

    epochs: list[int] = []
    original = CheckpointCoordinator.checkpoint

    def spy(self, *args, **kwargs):
        epochs.append(self.next_epoch)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(CheckpointCoordinator, "checkpoint", spy)
    return epochs


def test_a_worker_killed_mid_flow_rolls_the_chain_back_and_every_pair_still_joins_once(cluster, tmp_path):
    """Step 1: a chain of three SPUs on three workers, tuples entering and crossing the links; the middle SPU's
    worker dies between checkpoints."""
    run = ChainRun(cluster, tmp_path, "ck-flow", spus=3)
    a, b, c = run.chain()
    assert len({run.pid_of(s) for s in (a, b, c)}) == 3, "one chain SPU per worker"
    run.release(2 * STAGE)
    wait_until(lambda: run.processed() > 2 * STAGE, 20, message="the second third entering")
    run.kill(b)
    run.finish([])


@pytest.mark.parametrize("victim", ["old tail", "new tail"])
def test_a_worker_killed_while_a_tail_is_added_rolls_back_and_every_pair_still_joins_once(
        cluster, tmp_path, prepared, victim):
    """Step 2, a tail added (split): both sides prepared and the payments spout switched its route to the new
    tail, but the old tail is held before the EpochMarker that makes it Link the new one; the new tail waits
    for that Link (S entries queue there). Then the old tail's worker, or the new tail's, dies: the split
    aborts, the job rolls back (the routes had switched, so the unit keeps three SPUs: the checkpoint's two
    workers are restored onto them) and joins the rest."""
    run = ChainRun(cluster, tmp_path, "ck-grow", spus=2)
    a, b = run.chain()
    spout_gate = run.hold_spout("payments")
    pending = run.job.split_async("j", a)
    wait_until(lambda: len(prepared) == 2, 20, message="the old and the new tail prepared")
    new = next(spu for spu, role in prepared if role == "receiver")
    assert {spu for spu, _ in prepared} == {b, new}
    assert len({run.pid_of(s) for s in (a, b, new)}) == 3, "one chain SPU per worker"
    gate = run.hold(b)
    spout_gate.unlink()
    wait_until(lambda: new in run.chain(), 20, message="the payments spout switched to the new tail")
    run.kill(b if victim == "old tail" else new)
    with pytest.raises(ScalingError, match="aborted"):
        pending.result(60)
    run.finish([gate])
    assert len(run.job.final_status["units"]["j"]["spus"]) == 3, "routes had switched: the unit keeps its new layout"


@pytest.mark.parametrize("victim", ["retiring tail", "left neighbour"])
def test_a_worker_killed_while_the_tail_merges_rolls_back_and_every_pair_still_joins_once(
        cluster, tmp_path, prepared, victim):
    """Step 3, the tail merged into its left neighbour (merge): both prepared, the payments spout switched to
    the left neighbour, which is held, so the retiring tail's Quiet waits in its mailbox: the tail cannot
    hand its state off (its link is not known empty). Then the retiring tail's worker, or its left
    neighbour's, dies: the merge aborts, the job rolls back (the unit keeps its new layout, two SPUs: the checkpoint's three
    workers fold into them in order), and the rest joins exactly."""
    run = ChainRun(cluster, tmp_path, "ck-shrink", spus=3)
    a, b, c = run.chain()
    assert len({run.pid_of(s) for s in (a, b, c)}) == 3, "one chain SPU per worker"
    spout_gate = run.hold_spout("payments")
    pending = run.job.merge_async("j", c)
    wait_until(lambda: len(prepared) == 2, 20, message="the tail and its left neighbour prepared")
    assert sorted(prepared) == [(b, "receiver"), (c, "giver")]
    gate = run.hold(b)
    spout_gate.unlink()
    wait_until(lambda: c not in run.chain(), 20, message="the payments spout switched to the left neighbour")
    run.kill(c if victim == "retiring tail" else b)
    with pytest.raises(ScalingError, match="aborted"):
        pending.result(60)
    run.finish([gate])
    assert len(run.job.final_status["units"]["j"]["spus"]) == 2, "routes had switched: the unit keeps its new layout"


@pytest.mark.parametrize("victim", ["quiescing neighbour", "held SPU"])
def test_a_worker_killed_while_a_checkpoint_quiesces_the_links_rolls_back_and_every_pair_still_joins_once(
        cluster, tmp_path, started, victim):
    """Step 4, a checkpoint in progress: the middle SPU is held, so its neighbours, which aligned their
    barriers and sent their Marks, wait for its Mark with their blocks paused. Then the head's worker (a
    quiescing neighbour) or the middle SPU's dies."""
    run = ChainRun(cluster, tmp_path, "ck-quiesce", spus=3)
    a, b, c = run.chain()
    assert len({run.pid_of(s) for s in (a, b, c)}) == 3, "one chain SPU per worker"
    run.release(2 * STAGE)
    gate = run.hold(b)
    held_at, stats = len(started), run.job.checkpoints.stats
    # one started after the hold cannot complete while b is held (the coordinator runs one at a time): it is in
    # progress, a and c quiescing once their barriers align
    wait_until(lambda: len(started) > held_at, 20, message="a checkpoint started while the middle SPU is held")
    assert stats.last_epoch is None or stats.last_epoch < started[-1]
    run.kill(a if victim == "quiescing neighbour" else b)
    run.finish([gate])
