"""PeManager: per-key PEs in generations; idle expiry is never early and at most a quarter late."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from esault.datapath.pe_manager import PeManager
from esault.keyhash import KEY_SPACE_MAX, key_hash
from pe_parts import touched_keys

TIMEOUT = 8.0


class Pe:
    def __init__(self, key):
        self.key = key


def manager(now: float = 0.0, timeout: float | None = TIMEOUT) -> PeManager:
    return PeManager(Pe, per_key=True, idle_timeout=timeout, now=now, track_touched=True)


def use(pes: PeManager, key, now: float):
    """What the SPU's hot path does for one batch of one key."""
    pe = pes.active.get(key) or pes.wake_or_create(key)
    pes.used(now)
    pes.mark(pe)
    return pe


def test_a_key_used_again_keeps_its_pe_across_generations():
    pes = manager()
    first = use(pes, "a", 0.0)
    for t in range(1, 40):  # many rotations, one use per second: never idle for the timeout
        assert pes.idle(float(t)) == []
        assert use(pes, "a", float(t)) is first
    assert len(pes) == 1


def test_an_idle_pe_expires_once_between_the_timeout_and_a_quarter_more():
    pes = manager()
    use(pes, "a", 0.0)
    expired_at = None
    t = 0.0
    while expired_at is None and t < 3 * TIMEOUT:
        t += 0.25
        out = pes.idle(t)
        if out:
            assert [k for k, _ in out] == ["a"]
            expired_at = t
    assert expired_at is not None and TIMEOUT <= expired_at <= 1.25 * TIMEOUT + 0.25
    assert len(pes) == 0 and pes.get("a") is None


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0.0, 3.0), st.sampled_from(["a", "b", "c", "d"]),
                          st.sampled_from(["use", "scan", "checkpoint"])), min_size=1, max_size=80))
def test_expiry_is_never_early_and_late_by_at_most_a_quarter_timeout_and_two_scan_gaps(steps):
    """Random uses, idle scans and checkpoints against a model that knows every key's last use.

    A checkpoint's dirty keys are exactly those used since the previous checkpoint; checkpoints never
    make a PE expire early or later than the bound.

    A generation retires at the first scan a quarter timeout after it began, and expires at the first
    scan a timeout after its last use: so lateness <= timeout / 4 + 2 x the longest gap between scans.
    """
    pes = manager()
    now = last_scan = gap = 0.0
    last_use: dict[str, float] = {}
    dirty: set[str] = set()

    def scan() -> None:
        nonlocal last_scan, gap
        gap = max(gap, now - last_scan)
        last_scan = now
        for k, _ in pes.idle(now):
            dirty.discard(k)  # expired: its state is parked, so a checkpoint does not take it from the PE
            idle = now - last_use.pop(k)
            assert idle >= TIMEOUT, f"{k} expired {idle:.2f}s after its last use"
            assert idle <= 1.25 * TIMEOUT + 2 * gap, f"{k} expired {idle:.2f}s after its last use (gap {gap})"

    for dt, key, action in steps:
        now += dt
        if action == "scan":
            scan()
        elif action == "checkpoint":
            taken = touched_keys(pes)
            assert taken == dirty
            assert all(pes.get(k) is not None for k in taken), "each key still has its PE"
            dirty = set()
        else:
            use(pes, key, now)
            last_use[key] = now
            dirty.add(key)
    end = now + 3 * TIMEOUT
    while now < end:
        now += 0.5
        scan()
    assert not last_use and len(pes) == 0


def test_keys_that_moved_away_are_not_dirty_here_any_more():
    from esault.keyhash import key_hash

    pes = manager()
    for key in ("x", "y"):
        use(pes, key, 0.0)
    pes.idle(TIMEOUT / 4)  # the generation retires: x and y are in an older generation, still dirty
    moved = pes.take_range(key_hash("x"), key_hash("x"))
    assert [k for k, _ in moved] == ["x"]
    assert touched_keys(pes) == {"y"}, "the receiver checkpoints x now; two SPUs writing it would race"


@settings(max_examples=300, deadline=None)
@given(keys=st.sets(st.one_of(st.text(max_size=6), st.integers(-10**9, 10**9)), max_size=60),
       picks=st.lists(st.integers(0, 59), min_size=2, max_size=2),
       widen=st.tuples(st.integers(-3, 3), st.integers(-3, 3)),
       whole=st.booleans())
