"""Shared ranges (esault.reliability.shared_ranges) and TextFileSpout's shared mode, without a runtime.

The range algebra and the lease pool are pure; the spout runs against a simulated job: its requests go to a
RangeLeases, answers come back in any order the test picks, and a checkpoint is a cut of one snapshot per
instance taken at any moment. The property: the lines emitted before each instance's cut plus those a
restored launch (of any instance count) emits after the rollback are the file's lines, each exactly once.
"""

from __future__ import annotations

import random
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from esault import TextFileSpout
from esault.dsl.context import TopologyContext
from esault.errors import TopologyError
from esault.reliability.shared_ranges import STALE, RangeLeases, blocks, coalesce, complement, parse_ranges

ranges_st = st.lists(st.tuples(st.integers(0, 200), st.integers(0, 200)).map(lambda r: (min(r), max(r))),
                     max_size=12)


def covered(ranges, size):
    return {b for a, e in ranges for b in range(a, min(e, size))}


@given(ranges_st, st.integers(0, 220))
def test_coalesce_and_complement_split_the_space_between_them(ranges, size):
    done = coalesce(ranges)
    assert all(a < b for a, b in done) and all(b1 < a2 for (_, b1), (a2, _) in zip(done, done[1:]))
    assert covered(done, 10**6) == covered(ranges, 10**6)
    free = complement(done, size)
    assert covered(free, size) == set(range(size)) - covered(done, size)
    assert all(a < b <= size for a, b in free)


@given(ranges_st, st.integers(1, 220), st.integers(1, 50))
def test_blocks_cut_the_free_ranges_in_order_and_no_larger_than_a_block(ranges, size, block):
    free = complement(ranges, size)
    cut = list(blocks(free, block))
    assert all(0 < b - a <= block for a, b in cut)
    assert cut == sorted(cut) and covered(cut, size) == covered(free, size)
    assert sum(b - a for a, b in cut) == sum(b - a for a, b in free)


@pytest.mark.parametrize("bad", ["x", [[1]], [[1, "2"]], [[5, 5]], [[3, 1]], [[-1, 2]], [[0, 11]], [[True, 2]]])
def test_a_malformed_range_list_is_refused_with_what_is_wrong(bad):
    with pytest.raises(ValueError, match="expected a list|pair of whole numbers|within"):
        parse_ranges(bad, 10)


def test_leases_hand_out_every_free_block_once_per_generation_and_ignore_older_ones():
    leases = RangeLeases()
    got = [leases.lease("src", 0, 100, [], 30) for _ in range(5)]
    assert got == [(0, 30), (30, 60), (60, 90), (90, 100), None]
    # a rollback: generation 1 restored [0, 45) as read; a late request of generation 0 changes nothing
    assert leases.lease("src", 1, 100, [[0, 45]], 30) == (45, 75)
    assert leases.lease("src", 0, 100, [], 30) is STALE
    assert leases.lease("src", 1, 100, [[0, 45]], 30) == (75, 100)
    assert leases.lease("src", 1, 100, [[0, 45]], 30) is None
    # at_least_once: SPU 7 is lost holding two blocks; its replacement (SPU 9) leases them again first
    assert [leases.lease("alo", 0, 100, [], 30, owner=o) for o in (7, 8, 7)] == [(0, 30), (30, 60), (60, 90)]
    assert leases.lease("alo", 0, 100, [], 30, owner=9, replaces=[7]) == (0, 30)
    assert [leases.lease("alo", 0, 100, [], 30, owner=8) for _ in range(3)] == [(60, 90), (90, 100), None]
    assert leases.lease("alo", 0, 100, [], 30, owner=9, replaces=[7]) is None  # named once: nothing twice
    with pytest.raises(ValueError, match="same merged position"):
        leases.lease("src", 1, 100, [[0, 50]], 30)
    for bad in [("", 0, 1, [], 1), ("src", -1, 1, [], 1), ("src", 2, 10, [], 0), ("src", 2, "10", [], 1)]:
        with pytest.raises(ValueError):
            leases.lease(*bad)


# --- TextFileSpout in shared mode against a simulated job ---------------------------------------------


