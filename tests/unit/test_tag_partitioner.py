"""TagPartitioner: every tuple goes to the least loaded of its key's candidates; heavy keys spread, slow SPUs shunned."""

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from esault.keyhash import key_hash
from esault.routing.tag import TagPartitioner

ops = st.lists(st.one_of(
    st.tuples(st.just("choose"), st.integers(0, 12)),
    st.tuples(st.just("burst"), st.integers(0, 3)),  # 30 tuples of a hot key
    st.tuples(st.just("report"), st.integers(0, 9), st.floats(0.001, 10), st.integers(0, 50)),
    st.just(("window",)),
    st.tuples(st.just("spus"), st.sets(st.integers(0, 9), min_size=1, max_size=6)),
), max_size=60)


def candidates_of(p: TagPartitioner, key) -> list[int]:
    if key in p.heavy:
        return p.heavy[key]
    n = len(p.spus)
    return sorted({p.spus[key_hash(key) % n], *p._two_choices(key, cache=False)})


@settings(max_examples=150, deadline=None)
@given(ops, st.sampled_from(["tag", "pkg"]))
def test_each_tuple_goes_to_the_least_loaded_of_its_candidates_whatever_the_spu_set_does(script, mode):
    p = TagPartitioner([1, 2, 3], mode=mode, epsilon=0.05, seed=7)
    for op in script:
        if op[0] in ("choose", "burst"):
            for _ in range(1 if op[0] == "choose" else 30):
                key = f"k{op[1]}"
                cands = candidates_of(p, key)
                loads = {s: p.load(s) for s in cands}
                chosen = p.choose(key)
                assert chosen in cands, (key, chosen, cands)
                assert loads[chosen] == min(loads.values())
        elif op[0] == "report":
            p.report(op[1], op[2], op[3])
        elif op[0] == "window":
            p.end_window()
        else:
            p.set_spus(op[1])
        p.check_invariants()


def replay(mode: str, seed: int, keys: list[str]) -> list[int]:
    p = TagPartitioner(range(6), mode=mode, epsilon=0.01, seed=seed)
    p.report(0, 5.0, 0)
    out = []
    for i, key in enumerate(keys):
        out.append(p.choose(key))
        if i % 500 == 499:
            p.end_window()
    return out


def zipf_keys(n: int, s: float = 1.2, seed: int = 1) -> list[str]:
    rng = np.random.default_rng(seed)
    return [f"w{k}" for k in rng.zipf(s, n)]


def test_the_same_inputs_and_seed_give_the_same_routing():
    keys = zipf_keys(3000)
    assert replay("tag", 3, keys) == replay("tag", 3, keys)


def test_a_heavy_key_is_cut_over_several_spus_and_a_light_key_stays_on_at_most_two():
    keys = zipf_keys(20000)
    p = TagPartitioner(range(8), epsilon=0.001, seed=1)
    per_key: dict[str, set[int]] = {}
    for i, key in enumerate(keys):
        spu = p.choose(key)
        per_key.setdefault(key, set()).add(spu)
        if i % 2000 == 1999:
            p.end_window()
            for spu_ in p.spus:  # queues drain between windows (what the SPUs' reports say)
                p.report(spu_, None, 0)
    top = Counter(keys).most_common(1)[0][0]
    assert top in p.heavy and len(per_key[top]) >= 4
    rare = [k for k, c in Counter(keys).items() if c < 5 and k not in p.heavy]
    assert rare and all(len(per_key[k]) <= 2 for k in rare)


def test_tag_balances_a_zipf_stream_where_key_grouping_cannot():
    keys = zipf_keys(30000)
    n = 6
    p = TagPartitioner(range(n), epsilon=0.001, seed=2)
    sent = Counter()
    for i, key in enumerate(keys):
        sent[p.choose(key)] += 1
        if i % 3000 == 2999:
            p.end_window()
    hashed = Counter(key_hash(k) % n for k in keys)
    fair = len(keys) / n
    assert max(hashed.values()) > 1.5 * fair  # the hot key alone overloads its SPU under key grouping
    assert max(sent.values()) < 1.05 * fair


def test_heavy_key_segments_rarely_land_on_a_spu_ten_times_slower():
    p = TagPartitioner(range(6), epsilon=0.01, seed=5)
    p.report(0, 10.0, 0)
    for spu in range(1, 6):
        p.report(spu, 1.0, 0)
    p._place_heavy({f"h{i}": 1 for i in range(300)}, 3 * 300)  # 300 heavy keys, 2 segments each
    on = Counter(spu for cands in p.heavy.values() for spu in cands)
    assert on[0] < on[1] / 4 and sum(on.values()) == 600


def test_pkg_ignores_measured_times_and_tag_does_not():
    slow_first = {}
    for mode in ("pkg", "tag"):
        p = TagPartitioner([0, 1], mode=mode)
        p.report(0, 100.0, 0)
        p.report(1, 1.0, 0)
        slow_first[mode] = Counter(p.choose(f"k{i}") for i in range(200))[0]
    assert slow_first["pkg"] == 100 and slow_first["tag"] < 10


def test_a_removed_spu_gets_nothing_and_a_new_one_gets_its_share():
    p = TagPartitioner([1, 2, 3], epsilon=0.01)
    for i in range(1000):
        p.choose(f"k{i % 50}")
    p.end_window()
    p.set_spus([2, 3, 4])
    got = Counter(p.choose(f"k{i % 50}") for i in range(3000))
    assert set(got) == {2, 3, 4} and got[4] > 500


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="mode must be one of"):
        TagPartitioner([1], mode="hash")
    with pytest.raises(ValueError, match="heavy_share must be in"):
        TagPartitioner([1], heavy_share=2)
    with pytest.raises(ValueError, match="at least one SPU"):
        TagPartitioner([])


def test_a_key_turns_heavy_inside_the_window_once_its_share_shows_after_the_warmup():
    p = TagPartitioner(range(8), epsilon=0.01, warmup=100)
    for i in range(98):
        p.choose("hot" if i % 2 else f"c{i}")
    assert "hot" not in p.heavy  # 98 tuples: still warming up
    for i in range(98, 200):
        p.choose("hot" if i % 2 else f"c{i}")
    assert "hot" in p.heavy and len(p.heavy["hot"]) == 8  # half the window: cut over every SPU
    assert set(p.heavy) == {"hot"}


def test_measured_times_are_smoothed_after_the_first_reading_and_new_spus_start_at_the_mean():
    p = TagPartitioner([1, 2])
    p.report(1, 1.0, 0)
    p.report(1, 2.0, 0)
    p.report(2, 3.0, 5)
    assert p.time == {1: pytest.approx(1.3), 2: 3.0} and p.queued[2] == 5
    p.set_spus([1, 2, 3])
    assert p.time[3] == pytest.approx(2.15) and p.queued[3] == 0