def test_take_range_moves_exactly_the_keys_hashing_into_the_range(keys, picks, widen, whole):
    """Bucket shortcut or not, a range takes every key whose hash lies in [lo, hi] and nothing else: ranges
    with ends at, next to and between the keys' own hashes (so bucket edges cut through them), and the whole
    space, over PEs in several generations."""
    keys = sorted(keys, key=repr)
    pes = manager()
    for i, key in enumerate(keys):
        use(pes, key, float(i % 3) * 3)
        pes.idle(float(i % 3) * 3)  # spread over generations
    hashes = sorted(key_hash(k) for k in keys) or [0]
    lo, hi = sorted(hashes[p % len(hashes)] for p in picks)
    lo, hi = (0, KEY_SPACE_MAX) if whole else (max(0, lo + widen[0]), min(KEY_SPACE_MAX, hi + widen[1]))
    if lo > hi:
        lo, hi = hi, lo
    taken = {k for k, _ in pes.take_range(lo, hi)}
    assert taken == {k for k in keys if lo <= key_hash(k) <= hi}
    assert {k for k, _ in pes.items()} == set(keys) - taken


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(
    st.tuples(st.just("use"), st.sampled_from(["a", "b", "c", "d", "e", 1, 2, 3])),
    st.tuples(st.just("wait"), st.floats(0.5, 6.0)),
    st.tuples(st.just("move"), st.integers(0, KEY_SPACE_MAX), st.integers(0, KEY_SPACE_MAX))), max_size=60))
def test_a_move_takes_every_pe_in_its_range_whatever_expired_and_came_back_before(steps):
    """Uses, idle expiry (keys made again after they expired) and moves in any order: a move takes exactly
    the keys with a PE here that hash into its range, each PE once, and the table keeps the rest."""
    pes = manager()
    now = 0.0
    here: set = set()  # the model: keys with a PE
    for step in steps:
        if step[0] == "use":
            use(pes, step[1], now)
            here.add(step[1])
        elif step[0] == "wait":
            now += step[1]
            here -= {k for k, _ in pes.idle(now)}
        else:
            lo, hi = sorted(step[1:])
            taken = [k for k, _ in pes.take_range(lo, hi)]
            assert len(taken) == len(set(taken))
            assert set(taken) == {k for k in here if lo <= key_hash(k) <= hi}
            here -= set(taken)
        assert {k for k, _ in pes.items()} == here
        pes.check_invariants()
    assert {k for k, _ in pes.take_range(0, KEY_SPACE_MAX)} == here and len(pes) == 0


def test_take_range_finds_pes_in_every_generation():
    from esault.keyhash import key_hash

    pes = manager()
    for i, key in enumerate(["x", "y", "z"]):
        use(pes, key, float(i * 3))
        pes.idle(float(i * 3))  # rotates: the keys end up in different generations
    lo = min(key_hash(k) for k in "xyz")
    hi = max(key_hash(k) for k in "xyz")
    assert sorted(k for k, _ in pes.take_range(lo, hi)) == ["x", "y", "z"] and len(pes) == 0


def test_without_a_timeout_nothing_ever_expires():
    pes = manager(timeout=None)
    use(pes, "a", 0.0)
    assert pes.idle(1e9) == [] and len(pes) == 1



def test_taking_the_touched_keys_expires_nothing_and_a_key_used_again_is_touched_again():
    pes = PeManager(Pe, per_key=True, idle_timeout=60.0, track_touched=True)
    for key in ("a", "b"):
        pes.create(key)
    assert touched_keys(pes) == {"a", "b"}
    assert touched_keys(pes) == set()
    pes.mark(pes.get("a"))  # a tick changed it
    pes.create("c")
    assert touched_keys(pes) == {"a", "c"}
    assert len(pes) == 3 and pes.get("b") is not None, "taking the touched keys expires nothing"


def test_without_checkpoints_nothing_is_tracked():
    pes = PeManager(Pe, per_key=True, idle_timeout=60.0)
    pe = pes.create("a")
    pes.mark(pe)
    assert pes.period is None and touched_keys(pes) == set()


# --- touched mode (exactly_once): the batch's keys are marked, a checkpoint does not rotate `active` -----

def touched_manager(timeout: float | None = TIMEOUT) -> PeManager:
    return PeManager(Pe, per_key=True, idle_timeout=timeout, now=0.0, track_touched=True)


def run_batch(pes: PeManager, keys: list, now: float) -> None:
    """What KeyedProcessing does for one batch."""
    for key in keys:
        pe = pes.active.get(key)
        if pe is None:
            pe = pes.wake_or_create(key)
        pes.mark(pe)
    pes.used(now)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(
    st.tuples(st.just("batch"), st.lists(st.sampled_from("abcdefgh"), min_size=1, max_size=6)),
    st.tuples(st.just("tick"), st.sampled_from("abcdefgh")),
    st.tuples(st.just("move"), st.sampled_from("abcdefgh")),
    st.tuples(st.just("wait"), st.floats(min_value=0.1, max_value=4.0)),
    st.tuples(st.just("checkpoint"), st.none()),
), max_size=60))
def test_in_touched_mode_a_checkpoint_takes_exactly_the_keys_that_ran_and_are_still_here(steps):
    from esault.keyhash import key_hash

    pes, now, model = touched_manager(), 0.0, set()
    for kind, arg in steps:
        if kind == "batch":
            run_batch(pes, arg, now)
            model.update(arg)
        elif kind == "tick" and pes.get(arg) is not None:  # PeTicks.pe_of on a key that asked for ticks
            pe = pes.active.get(arg)
            if pe is None:
                pes.wake_or_create(arg)
            else:
                pes.mark(pe)
            model.add(arg)
        elif kind == "move":
            moved = pes.take_range(key_hash(arg), key_hash(arg))
            model.difference_update(k for k, _ in moved)
        elif kind == "wait":
            now += arg
            model.difference_update(k for k, _ in pes.idle(now))  # expired: parked, not taken from the PE
        elif kind == "checkpoint":
            dirty = touched_keys(pes)
            assert dirty == model
            assert all(pes.get(k) is not None for k in dirty)
            model = set()
    assert touched_keys(pes) == model


