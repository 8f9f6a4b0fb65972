"""Attacks of issue #9 from a separate process on loopback, against a running 2-worker cluster.

The attacker (tests/system/attacker.py) sends well-formed frames: code to run
(a unit naming os.system), Shutdown to a worker, forged tuples to SPUs, a
WorkerHello, a heartbeat and a status request. Without keys, with a key
nobody admitted, and with an admitted worker key that claims another's name,
each must get nothing and change nothing: the job's result stays exact.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import zmq

from esault import LocalCluster, TopologyBuilder
from esault.metrics.registry import REGISTRY
from esault.testing import WaitTimeout, collected, reset_collected, wait_until
from esault.transport.keys import KeyPair
from esault.transport.trust import Role

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "integration"))
from test_split_merge import assert_exact, sequenced_items  # noqa: E402
from topology_parts import GATES, DriverCollectorBolt, GatedListSpout, SequenceCheckBolt  # noqa: E402

pytestmark = pytest.mark.system
ATTACKER = Path(__file__).with_name("attacker.py")
FORGED = "FORGED-KEY"


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster(workers=2) as c:
        yield c


def rejected(reason: str) -> float:
    return REGISTRY.get_sample_value("esault_auth_rejected_total", {"reason": reason}) or 0.0


def attack(plan: dict) -> dict:
    result = subprocess.run([sys.executable, str(ATTACKER), json.dumps(plan)], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def targets(cluster: LocalCluster) -> list[dict]:
    keys = cluster.postman.keys
    found = [{"kind": "driver", "address": cluster.postman.address, "key": keys.own.public.decode()}]
    for name, address in cluster.registry.workers.items():
        found.append({"kind": "worker", "address": address, "key": keys.key_of(name).decode()})
    return found


@pytest.mark.parametrize("auth,name", [("none", "w1"), ("wrong", "w1"), ("admitted", "w1")])
def test_an_attack_gets_nothing_and_leaves_the_job_exact(cluster, config, tmp_path, auth, name):
    """`admitted`: a listed worker key that never joined claims the running worker w1's name."""
    reset_collected()
    keys, per_key = 60, 20
    items = sequenced_items(keys, per_key, seed=5)
    gate = f"sec-{auth}"
    GATES[gate] = threading.Event()
    builder = TopologyBuilder(gate)
    builder.set_spout("src", GatedListSpout, params={"items": items, "gate": gate, "hold_at": len(items) // 2})
    builder.set_bolt("check", SequenceCheckBolt, 2, pe_idle_timeout=None).key_grouping("src")
    builder.set_bolt("out", DriverCollectorBolt, params={"name": gate}).global_grouping("check")
    job = cluster.submit(builder.build(), config)
    try:
        wait_until(lambda: len(collected(gate)) >= len(items) // 4, 30, message="a quarter collected")
        pair = KeyPair.generate()
        if auth == "admitted":
            cluster.postman.keys.admit(pair.public, Role.WORKER)
        canary = tmp_path / "pwned"
        before = {r: rejected(r) for r in ("no_curve", "unknown_key", "handshake", "not_permitted")}
        refused_before = cluster.postman.refused.get("not_permitted", 0)
        outcome = attack({"auth": auth, "public": pair.public.decode(), "secret": pair.secret.decode(),
                          "targets": targets(cluster), "name": name, "canary": str(canary),
                          "spus": job.spus("check"), "source": "src", "forged_key": FORGED, "topology": gate})
        assert outcome["sent"] >= 12 and outcome["replies"] == 0, outcome
        # The driver saw and counted the attempt: a failed handshake, or refused messages.
        if auth in ("none", "wrong"):  # a failed handshake: libzmq reports it as protocol, auth or no detail
            def failed_handshakes() -> float:
                return sum(rejected(r) for r in ("no_curve", "unknown_key", "handshake"))
            wait_until(lambda: failed_handshakes() > sum(before.values()) - before["not_permitted"], 10,
                       message="the failed handshake counted")
        else:
            wait_until(lambda: cluster.postman.refused.get("not_permitted", 0) >= refused_before + 3, 10,
                       message="the admitted key's messages refused")
            assert rejected("not_permitted") > before["not_permitted"]
        GATES[gate].set()
        assert job.wait(60), job.status()
        job.stop()
        assert_exact(gate, keys, per_key)
        assert all(key != FORGED for key, _ in collected(gate)), "a forged tuple reached the job"
        assert not canary.exists(), "a frame made a worker run a command"
        assert all(p.poll() is None for p in cluster.pool.processes), "a frame shut a worker down"
        assert set(cluster.registry.workers) == {"w1", "w2"}, cluster.registry.workers
        assert cluster.postman.keys.key_of("w1") != pair.public, "w1's name moved to the attacker's key"
    finally:
        GATES[gate].set()
        job.stop()
        if auth == "admitted":
            cluster.postman.keys.revoke(pair.public)


def _rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS in /proc/self/status")


def test_a_flood_of_frames_to_unknown_actors_keeps_the_driver_flat(tmp_path):
    """10,000 valid-looking 1 KiB frames for actors that do not exist, from an admitted peer:
    held up to the cap, then dropped and counted; the driver's RSS stays within 20 MiB."""
    with LocalCluster(listen="127.0.0.1:0") as cluster:
        pair = KeyPair.generate()
        cluster.postman.keys.admit(pair.public, Role.WORKER)
        postman = cluster.postman

        def flood(n: int, name: str) -> None:
            outcome = attack({"auth": "admitted", "public": pair.public.decode(), "secret": pair.secret.decode(),
                              "targets": [t for t in targets(cluster) if t["kind"] == "driver"], "name": name,
                              "canary": str(tmp_path / "c"), "spus": [], "source": "x", "forged_key": "k",
                              "topology": "t", "flood": n, "flood_bytes": 1024, "listen_ms": 1,
                              "linger_ms": 60_000})
            assert outcome["sent"] >= n

        def seen() -> int:
            return postman.held_messages + postman.refused.get("held_full", 0)

        flood(1000, "flooder")  # warm-up: the allocator and the cap reach their steady state
        wait_until(lambda: seen() >= 1000, 30, message="the warm-up frames handled")
        baseline = _rss_kib()
        flood(10_000, "flooder")
        try:
            wait_until(lambda: seen() >= 11_000, 60, message="10,000 frames handled")
        except WaitTimeout:
            raise AssertionError(f"{seen()} of 11,000 frames handled (held or counted as dropped); refused: "
                                 f"{postman.refused}") from None
        grown = (_rss_kib() - baseline) / 1024
        assert postman.held_bytes <= 4 * 2**20
        assert postman.refused.get("held_full", 0) >= 5_000, postman.refused
        assert grown < 20, f"RSS grew {grown:.1f} MiB under the flood"


def test_a_unit_that_names_a_function_instead_of_a_class_is_refused_without_calling_it(tmp_path):
    from esault.cluster.unit_wire import unit_from_wire
    from esault.errors import TopologyError

    canary = tmp_path / "pwned"
    data = {"name": "pwn", "module": "os", "qualname": "system", "folder": "", "main_file": "", "parallelism": 1,
            "is_spout": False, "params": {"command": f"touch {canary}"}, "inputs": [], "pe_idle_timeout": 1.0,
            "max_pending": 1, "elasticity": {}, "chain": False, "stages": [], "placement": "worker"}
    with pytest.raises(TopologyError, match=r"not a subclass of esault\.Bolt"):
        unit_from_wire(data)
    assert not canary.exists()
