"""Chain nodes over FIFO links (each one an SPU in the runtime): every pair exactly once under any interleaving,
flush rounds that cover what they claim, tail changes, and checkpoints cut without channel state."""

from collections import Counter, deque

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from esault.joins.node import ChainNode, ChainProtocolError
from esault.joins.protocol import LEFT, RIGHT, Done, Flushed, Joined, Link, Send, SizeChange, from_wire, to_wire
from esault.joins.queries import JoinQuery, extractor

EQUI = JoinQuery("equi", "equi", extractor("k", "on"), extractor("k", "on"))
BAND = JoinQuery("band", "band", extractor("x", "on"), extractor("x", "on"), band=2)
ODD_SUM = JoinQuery("odd", lambda r, s: (r["k"] + s["x"]) % 3 == 0)
QUERIES = [EQUI, BAND, ODD_SUM]


class Cluster:
    """Nodes in chain order, a FIFO queue per directed link, and what a runtime does around them."""

    def __init__(self, n, window, zeta, inflight):
        self.window, self.zeta, self.inflight = window, zeta, inflight
        self.next_id = 0
        self.nodes, self.order, self.links = {}, [], {}
        self.out = []  # (node, Joined)
        self.entered = {"R": [], "S": []}  # (entry step, ts, value) per stream, by seq
        self.flushed = []  # (node, side, bound, step)
        self.held = deque()  # S entries waiting for a new tail (a change in progress)
        self.change = None  # ("add", new) or ("remove", tail, left)
        self.step = 0
        self.rounds = []
        self.retired: set[int] = set()  # tails removed so far
        for _ in range(n):
            self.order.append(self._new())
        self._relink()

    def _new(self):
        nid = self.next_id
        self.next_id += 1
        self.nodes[nid] = ChainNode(nid, QUERIES, self.window, self.zeta, self.inflight)
        return nid

    def _relink(self):
        for i, nid in enumerate(self.order):
            left = self.order[i - 1] if i else None
            right = self.order[i + 1] if i + 1 < len(self.order) else None
            self.apply(nid, self.nodes[nid].link(left, right))

    def apply(self, nid, effects):
        node = self.nodes[nid]
        for e in effects:
            if isinstance(e, Send):
                to = node.neighbour(e.direction)
                assert to is not None, f"node {nid} sent {e.message} towards no neighbour"
                message = from_wire(to_wire(e.message))  # what crosses a process boundary
                self.links.setdefault((nid, to), deque()).append(message)
            elif isinstance(e, Joined):
                self.out.append((nid, e))
            elif isinstance(e, Flushed):
                self.flushed.append((nid, e.side, e.bound, self.step))
                self.check_flushed(e.side, e.bound)
            else:
                raise AssertionError(f"unknown effect {e!r}")

    def check_flushed(self, side, bound):
        """Flushed(side, bound): each such input's pairs with every older tuple of the other side are out."""
        made = {(p.query, p.r[0], p.s[0]) for _, p in self.out}
        other = "S" if side == "R" else "R"
        for seq, (step, ts, v) in enumerate(self.entered[side][:bound], 1):
            for oseq, (ostep, ots, ov) in enumerate(self.entered[other], 1):
                if ostep >= step or abs(ts - ots) > self.window:
                    continue
                r, s = (v, ov) if side == "R" else (ov, v)
                pair = (seq, oseq) if side == "R" else (oseq, seq)
                for q in QUERIES:
                    if q.matches(r, s):
                        assert (q.name, *pair) in made, f"Flushed({side}, {bound}) but {q.name} {pair} is not out"

    @property
    def head(self):
        return self.order[0]

    @property
    def tail(self):
        return self.order[-1]

    def enter(self, side, ts, value):
        self.step += 1
        if side == "S" and self.change is not None:
            self.held.append((ts, value))
            return
        self._enter(side, ts, value)

    def _enter(self, side, ts, value):
        nid = self.head if side == "R" else self.tail
        node = self.nodes[nid]
        effects = node.enter(side, ts, value, None)
        self.entered[side].append((self.step, node.last_ts[side], value))
        self.apply(nid, effects)

    def busy(self):
        return sorted(k for k, q in self.links.items() if q)

    def deliver(self, link):
        src, dst = link
        message = self.links[link].popleft()
        node = self.nodes[dst]
        if isinstance(message, Link):
            self.apply(dst, node.accept_link(src, message))
            self._finish_add(dst)
            return
        direction = node.direction_of(src)
        assert direction is not None, f"{message} from {src} reached {dst}, not its neighbour"
        self.apply(dst, node.receive(direction, message))
        change = self.change
        if change and change[0] == "remove" and dst == change[2] and node.right is None:
            self._finish_remove()

    def run(self):
        while busy := self.busy():
            self.deliver(busy[0])

    # --- chain changes, one at a time, at the tail ---

    def add(self):
        new = self._new()
        self.change = ("add", new)
        old = self.tail
        self.order.append(new)
        self.apply(old, self.nodes[old].link_new_tail(new))

    def _finish_add(self, new):
        self.change = None
        while self.held:
            self._enter("S", *self.held.popleft())

    def remove(self):
        tail, left = self.order[-1], self.order[-2]
        self.change = ("remove", tail, left)
        self.apply(tail, self.nodes[tail].retire())

    def _finish_remove(self):
        _, tail, left = self.change
        assert not self.links.get((tail, left)), "the tail sent something after its Handoff"
        rest = self.links.pop((left, tail), ())
        # advice, or the answer to a flush round of this tail or of a tail retired before it (its rounds end
        # with it: its inputs go on with its state to the new tail, whose own flush covers them)
        self.retired.add(tail)
        assert all(isinstance(m, SizeChange) or (isinstance(m, Done) and m.origin in self.retired)
                   for m in rest), rest
        self.links.pop((tail, left), None)
        self.order.remove(tail)
        del self.nodes[tail]
        self.change = None
        while self.held:
            self._enter("S", *self.held.popleft())

    def produced(self):
        return Counter((p.query, p.r[0], p.s[0]) for _, p in self.out)

    def oracle(self):
        rs, ss = self.entered["R"], self.entered["S"]
        return Counter((q.name, i + 1, j + 1) for q in QUERIES for i, (_, rt, rv) in enumerate(rs)
                       for j, (_, st_, sv) in enumerate(ss) if abs(rt - st_) <= self.window and q.matches(rv, sv))

    def start_flush(self, nid, side):
        self.rounds.append((nid, side, self.nodes[nid].seq[side]))
        self.apply(nid, self.nodes[nid].start_flush(side))

    def finish(self):
        """End of input: flush both streams to their far ends; every pair is then out, every round answered."""
        self.run()
        self.start_flush(self.head, "R")
        self.start_flush(self.tail, "S")
        self.run()
        for nid, side, bound in self.rounds:  # a retired tail's rounds end with it (its successor flushes)
            if nid in self.nodes:
                assert any(f[:2] == (nid, side) and f[2] >= bound for f in self.flushed), f"round {side}<={bound} lost"


