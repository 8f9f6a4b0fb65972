"""IntervalTable: the SPU routing table over key hashes, checked against a naive model."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from esault.errors import RoutingError
from esault.keyhash import KEY_SPACE_MAX, key_hash
from esault.routing import IntervalTable

MAX = KEY_SPACE_MAX


# --------------------------------------------------------------------- model
def model_lookup(model: list[tuple[int, int, int]], h: int) -> int:
    """Brute force: scan every interval."""
    owners = [spu for start, end, spu in model if start <= h <= end]
    assert len(owners) == 1, f"model broken at {h}: {owners}"
    return owners[0]


def probe_hashes(*models: list[tuple[int, int, int]]) -> set[int]:
    """Every boundary of every interval, and its neighbours: where bugs live."""
    hs = {0, 1, MAX - 1, MAX, MAX // 2}
    for model in models:
        for start, end, _ in model:
            hs.update((start - 1, start, start + 1, end - 1, end, end + 1))
    return {h for h in hs if 0 <= h <= MAX}


def normalise(model: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """Join adjacent intervals of one SPU: the table never keeps them apart."""
    out: list[tuple[int, int, int]] = []
    for start, end, spu in sorted(model):
        if out and out[-1][2] == spu and out[-1][1] + 1 == start:
            out[-1] = (out[-1][0], end, spu)
        else:
            out.append((start, end, spu))
    return out


def owned_by(model: list[tuple[int, int, int]], spu: int) -> list[tuple[int, int]]:
    return [(start, end) for start, end, s in model if s == spu]


class IntervalTableMachine(RuleBasedStateMachine):
    """Random split/merge/assign/lookup sequences against a list of (start, end, spu)."""

    def __init__(self) -> None:
        super().__init__()
        self.table = IntervalTable(0)
        self.model: list[tuple[int, int, int]] = [(0, MAX, 0)]
        self.version = 0
        self.next_spu = 1

    def _spu(self, data: st.DataObject) -> int:
        return data.draw(st.sampled_from(sorted({spu for _, _, spu in self.model})), label="spu")

    @rule(data=st.data())
    def split(self, data: st.DataObject) -> None:
        spu = self._spu(data)
        owned = owned_by(self.model, spu)
        first, last = owned[0][0], owned[-1][1]
        total = sum(end - start + 1 for start, end in owned)
        new = self.next_spu
        if total == 1:
            with pytest.raises(RoutingError, match="holds a single hash"):
                self.table.split(spu, new)
            return
        at = data.draw(st.one_of(st.none(), st.sampled_from([first + 1, last]), st.integers(first + 1, last)),
                       label="at")
        before = self.table.copy()
        moved = self.table.split(spu, new, at)
        self.next_spu += 1
        if at is None:  # half of spu's hashes stay below the split point
            below, p = total // 2, None
            for start, end in owned:
                if below < end - start + 1:
                    p = start + below
                    break
                below -= end - start + 1
        else:
            p = at
        assert moved == (p, last)
        pieces = []
        for start, end, s in self.model:
            if s != spu or end < p:
                pieces.append((start, end, s))
            elif start >= p:
                pieces.append((start, end, new))
            else:
                pieces += [(start, p - 1, s), (p, end, new)]
        self.model = normalise(pieces)
        self.version += 1
        # Exactly spu's hashes >= p change owner.
        for h in probe_hashes(self.model, before.intervals()) | {p - 1, p}:
            old = before.lookup(h)
            assert self.table.lookup(h) == (new if old == spu and h >= p else old), (h, p)

    @rule(data=st.data())
    def split_at_a_bad_point_is_refused(self, data: st.DataObject) -> None:
        spu = self._spu(data)
        owned = owned_by(self.model, spu)
        first, last = owned[0][0], owned[-1][1]
        at = data.draw(st.one_of(st.integers(-5, first), st.integers(last + 1, last + 5)), label="bad at")
        with pytest.raises(RoutingError, match=f"cannot split SPU {spu}|holds a single hash"):
            self.table.split(spu, self.next_spu, at)

    @rule(data=st.data())
    def split_onto_an_existing_spu_is_refused(self, data: st.DataObject) -> None:
        spu, other = self._spu(data), self._spu(data)
        with pytest.raises(RoutingError, match=f"SPU {other} already owns"):
            self.table.split(spu, other)

    @rule(data=st.data())
    def merge(self, data: st.DataObject) -> None:
        spu = self._spu(data)
        spus = sorted({s for _, _, s in self.model})
        if len(spus) == 1:
            with pytest.raises(RoutingError, match="it is the last SPU"):
                self.table.merge(spu)
            return
        owned = owned_by(self.model, spu)
        into = data.draw(st.sampled_from([None] + [s for s in spus if s != spu]), label="into")
        first = owned[0][0]
        default = model_lookup(self.model, first - 1) if first > 0 else model_lookup(self.model, owned[0][1] + 1)
        receiver = default if into is None else into
        before = self.table.copy()
        assert self.table.merge(spu, into) == (first, owned[-1][1], receiver)
        self.model = normalise([(start, end, receiver if s == spu else s) for start, end, s in self.model])
        self.version += 1
        # Exactly spu's hashes change owner, and they go to the receiver.
        for h in probe_hashes(self.model, before.intervals()):
            old = before.lookup(h)
            assert self.table.lookup(h) == (receiver if old == spu else old), h
        assert spu not in self.table

    @rule(data=st.data())
    def merge_into_itself_or_an_unknown_spu_is_refused(self, data: st.DataObject) -> None:
        spu = self._spu(data)
        if len({s for _, _, s in self.model}) == 1:
            return
        into = data.draw(st.sampled_from([spu, self.next_spu + 7]), label="into")
        with pytest.raises(RoutingError, match="cannot merge into itself|is not in the table"):
            self.table.merge(spu, into)

    @rule(data=st.data())
    def assign(self, data: st.DataObject) -> None:
        cuts = sorted(set(data.draw(st.lists(st.integers(1, MAX), max_size=5), label="cuts")))
        bounds = [0] + cuts + [MAX + 1]
        spus = sorted({s for _, _, s in self.model}) + [self.next_spu, self.next_spu + 1]
        owners = data.draw(st.lists(st.sampled_from(spus), min_size=len(bounds) - 1, max_size=len(bounds) - 1),
                           label="owners")
        assignment: dict[int, list[tuple[int, int]]] = {}
        pieces = []
        for (lo, nxt), spu in zip(zip(bounds, bounds[1:]), owners):
            assignment.setdefault(spu, []).append((lo, nxt - 1))
            pieces.append((lo, nxt - 1, spu))
        self.table = self.table.assign(assignment)
        self.next_spu += 2
        self.model = normalise(pieces)
        self.version += 1

    @rule(data=st.data())
    def an_assignment_with_a_gap_or_an_overlap_is_refused(self, data: st.DataObject) -> None:
        cut = data.draw(st.integers(1, MAX - 1), label="cut")
        with pytest.raises(RoutingError, match=f"hashes \\[{cut}, {cut}\\] are assigned to no SPU"):
            self.table.assign({1: [(0, cut - 1)], 2: [(cut + 1, MAX)]})
        with pytest.raises(RoutingError, match=f"hashes \\[{cut}, {cut}\\] are assigned twice"):
            self.table.assign({1: [(0, cut)], 2: [(cut, MAX)]})

    @rule(h=st.one_of(st.integers(0, MAX), st.sampled_from([0, 1, MAX // 2, MAX // 2 + 1, MAX])))
    def lookup(self, h: int) -> None:
        assert self.table.lookup(h) == model_lookup(self.model, h)

    @rule(data=st.data())
    def lookup_at_boundaries(self, data: st.DataObject) -> None:
        start, end, spu = self.model[data.draw(st.integers(0, len(self.model) - 1), label="interval index")]
        for h in (start, end):
            assert self.table.lookup(h) == spu
            assert self.table.owns(spu, h)
        if start > 0:
            assert not self.table.owns(spu, start - 1)
        if end < MAX:
            assert not self.table.owns(spu, end + 1)

    @rule()
    def wire_round_trip(self) -> None:
        wire = msgpack.unpackb(msgpack.packb(self.table.to_wire()))
        assert IntervalTable.from_wire(wire) == self.table

    @invariant()
    def matches_the_model(self) -> None:
        self.table.check_invariants()
        # The model itself covers [0, MAX] with no gap or overlap, and never keeps one SPU's neighbours apart.
        assert self.model[0][0] == 0 and self.model[-1][1] == MAX
        for (_, end, a), (start, _, b) in zip(self.model, self.model[1:]):
            assert start == end + 1 and a != b
        assert self.table.intervals() == self.model
        assert self.table.spus() == [spu for _, _, spu in self.model]
        assert len(self.table) == len(self.model)
        assert self.table.version == self.version
        assignment = self.table.assignment()
        for spu in {s for _, _, s in self.model}:
            owned = owned_by(self.model, spu)
            assert self.table.intervals_of(spu) == owned == assignment[spu]
            if len(owned) == 1:
                assert self.table.interval_of(spu) == owned[0]
            else:
                with pytest.raises(RoutingError, match=f"owns {len(owned)} intervals"):
                    self.table.interval_of(spu)


IntervalTableMachine.TestCase.settings = settings(
    max_examples=60,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestIntervalTableAgainstModel = IntervalTableMachine.TestCase


# ------------------------------------------------------------ paper example
def test_paper_example_splits_at_half_then_at_a_quarter() -> None:
    table = IntervalTable(0)
    assert table.intervals() == [(0, MAX, 0)]
    assert table.split(0, 1, MAX // 2 + 1) == (MAX // 2 + 1, MAX)
    assert table.intervals() == [(0, MAX // 2, 0), (MAX // 2 + 1, MAX, 1)]
    assert table.split(0, 2, MAX // 4 + 1) == (MAX // 4 + 1, MAX // 2)
    assert table.intervals() == [(0, MAX // 4, 0), (MAX // 4 + 1, MAX // 2, 2), (MAX // 2 + 1, MAX, 1)]
    assert table.version == 2
    assert table.lookup(MAX // 4) == 0
    assert table.lookup(MAX // 4 + 1) == 2
    assert table.lookup(MAX // 2) == 2
    assert table.lookup(MAX // 2 + 1) == 1
    assert table.lookup(MAX) == 1
    table.check_invariants()


def test_default_split_point_is_the_midpoint_of_the_interval() -> None:
    table = IntervalTable(7)
    assert table.split(7, 8) == (2**30, MAX)
    assert table.split(7, 9) == (2**29, 2**30 - 1)
    table = IntervalTable.from_intervals([(0, 1), (10, 2), (12, 3)])
    assert table.split(2, 4) == (11, 11)  # [10, 11]: two hashes split into one each
    assert table.intervals() == [(0, 9, 1), (10, 10, 2), (11, 11, 4), (12, MAX, 3)]


def test_lookup_key_routes_by_the_stable_key_hash() -> None:
    table = IntervalTable(0)
    table.split(0, 1)
    for key in ["apple", b"pear", 42, ("a", 1)]:
        h = key_hash(key)
        assert table.lookup_key(key) == (1 if h >= 2**30 else 0)


# ------------------------------------------------------------------- merge
def test_merge_defaults_to_the_left_neighbour() -> None:
    table = IntervalTable.from_intervals([(0, 1), (100, 2), (200, 3)])
    assert table.merge(2) == (100, 199, 1)
    assert table.intervals() == [(0, 199, 1), (200, MAX, 3)]
    assert table.version == 1


def test_merge_of_the_leftmost_spu_goes_right() -> None:
    table = IntervalTable.from_intervals([(0, 1), (100, 2), (200, 3)])
    assert table.merge(1) == (0, 99, 2)
    assert table.intervals() == [(0, 199, 2), (200, MAX, 3)]
    table.check_invariants()


def test_merge_into_the_right_neighbour_extends_it_downwards() -> None:
    table = IntervalTable.from_intervals([(0, 1), (100, 2), (200, 3)])
    assert table.merge(2, into=3) == (100, 199, 3)
    assert table.intervals() == [(0, 99, 1), (100, MAX, 3)]
    assert table.neighbours(3) == [1]
    table.check_invariants()


def test_merging_the_last_spu_is_refused() -> None:
    table = IntervalTable(5)
    with pytest.raises(RoutingError, match=r"cannot merge SPU 5: it is the last SPU and owns the whole key space"):
        table.merge(5)
    assert table.version == 0


def test_merge_into_a_non_adjacent_spu_gives_it_a_second_interval() -> None:
    table = IntervalTable.from_intervals([(0, 1), (100, 2), (200, 3), (300, 4)])
    with pytest.raises(RoutingError, match=r"an SPU cannot merge into itself; merge into one of 1, 3, 4"):
        table.merge(2, into=2)
    with pytest.raises(RoutingError, match="SPU 99 is not in the table"):
        table.merge(2, into=99)
    assert table.version == 0 and len(table) == 4
    assert table.merge(2, into=4) == (100, 199, 4)
    assert table.intervals_of(4) == [(100, 199), (300, MAX)]
    assert table.neighbours(4) == [1, 3]
    # Splitting an SPU of two intervals moves its upper half of hashes, across the gap.
    assert table.split(4, 5) == (300 + (MAX - 300 + 1 + 100) // 2 - 100, MAX)
    table.check_invariants()


def test_an_assignment_of_several_intervals_per_spu_round_trips_and_joins_neighbours() -> None:
    table = IntervalTable(0).assign({7: [(0, 9), (30, 39)], 8: [(10, 29)], 9: [(40, 49), (50, MAX)]})
    assert table.intervals() == [(0, 9, 7), (10, 29, 8), (30, 39, 7), (40, MAX, 9)]
    assert table.version == 1 and table.assignment() == {7: [(0, 9), (30, 39)], 8: [(10, 29)], 9: [(40, MAX)]}
    assert IntervalTable.from_wire(table.to_wire()) == table
    with pytest.raises(RoutingError, match=r"is not a hash range; give \(lo, hi\)"):
        table.assign({1: [(5, 2)]})
    with pytest.raises(RoutingError, match="maps SPU ids to lists of"):
        table.assign([1, 2])  # type: ignore[arg-type]


# ------------------------------------------------------------------ errors
def test_unknown_spu_is_reported_with_the_known_ones() -> None:
    table = IntervalTable.from_intervals([(0, 1), (100, 2)])
    for call in (lambda: table.split(9, 10), lambda: table.merge(9), lambda: table.interval_of(9),
                 lambda: table.neighbours(9), lambda: table.owns(9, 0)):
        with pytest.raises(RoutingError, match=r"SPU 9 is not in the routing table \(version 0\); known SPUs: 1, 2"):
            call()


def test_split_point_outside_the_interval_explains_the_valid_range() -> None:
    table = IntervalTable.from_intervals([(0, 1), (100, 2), (200, 3)])
    for at in (100, 99, 200, 0):
        with pytest.raises(RoutingError, match=r"cannot split SPU 2 at \d+: the split point must be a whole "
                                                r"number with 100 < at <= 199 \(SPU 2 owns \[100, 199\]"):
            table.split(2, 4, at)
    with pytest.raises(RoutingError, match=r"at '150'"):
        table.split(2, 4, "150")  # type: ignore[arg-type]
    assert table.split(2, 4, 101) == (101, 199)
    assert table.split(3, 5, MAX) == (MAX, MAX)


def test_an_interval_of_one_hash_cannot_split() -> None:
    table = IntervalTable.from_intervals([(0, 1), (5, 2), (6, 3)])
    with pytest.raises(RoutingError, match=r"cannot split SPU 2: its interval \[5, 5\] holds a single hash"):
        table.split(2, 4)


def test_split_onto_an_spu_that_already_owns_an_interval_is_refused() -> None:
    table = IntervalTable.from_intervals([(0, 1), (100, 2)])
    with pytest.raises(RoutingError, match=r"cannot split SPU 1 onto SPU 2: SPU 2 already owns \[100, "):
        table.split(1, 2)
    with pytest.raises(RoutingError, match=r"new_spu must be an int SPU id, got '3'"):
        table.split(1, "3")  # type: ignore[arg-type]


def test_lookup_outside_the_key_space_is_refused() -> None:
    table = IntervalTable(0)
    for h in (-1, MAX + 1, 2**63):
        with pytest.raises(RoutingError, match=r"outside the key space \[0, 2147483647\]; hash keys with"):
            table.lookup(h)


def test_from_intervals_validates_its_pairs() -> None:
    with pytest.raises(RoutingError, match="needs at least one"):
        IntervalTable.from_intervals([])
    with pytest.raises(RoutingError, match=r"first interval starts at 10, not 0.*add a \(0, spu\) pair"):
        IntervalTable.from_intervals([(10, 1), (20, 2)])
    with pytest.raises(RoutingError, match="interval start 5 is given twice"):
        IntervalTable.from_intervals([(0, 1), (5, 2), (5, 3)])
    with pytest.raises(RoutingError, match="SPU 1 is given two adjacent intervals"):
        IntervalTable.from_intervals([(0, 1), (5, 1)])
    assert IntervalTable.from_intervals([(0, 1), (5, 2), (9, 1)]).intervals_of(1) == [(0, 4), (9, MAX)]
    with pytest.raises(RoutingError, match=r"interval start 2147483648 \(SPU 2\) is not a whole number in"):
        IntervalTable.from_intervals([(0, 1), (MAX + 1, 2)])
    with pytest.raises(RoutingError, match=r"takes \(start, spu\) pairs, got \(0, 1, 2\)"):
        IntervalTable.from_intervals([(0, 1, 2)])  # type: ignore[list-item]
    with pytest.raises(RoutingError, match="version must be a whole number >= 0"):
        IntervalTable.from_intervals([(0, 1)], version=-1)


def test_from_intervals_accepts_pairs_in_any_order() -> None:
    table = IntervalTable.from_intervals([(200, 3), (0, 1), (100, 2)])
    assert table.intervals() == [(0, 99, 1), (100, 199, 2), (200, MAX, 3)]


def test_from_wire_rejects_garbage_with_the_expected_shape() -> None:
    with pytest.raises(RoutingError, match=r"expected \[version, \[\[start, spu\], \.\.\.\]\]"):
        IntervalTable.from_wire(["nonsense"])
    with pytest.raises(RoutingError, match=r"first interval starts at 3"):
        IntervalTable.from_wire([0, [[3, 1]]])


# ------------------------------------------------------ value behaviour
def test_wire_format_is_msgpack_able_and_keeps_the_version() -> None:
    table = IntervalTable(0)
    table.split(0, 1)
    table.split(1, 2)
    table.merge(0)
    wire = table.to_wire()
    assert wire == [3, [[0, 1], [3 * 2**29, 2]]]
    back = IntervalTable.from_wire(msgpack.unpackb(msgpack.packb(wire)))
    assert back == table and back.version == 3
    back.check_invariants()


def test_copy_is_independent() -> None:
    table = IntervalTable(0)
    clone = table.copy()
    clone.split(0, 1)
    assert table.intervals() == [(0, MAX, 0)] and table.version == 0
    assert clone.version == 1 and 1 in clone and 1 not in table
    assert clone != table


def test_neighbours_contains_and_len() -> None:
    table = IntervalTable.from_intervals([(0, 1), (100, 2), (200, 3)])
    assert table.neighbours(1) == [2]
    assert table.neighbours(2) == [1, 3]
    assert table.neighbours(3) == [2]
    assert IntervalTable(0).neighbours(0) == []
    assert 2 in table and 4 not in table and "x" not in table
    assert len(table) == 3
    assert "[100, 199]->2" in repr(table)


def test_check_invariants_catches_a_corrupted_table() -> None:
    table = IntervalTable.from_intervals([(0, 1), (100, 2)])
    table._start_of[2] = [101]  # simulate a bug that forgot to update the index
    with pytest.raises(AssertionError, match="disagrees with starts"):
        table.check_invariants()
    table = IntervalTable.from_intervals([(0, 1), (100, 2)])
    del table._starts[0]
    with pytest.raises(AssertionError, match="first interval starts at 100, not 0"):
        table.check_invariants()