class SimulatedJob:
    """The spouts of one launch, the job's leases and the messages between them, stepped by a random source."""

    def __init__(self, path: Path, instances: int, block: int, leases: RangeLeases, generation: int,
                 position=None, guarantee: str = "exactly_once") -> None:
        self.leases, self.generation = leases, generation
        self.requests: list = []  # (instance, size, done, block, replaces)
        self.owners = list(range(instances))  # each instance's SPU id; a replacement gets a new one
        self.replaces: dict[int, tuple] = {}  # instance -> the lost SPUs its next request names
        self.lineage: dict[int, tuple] = {}  # SPU -> the lost ones it replaced
        self.stale: list = []  # requests a discarded launch sent before the rollback, still on their way
        self.grants: list = []  # (instance, answer)
        self.emitted: list[list[str]] = [[] for _ in range(instances)]
        self.spouts = []
        for i in range(instances):
            spout = self.spout(path, i, instances, block, guarantee)
            if position is not None:
                spout.restore_position(position)
            self.spouts.append(spout)

    def spout(self, path: Path, i: int, instances: int, block: int, guarantee: str) -> TextFileSpout:
        """Instance i, opened, its emits and requests going to this job."""
        spout = TextFileSpout(str(path), chunk_lines=2, block_bytes=block)
        spout._esault_emit_batch = lambda keys, values, msg_id: self.emitted[i].extend(values)
        spout._esault_request_range = lambda size, done, blk: self.requests.append(
            (i, size, done, blk, self.replaces.pop(i, ())))
        spout.open(TopologyContext("t", "lines", i, Path("."), instance=i, instances=instances,
                                   guarantee=guarantee))
        return spout

    def step(self, rnd: random.Random) -> bool:
        """One thing happens: a spout reads, the job answers a request, or an answer arrives. False once done."""
        moves = [("read", i) for i, s in enumerate(self.spouts) if not s.finished]
        moves += [("serve", k) for k in range(len(self.requests))] + [("grant", k) for k in range(len(self.grants))]
        moves += [("stale", k) for k in range(len(self.stale))]
        if not moves:
            return False
        kind, k = rnd.choice(moves)
        if kind == "read":
            self.spouts[k].next_tuple()
        elif kind == "serve":
            i, size, done, blk, replaces = self.requests.pop(k)
            answer = self.leases.lease("lines", self.generation, size, done, blk, self.owners[i], replaces)
            if answer is not STALE:
                self.grants.append((i, answer))
        elif kind == "stale":  # its answer goes to an SPU that is gone
            _i, size, done, blk, _r = self.stale.pop(k)
            self.leases.lease("lines", self.generation - 1, size, done, blk)
        else:
            i, answer = self.grants.pop(k)
            if answer is not STALE and self.spouts[i] is not None:
                self.spouts[i].on_range(*(answer or (None, None)), "")
        return True

    def lose(self, i: int, path: Path, block: int, instances: int) -> None:
        """at_least_once: instance i's process dies (what it emitted may be lost downstream, requests and grants
        to it with it); a replacement with a new SPU id names the lost one in its first request."""
        self.requests = [r for r in self.requests if r[0] != i]
        self.grants = [g for g in self.grants if g[0] != i]
        lost, self.owners[i] = self.owners[i], max([*self.owners, *self.lineage]) + 1
        # as the unit does: the lost SPU, and those it replaced (their blocks may never have been queued
        # again: its request may have died with it)
        self.lineage[self.owners[i]] = self.replaces[i] = (lost, *self.lineage.pop(lost, ()))
        self.emitted[i] = []
        self.spouts[i] = self.spout(path, i, instances, block, "at_least_once")

    def run(self, rnd: random.Random) -> None:
        while self.step(rnd):
            pass


lines_st = st.lists(st.text(alphabet="ab \n", max_size=30).map(lambda t: t.replace("\n", "")), min_size=0,
                    max_size=40)


def write(tmp: Path, lines: list[str], trailing_newline: bool) -> Path:
    path = tmp / "input.txt"
    path.write_text("\n".join(lines) + ("\n" if trailing_newline and lines else ""))
    return path


def expected_lines(path: Path) -> list[str]:
    text = path.read_text()
    lines = text.split("\n")
    return lines[:-1] if text.endswith("\n") or not text else lines


@settings(max_examples=150, deadline=None)
@given(lines_st, st.booleans(), st.integers(1, 4), st.integers(1, 40), st.randoms(use_true_random=False))
def test_shared_instances_read_every_line_once_whoever_is_faster(lines, newline, instances, block, rnd):
    with tempfile.TemporaryDirectory() as tmp:
        path = write(Path(tmp), lines, newline)
        job = SimulatedJob(path, instances, block, RangeLeases(), 0)
        job.run(rnd)
        assert sorted(v for e in job.emitted for v in e) == sorted(expected_lines(path))


@settings(max_examples=200, deadline=None)
@given(lines_st, st.booleans(), st.integers(1, 4), st.integers(1, 4), st.integers(1, 40),
       st.randoms(use_true_random=False), st.data())
