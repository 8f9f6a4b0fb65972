"""Windowed topologies on real actors: windows fire on the SPU's watermark, state moves with keys."""

from __future__ import annotations

import random
import threading
from collections import defaultdict

from esault import TopologyBuilder
from esault.testing import CollectorBolt, collected, wait_until
from esault.windows import Sliding, Tumbling, is_late
from topology_parts import GATES, GatedListSpout, ResumableTumblingSums, SlidingKeyWindowSums, TumblingSums


def bounded_items(keys: int, n: int, bound: int, seed: int) -> list[tuple[str, list[int]]]:
    """n tuples [ts, value] over `keys` keys; ts grows with position and is out of order by at most `bound`."""
    rnd = random.Random(seed)
    stamped = [(i // 4 + rnd.randint(0, bound), f"k{rnd.randrange(keys)}", rnd.randint(1, 9)) for i in range(n)]
    stamped.sort(key=lambda e: e[0])  # arrival order; a tuple's ts lags the max before it by <= bound
    return [(key, [arrival - rnd.randint(0, bound) if arrival >= bound else arrival, value])
            for arrival, key, value in stamped]


def oracle(items, assigner) -> dict[tuple[str, int], int]:
    sums: dict[tuple[str, int], int] = defaultdict(int)
    for key, (ts, value) in items:
        for start in assigner.starts(ts):
            sums[(key, start)] += value
    return dict(sums)


def build(name: str, items, bolt: type, hold_at: int, parallelism: int = 2):
    GATES[name] = threading.Event()
    b = TopologyBuilder(name)
    b.set_spout("src", GatedListSpout, params={"items": items, "gate": name, "hold_at": hold_at})
    b.set_bolt("win", bolt, parallelism, pe_idle_timeout=None).key_grouping("src")
    b.set_bolt("out", CollectorBolt, params={"name": name}).global_grouping("win")
    return b.build()


def test_tumbling_windows_stay_exact_across_a_split_and_a_merge_mid_stream(cluster, config):
    items = bounded_items(keys=40, n=4000, bound=5, seed=3)
    job = cluster.submit(build("wsm", items, TumblingSums, hold_at=len(items) // 3), config)
    wait_until(lambda: job.status()["units"]["win"]["processed"] >= len(items) // 3, 30, message="first third in")
    first = job.split("win", job.spus("win")[0])
    assert first.moved_keys > 0
    GATES["wsm"].set()
    job.merge("win", first.giver)
    assert job.wait(60), job.status()
    job.stop()  # flush_on_close fires the windows the watermark has not reached
    out = collected("wsm")
    assert not [v for _, v in out if is_late(v)], "a tuple within the bound went to the side output"
    got = {(key, v["start"]): v["result"] for key, v in out}
    assert len(got) == len(out), "a window fired twice"
    assert got == oracle(items, Tumbling(10))


def test_a_quiet_keys_window_fires_when_other_keys_move_the_watermark(cluster, config):
    items = [("quiet", [1, 7])] + [("busy", [ts, 1]) for ts in range(2, 40)]
    job = cluster.submit(build("wq", items, TumblingSums, hold_at=len(items), parallelism=1), config)
    result = wait_until(lambda: [v for k, v in collected("wq") if k == "quiet"], 10,
                        message="the quiet key's window [0, 10) fired")
    assert result == [{"start": 0, "end": 10, "result": 7, "update": False}]
    assert job.wait(30)


def test_key_windows_in_a_topology_give_every_sliding_window_of_every_key(cluster, config):
    items = bounded_items(keys=30, n=1500, bound=5, seed=4)
    job = cluster.submit(build("wkw", items, SlidingKeyWindowSums, hold_at=len(items) // 2), config)
    wait_until(lambda: job.status()["units"]["win"]["processed"] >= len(items) // 2, 30, message="half in")
    assert job.split("win", job.spus("win")[0]).moved_keys > 0
    GATES["wkw"].set()
    assert job.wait(60), job.status()
    job.stop()
    per_key: dict[str, list] = defaultdict(list)
    for key, v in collected("wkw"):
        assert not is_late(v)
        per_key[key].append(v)
    expected = oracle(items, Sliding(20, 5))
    for key, outs in per_key.items():
        starts = [o["start"] for o in outs]
        assert starts == sorted(set(starts)), f"key {key}: key windows out of order or repeated"
        assert outs[-1]["empty"]
        latest = None
        for start in range(-20, max(s for (k, s) in expected if k == key) + 25, 5):
            while outs and outs[0]["start"] <= start:
                latest = outs.pop(0)
            want = expected.get((key, start))
            have = None if latest is None or latest["empty"] else latest["result"]
            assert have == want, f"key {key} window {start}: key windows give {have}, sliding windows {want}"
    assert set(per_key) == {k for k, _ in items}


def test_window_state_survives_a_stop_and_a_restart_from_the_final_checkpoint(cluster, config):
    items = bounded_items(keys=20, n=2000, bound=5, seed=6)
    config = config.replace(checkpoint_interval=0.2)
    job = cluster.submit(build("wres", items, ResumableTumblingSums, hold_at=len(items) // 2), config)
    wait_until(lambda: job.status()["units"]["win"]["processed"] >= len(items) // 2, 30, message="first half in")
    job.stop()  # the final checkpoint holds the half-filled windows
    topology = build("wres", items, ResumableTumblingSums, hold_at=len(items) // 2)
    GATES["wres"].set()
    job = cluster.submit(topology, config)
    assert job.restored_from is not None
    horizon = max(ts for _, (ts, _) in items) - 30
    expected = {w: s for w, s in oracle(items, Tumbling(10)).items() if w[1] + 10 <= horizon}
    fired = lambda: {(k, v["start"]) for k, v in collected("wres")}  # noqa: E731
    wait_until(lambda: expected.keys() <= fired(), 30, message="every window below the horizon fired")
    job.stop()
    for key, v in collected("wres"):
        assert not is_late(v)
        want = oracle(items, Tumbling(10))[(key, v["start"])]
        # A window that fired after the final checkpoint fires again after the restart (a transactional sink
        # keeps one): never with another result.
        assert v["result"] == want, f"key {key} window {v['start']}: {v['result']} != {want}"


def test_a_pe_with_pending_windows_outlives_the_idle_timeout_that_parks_a_pe_without(cluster, config):
    items = [("quiet", [1, 7]), ("done", [-100, 1])] + [("busy", [ts, 1]) for ts in range(2, 40)]
    GATES["wpark"] = threading.Event()
    b = TopologyBuilder("wpark")
    b.set_spout("src", GatedListSpout, params={"items": items, "gate": "wpark", "hold_at": 2})
    b.set_bolt("win", TumblingSums, 1, pe_idle_timeout=0.2).key_grouping("src")
    b.set_bolt("out", CollectorBolt, params={"name": "wpark"}).global_grouping("win")
    job = cluster.submit(b.build(), config)
    wait_until(lambda: [v for k, v in collected("wpark") if k == "done"], 10, message="done's window fired")
    wait_until(lambda: job.status()["units"]["win"]["pes"] == 1, 10, message="the key without windows parked")
    GATES["wpark"].set()
    fired = wait_until(lambda: [v for k, v in collected("wpark") if k == "quiet"], 10, message="quiet fired")
    assert fired == [{"start": 0, "end": 10, "result": 7, "update": False}]
    assert job.wait(30)