def test_in_touched_mode_no_key_misses_active_after_a_checkpoint():
    pes = touched_manager(timeout=None)
    run_batch(pes, ["a", "b"], 0.0)
    assert touched_keys(pes) == {"a", "b"}
    assert set(pes.active) == {"a", "b"}, "a rotation would have emptied active: every key would miss once"
    run_batch(pes, ["a"], 1.0)
    assert touched_keys(pes) == {"a"}


def test_a_pe_made_again_after_it_expired_is_marked_again_in_the_same_period():
    """The stamp is on the PE: a new PE of a key already listed this period is listed again, and the key is
    taken once, from the PE that is here now."""
    pes = touched_manager()
    run_batch(pes, ["a"], 0.0)
    expired = pes.idle(2 * TIMEOUT)
    assert [k for k, _ in expired] == ["a"]
    assert touched_keys(pes) == set(), "an expired key's state is parked, not taken from its PE"
    run_batch(pes, ["a"], 3 * TIMEOUT)
    first = pes.get("a")
    pes.idle(5 * TIMEOUT)
    run_batch(pes, ["a"], 6 * TIMEOUT)  # made again in the same period: a fresh PE, unstamped
    assert pes.get("a") is not first
    assert touched_keys(pes) == {"a"}
    assert touched_keys(pes) == set()


def test_without_tracking_nothing_is_listed_and_no_pe_is_stamped():
    pes = PeManager(Pe, per_key=True, idle_timeout=None, track_touched=False)
    pe = pes.create("a")
    pes.mark(pe)
    assert pes.period is None and pes.marked == [] and pe._esault_mark is None


# --- keys that arrived in a hand-off: their PEs made on first use or by settle() -----------------------

def arriving_manager() -> tuple[PeManager, list]:
    """A manager whose install() makes the PE and records (key, state) in the list it returns."""
    pes = manager(timeout=None)
    installed: list = []

    def install(key, state):
        pe = pes.create(key)
        pe.state = state
        installed.append((key, state))
        return pe
    pes.install = install
    return pes, installed


def test_an_arrived_key_gets_its_pe_with_its_state_on_first_use_once():
    pes, installed = arriving_manager()
    pes.arrived.update({"a": b"A", "b": b"B"})
    assert len(pes) == 2, "arrived keys count as PEs"
    pe = use(pes, "a", 1.0)
    assert pe.state == b"A" and installed == [("a", b"A")]
    assert use(pes, "a", 2.0) is pe and installed == [("a", b"A")]
    assert list(pes.arrived) == ["b"]


def test_walking_the_pes_or_a_checkpoint_makes_every_arrived_pe_first():
    for walk in (lambda p: dict(p.items()), touched_keys):
        pes, installed = arriving_manager()
        pes.arrived.update({k: k.encode() for k in "abc"})
        got = walk(pes)
        assert sorted(installed) == [("a", b"a"), ("b", b"b"), ("c", b"c")] and not pes.arrived
        assert set(got) == {"a", "b", "c"}, "made now, so dirty: in the checkpoint"


@settings(max_examples=200)
@given(keys=st.sets(st.integers(0, 10**6), max_size=30), steps=st.lists(
    st.one_of(st.tuples(st.just("use"), st.integers(0, 10**6)), st.tuples(st.just("settle"), st.integers(0, 5)),
              st.tuples(st.just("move"), st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1))), max_size=30))
def test_an_arrived_state_is_in_exactly_one_place_and_never_restored_twice(keys, steps):
    """Whatever uses, slices of settle() and moves on (take_arrived/take_range) interleave, each arrived key's
    state ends in one PE made once, or moved on as it came."""
    pes, installed = arriving_manager()
    pes.arrived.update({k: str(k).encode() for k in keys})
    moved_on: dict = {}
    for step in steps:
        if step[0] == "use" and step[1] in keys and step[1] not in moved_on:  # a moved key routes elsewhere
            use(pes, step[1], 1.0)
        elif step[0] == "settle":
            pes.settle(step[1])
        elif step[0] == "move":
            lo, hi = sorted(step[1:])
            moved_on.update(pes.take_arrived(lo, hi))
            for key, pe in pes.take_range(lo, hi):
                moved_on[key] = pe.state
    made = [k for k, _ in installed]
    assert len(made) == len(set(made)), "no state restored twice"
    assert not set(moved_on) & set(pes.arrived)
    here = {key: pe.state for key, pe in pes.items()}  # settles what is left
    assert not set(here) & set(moved_on)
    assert {**here, **moved_on} == {k: str(k).encode() for k in keys}