values = st.fixed_dictionaries({"k": st.integers(0, 3), "x": st.integers(0, 10)})
steps = st.lists(st.one_of(
    st.tuples(st.sampled_from(["R", "S"]), st.integers(0, 3), values),
    st.tuples(st.just("deliver"), st.integers(0, 1000)),
    st.tuples(st.sampled_from(["flushR", "flushS", "add", "remove"])),
), min_size=20, max_size=250)


@settings(max_examples=120, deadline=None)
@given(steps=steps, zeta=st.sampled_from([1, 2, 3, 20]), n=st.integers(1, 4), window=st.integers(0, 12),
       inflight=st.integers(1, 3))
def test_every_pair_joins_exactly_once_across_nodes_with_flush_rounds_and_tail_changes(steps, zeta, n, window,
                                                                                       inflight):
    c = Cluster(n, window, zeta, inflight)
    clock = {"R": 0, "S": 0}
    for step in steps:
        kind = step[0]
        if kind in ("R", "S"):
            clock[kind] += step[1]
            c.enter(kind, clock[kind], step[2])
        elif kind == "deliver":
            busy = c.busy()
            if busy:
                c.deliver(busy[step[1] % len(busy)])
        elif kind in ("flushR", "flushS"):
            c.start_flush(c.head if kind == "flushR" else c.tail, kind[-1])
        elif c.change is None:
            if kind == "add" and len(c.order) < 6:
                c.add()
            elif kind == "remove" and len(c.order) > 1:
                c.remove()
    c.finish()
    assert c.change is None
    assert c.produced() == c.oracle()


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.large_base_example])
@given(steps=steps, n=st.integers(1, 4), window=st.integers(0, 12), order=st.randoms(use_true_random=False), crash_after=st.integers(0, 60))
def test_a_checkpoint_cut_node_by_node_restores_to_every_pair_exactly_once(steps, n, window, order,
                                                                            crash_after):
    """Barriers reach the nodes at different times; each snapshots once quiet. Restoring every node from its
    snapshot (links empty), keeping the pairs each emitted before its snapshot and replaying the entries
    after the entry nodes' snapshots, gives exactly the oracle's pairs."""
    c = Cluster(n, window, 1, 2)
    clock = {"R": 0, "S": 0}
    log = []  # every entry, in order: (side, ts, value)

    def play(step):
        kind = step[0]
        if kind in ("R", "S"):
            clock[kind] += step[1]
            log.append((kind, clock[kind], step[2]))
            c.enter(kind, clock[kind], step[2])
        elif kind == "deliver":
            busy = c.busy()
            if busy:
                c.deliver(busy[step[1] % len(busy)])
        elif kind in ("flushR", "flushS"):
            entry = c.head if kind == "flushR" else c.tail
            c.apply(entry, c.nodes[entry].start_flush(kind[-1]))

    half = len(steps) // 2
    for step in steps[:half]:
        play(step)
    # the checkpoint: each node's barrier comes at a random moment; entries to a node past its barrier wait
    pending = list(c.order)
    order.shuffle(pending)
    snaps, emitted_before, entered_before = {}, {}, {}
    began = set()
    waiting = []  # entries held by alignment at their entry node
    guard = 0
    while len(snaps) < len(c.order):
        guard += 1
        assert guard < 100000, "the checkpoint never completed"
        choice = order.random()
        if pending and choice < 0.3:
            nid = pending.pop()
            began.add(nid)
            c.apply(nid, c.nodes[nid].begin_quiesce(7))
        elif choice < 0.5 and steps[half:]:
            step = steps[half + len(log) % len(steps[half:])]
            if step[0] in ("R", "S"):
                entry = c.head if step[0] == "R" else c.tail
                clock[step[0]] += step[1]
                item = (step[0], clock[step[0]], step[2])
                log.append(item)
                if entry in began and entry not in snaps:
                    waiting.append(item)
                else:
                    c.enter(*item)
            elif step[0] in ("flushR", "flushS"):  # a round may start at any time (a timer)
                entry = c.head if step[0] == "flushR" else c.tail
                c.apply(entry, c.nodes[entry].start_flush(step[0][-1]))
                log.append(("flush",))
        elif choice < 0.7:  # one node that is quiet takes its snapshot
            ready = [nid for nid in sorted(began) if nid not in snaps and c.nodes[nid].quiet()]
            if ready:
                nid = ready[int(choice * 1000) % len(ready)]
                node = c.nodes[nid]
                snaps[nid] = node.snapshot()
                emitted_before[nid] = [p for who, p in c.out if who == nid]
                entered_before[nid] = {s: node.seq[s] for s in ("R", "S")}
                c.apply(nid, node.end_quiesce())
                for item in [w for w in waiting if (c.head if w[0] == "R" else c.tail) == nid]:
                    waiting.remove(item)
                    c.enter(*item)
        else:
            busy = c.busy()
            if busy:
                c.deliver(busy[int(choice * 1000) % len(busy)])
    for step in steps[half:half + crash_after]:
        play(step)
    # a crash: every node restarts from its snapshot, links empty, sources replay after the cut
    layout = list(c.order)
    r_cut, s_cut = entered_before[layout[0]]["R"], entered_before[layout[-1]]["S"]
    log = [e for e in log if e[0] != "flush"]
    replay_r = [e for e in log if e[0] == "R"][r_cut:]
    replay_s = [e for e in log if e[0] == "S"][s_cut:]
    fresh = Cluster(0, window, 1, 2)
    fresh.next_id = max(layout) + 1
    for nid in layout:
        node = ChainNode(nid, QUERIES, window, 1, 2)
        node.restore(snaps[nid])
        fresh.nodes[nid] = node
    fresh.order = layout
    fresh._relink()
    fresh.out = [(nid, p) for nid in layout for p in emitted_before[nid]]
    rs = [e for e in log if e[0] == "R"][:r_cut]
    ss = [e for e in log if e[0] == "S"][:s_cut]
    fresh.entered = {"R": [(0, ts, v) for _, ts, v in rs], "S": [(0, ts, v) for _, ts, v in ss]}
    for item in sorted(replay_r + replay_s, key=lambda e: log.index(e)):
        fresh.enter(*item)
    fresh.finish()
    assert fresh.produced() == fresh.oracle()