def test_a_rollback_to_any_cut_reads_every_line_exactly_once_at_any_new_instance_count(
        lines, newline, instances, restored_instances, block, rnd, data):
    """A checkpoint cut: each instance's snapshot at its own moment (blocks leased, granted and read before
    and after it); then more work that the rollback discards; then a launch of `restored_instances` restores
    the merged position and reads on."""
    with tempfile.TemporaryDirectory() as tmp:
        path = write(Path(tmp), lines, newline)
        leases = RangeLeases()
        job = SimulatedJob(path, instances, block, leases, 0)
        cut: dict[int, tuple] = {}
        for _ in range(data.draw(st.integers(0, 120), label="steps")):
            i = rnd.randrange(instances)
            if i not in cut and rnd.random() < 0.1:
                cut[i] = (job.spouts[i].snapshot_position(), len(job.emitted[i]))
            if not job.step(rnd):
                break
        for i in range(instances):  # instances that had not reached the barrier yet take it now
            cut.setdefault(i, (job.spouts[i].snapshot_position(), len(job.emitted[i])))
        for _ in range(data.draw(st.integers(0, 30), label="discarded steps")):
            job.step(rnd)  # work after the cut, rolled back
        committed = [v for i in range(instances) for v in job.emitted[i][:cut[i][1]]]
        merged = TextFileSpout.esault_merge_positions([cut[i][0] for i in range(instances)])
        restored = SimulatedJob(path, restored_instances, block, leases, 1, position=merged)
        restored.stale = list(job.requests)  # served at any moment, before or after the new launch's first
        restored.run(rnd)
        got = committed + [v for e in restored.emitted for v in e]
        assert sorted(got) == sorted(expected_lines(path))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.large_base_example])
@given(lines_st, st.booleans(), st.integers(2, 4), st.integers(1, 40), st.randoms(use_true_random=False),
       st.lists(st.integers(0, 60), max_size=3))
def test_at_least_once_a_replaced_instance_reads_again_every_block_the_lost_one_held(
        lines, newline, instances, block, rnd, loss_steps):
    """No checkpoint: an instance is lost at any moment (what it emitted is not counted: it may have died in
    flight) and replaced; every line still comes out at least once."""
    with tempfile.TemporaryDirectory() as tmp:
        path = write(Path(tmp), lines, newline)
        job = SimulatedJob(path, instances, block, RangeLeases(), 0, guarantee="at_least_once")
        for step in range(max(loss_steps, default=0) + 1):
            for _ in range(loss_steps.count(step)):
                job.lose(rnd.randrange(instances), path, block, instances)
            if not job.step(rnd):
                break
        job.run(rnd)
        got = {v for e in job.emitted for v in e}
        assert got == set(expected_lines(path))


def test_positions_of_static_instances_restore_into_shared_ones(tmp_path):
    """A checkpoint of the earlier static ranges (one byte offset per instance) restores: the merge hook keeps
    the offsets, and each restored instance turns them into the ranges read."""
    path = write(tmp_path, [f"line {i}" for i in range(50)], True)
    static = [TextFileSpout(str(path), chunk_lines=3, shared=False) for _ in range(2)]
    emitted: list[str] = []
    for i, s in enumerate(static):
        s._esault_emit_batch = lambda keys, values, msg_id: emitted.extend(values)
        s.open(TopologyContext("t", "lines", i, Path("."), instance=i, instances=2))
        for _ in range(2 + i):
            s.next_tuple()
    merged = TextFileSpout.esault_merge_positions([s.snapshot_position() for s in static])
    assert merged == {"static": [s.snapshot_position() for s in static]}
    job = SimulatedJob(path, 3, 16, RangeLeases(), 1, position=merged)
    job.run(random.Random(4))
    assert sorted(emitted + [v for e in job.emitted for v in e]) == sorted(expected_lines(path))


def test_shared_mode_refuses_a_changed_file_and_a_foreign_position(tmp_path):
    path = write(tmp_path, ["a", "b"], True)
    spout = TextFileSpout(str(path))
    spout.open(TopologyContext("t", "lines", 0, Path("."), instances=2))
    with pytest.raises(ValueError, match="restore only the file it read"):
        spout.restore_position({"size": 99, "done": []})
    with pytest.raises(ValueError, match="no position of this spout"):
        spout.restore_position("elsewhere")
    for bad in [dict(shared="yes"), dict(block_bytes=0)]:
        with pytest.raises(TopologyError):
            TextFileSpout(str(path), **bad)