def test_restoring_more_snapshots_than_nodes_merges_them_in_chain_order_with_the_pairs_they_owed():
    c = Cluster(3, 10, 1, 2)
    for i in range(30):
        c.enter("R", i, {"k": i % 3, "x": i})
        c.enter("S", i, {"k": (i + 1) % 3, "x": i + 1})
        busy = c.busy()
        if busy and i % 2:
            c.deliver(busy[0])
    for nid in c.order:
        c.apply(nid, c.nodes[nid].begin_quiesce(1))
    c.run()
    assert all(c.nodes[n].quiet() for n in c.order)
    snaps = [c.nodes[n].snapshot() for n in c.order]
    # the restored job has two nodes: the second absorbs the third's state
    fresh = Cluster(0, 10, 1, 2)
    fresh.out = list(c.out)
    fresh.entered = c.entered
    a, b = ChainNode(10, QUERIES, 10, 1, 2), ChainNode(11, QUERIES, 10, 1, 2)
    a.restore(snaps[0])
    b.restore(snaps[1])
    owed = b.absorb(snaps[2])
    fresh.nodes = {10: a, 11: b}
    fresh.order = [10, 11]
    fresh._relink()
    fresh.out += [(11, p) for p in owed]
    fresh.finish()
    assert fresh.produced() == fresh.oracle()
    assert b.seq["S"] == 30 and a.seq["R"] == 30


def test_link_messages_from_a_frame_are_checked_before_they_reach_a_node():
    with pytest.raises(ValueError, match="not a chain link message"):
        from_wire(["X", 1])
    with pytest.raises(ValueError, match="side must be 'R' or 'S'"):
        from_wire(["A", "Q", 3])
    with pytest.raises(ValueError, match="must be an int"):
        from_wire(["M", "7"])
    with pytest.raises(ValueError, match=r"\[seq, ts, value, key\]"):
        from_wire(["B", "R", 1, [[1, 2.0]]])
    node = ChainNode(0, QUERIES, 5)
    node.link(None, 1)
    with pytest.raises(ChainProtocolError, match="not in flight"):
        node.receive(RIGHT, from_wire(["A", "R", 99]))
    with pytest.raises(ChainProtocolError, match="travels right"):
        node.receive(RIGHT, from_wire(["T", "R", 3, 1]))
    assert LEFT == -RIGHT
