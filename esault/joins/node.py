"""One S2J chain worker that is an SPU of its own: the MP-2PF core plus the link control around it.

`ChainWorker` (worker.py) is the join and MP-2PF between two neighbours.
When each worker is an SPU (run by `datapath/chain_spu.py`'s `ChainProcessing`, possibly in another process)
its links are real channels, so four more things need a protocol, all here
as a pure machine (messages in, effects out; tests/unit/test_chain_nodes.py
runs many nodes over FIFO links under random interleavings):

- **Entry**: R enters the chain's head, S its tail; the entry node numbers
  the tuples of its stream (seq), the order every store keeps.
- **Flush rounds** (a pair is produced only when its tuples cross, so an
  input is owed pairs until it crossed every older tuple of the other side):
  the entry node sends a Token behind every tuple of its side with seq <=
  bound, each node pushes those tuples on and passes the Token, the far end
  answers Done, which travels back. Then every pair of those tuples with
  older ones is out: their inputs may be acked (`Flushed`).
- **Checkpoints** (a barrier reaches every node): a node stops sending
  blocks and tells its neighbours (Mark); once it has both neighbours' Marks
  and every block it sent is acknowledged, no block is in flight on its
  links and its state alone is its part of a consistent cut (no channel
  state). After the snapshot it sends Resume; a neighbour sends it blocks
  again only after that Resume, so nothing sent after one snapshot reaches
  a node before its own.
- **Chain changes**, at the tail only (S's entry moves; R's never does): an
  added tail is linked by the old one (Link, first on the new link: the S
  sequence so far), and the old tail starts pushing R to it. A removed tail
  is merged into its left neighbour: it asks (Quiet), the neighbour stops
  sending it blocks and answers Quiet; once that link is empty the tail sends its whole state (Handoff,
  last on the link) and the neighbour joins its own R with the tail's S (the
  pairs the two had not compared yet) and becomes the tail.
"""

from __future__ import annotations

from typing import Any, Sequence

from esault.joins.protocol import (
    LEFT, RIGHT, Ack, Done, Flushed, Handoff, Joined, Link, Mark, Quiet, Resume, Send, SizeChange, Token, TupleBlock,
)
from esault.joins.queries import JoinQuery
from esault.joins.worker import ChainWorker, EntryNumbering

SIDE_DIRECTION = {"R": RIGHT, "S": LEFT}
"""Where each stream's tuples travel."""


class ChainProtocolError(RuntimeError):
    """A link message that the protocol's state does not allow (a bug or a forged frame): it is dropped."""


class ChainNode:
    """One chain SPU's worker, neighbours, entry numbering, flush rounds, pauses and hand-offs."""

    def __init__(self, node_id: int, queries: Sequence[JoinQuery], window: float, zeta: int = 20,
                 max_inflight: int = 4) -> None:
        self.id = node_id
        self.worker = ChainWorker(queries, window, zeta, max_inflight)
        self.left: int | None = None
        self.right: int | None = None
        self.entry = EntryNumbering()  # the last seq this node gave a tuple of each stream, their clocks
        self.tokens: dict[str, list[Token]] = {"R": [], "S": []}  # rounds waiting to pass on (bound order)
        self._pauses: dict[int, set] = {LEFT: set(), RIGHT: set()}
        self._marks: set[tuple[int, int]] = set()  # (direction, epoch) of neighbours' Marks
        self._resumes: set[tuple[int, int]] = set()
        self.quiescing: int | None = None  # the checkpoint epoch this node stopped its blocks for
        self.retiring = False  # a tail being merged into its left neighbour
        self._quiet_from_left = False
        self.retired = False  # its Handoff left: nothing more to do

    # --- topology ---

    def link(self, left: int | None, right: int | None) -> list:
        """Set the neighbours (the chain's first layout, or after a rollback): links start empty."""
        self.left, self.right = left, right
        w = self.worker
        w.has_left, w.has_right = left is not None, right is not None
        w.known_left_s = w.known_right_r = 0
        return self.push()

    @property
    def seq(self) -> dict[str, int]:
        return self.entry.seq

    @property
    def last_ts(self) -> dict[str, float | None]:
        return self.entry.last_ts

    @property
    def is_head(self) -> bool:
        return self.left is None

    @property
    def is_tail(self) -> bool:
        return self.right is None

    def neighbour(self, direction: int) -> int | None:
        return self.right if direction == RIGHT else self.left

    def direction_of(self, sender: int) -> int | None:
        """LEFT or RIGHT for a neighbour's id, None for any other sender."""
        if sender == self.left and sender is not None:
            return LEFT
        if sender == self.right and sender is not None:
            return RIGHT
        return None

    # --- data ---

    def enter(self, side: str, ts: float, value: Any, key: Any) -> list:
        """A new tuple of stream R (at the head) or S (at the tail). Event time must not go back within a
        stream: a late tuple takes its stream's newest time (counted in `late`), so the window stays exact."""
        seq, ts = self.entry.stamp(side, ts)
        return self._after(self.worker.enter(side, (seq, ts, value, key)))

    def receive(self, direction: int, message: Any) -> list:
        """A message from the neighbour in `direction`; ChainProtocolError if the state forbids it."""
        kind = type(message)
        if self.retired and (kind is SizeChange or kind is Done):
            return []  # advice or an answer for a node that merged away: its successor carries on
        if kind is TupleBlock or kind is Ack or kind is SizeChange:
            if self.retired:
                raise ChainProtocolError(f"{kind.__name__} for a chain node that handed off its state")
            if kind is Ack and message.block not in (self.worker.sent_right if message.side == "R"
                                                     else self.worker.sent_left):
                raise ChainProtocolError(f"Ack of block {message.block} ({message.side}) that is not in flight")
            return self._after(self.worker.receive(message, direction))
        if kind is Mark:
            self._marks.add((direction, message.epoch))
            return []
        if kind is Resume:
            self._resumes.add((direction, message.epoch))
            if self.quiescing is None and ("ckpt", message.epoch) in self._pauses[direction]:
                self._pauses[direction].discard(("ckpt", message.epoch))
                self._sync_pauses()
                return self.push()
            return []
        if kind is Token:
            return self._on_token(direction, message)
        if kind is Done:
            if message.origin == self.id:
                return [Flushed(message.side, message.bound)]
            onward = -direction
            return [Send(onward, message)] if self.neighbour(onward) is not None else []
        if kind is Quiet:
            if direction == RIGHT and self.right is not None:  # the tail retires into me: no more blocks to it
                self._pauses[RIGHT].add("merge")
                self._sync_pauses()
                return [Send(RIGHT, Quiet())]
            if direction != LEFT or not self.retiring:
                raise ChainProtocolError("Quiet answers only a tail that is being merged into its left neighbour")
            self._quiet_from_left = True
            return self._after([])
        if kind is Handoff:
            if direction != RIGHT:
                raise ChainProtocolError("a Handoff comes from the right neighbour (the tail merged into this node)")
            return self._absorb_tail(message.state)
        if kind is Link:
            raise ChainProtocolError("Link is taken with accept_link (it names the new left neighbour)")
        raise ChainProtocolError(f"unknown chain link message {kind.__name__}")

    def push(self) -> list:
        """Forward what balance or a flush round asks for (after a pause ends or a round starts)."""
        return self._after(self.worker.push())

    # --- flush rounds ---

    def start_flush(self, side: str) -> list:
        """Every tuple of `side` this node numbered so far goes to the far end; Flushed(side, bound) comes back
        (at once at a far end: every tuple entering there met every older one of the other side)."""
        bound = self.seq[side]
        far_end = self.is_tail if side == "R" else self.is_head
        if far_end:
            return [Flushed(side, bound)]
        self._await(Token(side, bound, self.id))
        return self.push()

    def _on_token(self, direction: int, token: Token) -> list:
        if SIDE_DIRECTION[token.side] != -direction:
            raise ChainProtocolError(f"a {token.side} token travels {'right' if token.side == 'R' else 'left'}")
        far_end = self.is_tail if token.side == "R" else self.is_head
        if far_end:
            return self._done(token)
        self._await(token)
        return self.push()

    def _await(self, token: Token) -> None:
        """A round to pass on once the tuples it covers left: push them on now, whatever the balance."""
        self.tokens[token.side].append(token)
        w = self.worker
        w.drain_to[token.side] = max(token.bound, w.drain_to[token.side] or 0)

    def _done(self, token: Token) -> list:
        if token.origin == self.id:
            return [Flushed(token.side, token.bound)]
        return [Send(-SIDE_DIRECTION[token.side], Done(token.side, token.bound, token.origin))]

    def _pass_tokens(self, effects: list) -> None:
        """Tokens go on once every tuple they cover has left (blocks ahead of them on the FIFO link)."""
        w = self.worker
        if not self.tokens["R"] and not self.tokens["S"]:  # no round in progress: every entry's fast path
            w.drain_to["R"] = w.drain_to["S"] = None
            return
        for side, store in (("R", w.r), ("S", w.s)):
            pending = self.tokens[side]
            direction = SIDE_DIRECTION[side]
            if pending and self.neighbour(direction) is None:  # became the far end (a merge): answer them
                for token in pending:
                    effects += self._done(token)
                pending.clear()
            while pending and not self._pauses[direction] and not store.holds_upto(pending[0].bound):
                effects.append(Send(direction, pending.pop(0)))
            w.drain_to[side] = max((t.bound for t in pending), default=None)

    # --- after every step ---

    def _after(self, effects: list) -> list:
        self._pass_tokens(effects)
        if self.retiring and not self.retired and self._quiet_from_left and not self.worker.sent_left:
            self.retired = True
            effects.append(Send(LEFT, Handoff(self.snapshot())))
        return effects

    def _sync_pauses(self) -> None:
        for direction, reasons in self._pauses.items():
            self.worker.paused[direction] = bool(reasons)

    # --- checkpoints ---

    def begin_quiesce(self, epoch: int) -> list:
        """The barrier of `epoch` is here: no more blocks out; Marks tell the neighbours."""
        self.quiescing = epoch
        effects: list = []
        for direction in (LEFT, RIGHT):
            if self.neighbour(direction) is not None:
                self._pauses[direction].add(("ckpt", epoch))
                effects.append(Send(direction, Mark(epoch)))
        self._sync_pauses()
        return effects

    def quiet(self) -> bool:
        """No block in flight on this node's links: its state is its whole part of the cut."""
        epoch = self.quiescing
        w = self.worker
        return (not w.sent_left and not w.sent_right
                and all((d, epoch) in self._marks for d in (LEFT, RIGHT) if self.neighbour(d) is not None))

    def end_quiesce(self) -> list:
        """The snapshot is taken: Resume to the neighbours; blocks go again to each that resumed too."""
        epoch, self.quiescing = self.quiescing, None
        effects: list = []
        for direction in (LEFT, RIGHT):
            if self.neighbour(direction) is None:
                continue
            effects.append(Send(direction, Resume(epoch)))
            if (direction, epoch) in self._resumes:
                self._pauses[direction].discard(("ckpt", epoch))
        self._marks = {m for m in self._marks if m[1] > epoch}
        self._resumes = {m for m in self._resumes if m[1] > epoch}
        self._sync_pauses()
        return effects + self.push()

    # --- chain changes (at the tail) ---

    def link_new_tail(self, new_id: int) -> list:
        """This tail gets a right neighbour (an added worker): Link first, then R may flow to it."""
        if not self.is_tail:
            raise ChainProtocolError(f"node {self.id} is not the tail; workers are added at the tail")
        self.right = new_id
        self.worker.has_right, self.worker.known_right_r = True, 0
        return [Send(RIGHT, Link(self.seq["S"], self.last_ts["S"]))] + self.push()

    def accept_link(self, sender: int, link: Link) -> list:
        """The old tail linked this new node: it is the tail now, S is numbered on from the old tail's count."""
        if self.left is not None or self.right is not None:
            raise ChainProtocolError(f"node {self.id} is linked already; only a new tail accepts a Link")
        self.left = sender
        self.worker.has_left, self.worker.known_left_s = True, 0
        self.entry.seq["S"], self.entry.last_ts["S"] = link.s_seq, link.s_last_ts
        return self.push()

    def retire(self) -> list:
        """This tail merges into its left neighbour: no more blocks left; once the link is empty, Handoff."""
        if not self.is_tail or self.left is None:
            raise ChainProtocolError(f"node {self.id} is not a tail with a left neighbour; only such a tail retires")
        self.retiring = True
        self._pauses[LEFT].add("merge")
        self._sync_pauses()
        self.tokens["S"].clear()  # its rounds end with it; the inputs they covered are flushed by the new tail's
        return self._after([Send(LEFT, Quiet())])

    def _absorb_tail(self, state: dict) -> list:
        out = self.absorb(state)
        self.right = None
        self.worker.has_right, self.worker.known_right_r = False, 0
        self._pauses[RIGHT].discard("merge")
        self._sync_pauses()
        return out + self.push()

    # --- state ---

    def snapshot(self) -> dict:
        """msgpack-ready state; only when quiet() (checkpoints) or retiring (no block in flight)."""
        return {"worker": self.worker.snapshot(), "seq": dict(self.entry.seq),
                "last_ts": dict(self.entry.last_ts), "late": self.entry.late}

    def restore(self, state: dict) -> None:
        self.worker.restore(state["worker"])
        self._adopt_counters(state)

    def absorb(self, state: dict) -> list[Joined]:
        """Merge the state of the node to this one's right into this one (ChainWorker.absorb): the pairs
        the two had not compared come back."""
        right = ChainWorker(self.worker.queries, self.worker.window, self.worker.zeta, self.worker.max_inflight)
        right.restore(state["worker"])
        out = self.worker.absorb(right)
        self._adopt_counters(state)
        return out

    def _adopt_counters(self, state: dict) -> None:
        self.adopt_sequences(state)
        self.entry.late += int(state.get("late", 0))

    def adopt_sequences(self, state: dict) -> None:
        """Sequence numbers and stream clocks never go back: take the larger of each (a restored chain's
        tail numbers S on from the checkpoint's last worker, whichever worker that was)."""
        entry = self.entry
        for side in ("R", "S"):
            entry.seq[side] = max(entry.seq[side], int(state["seq"][side]))
            theirs = state["last_ts"][side]
            if theirs is not None and (entry.last_ts[side] is None or theirs > entry.last_ts[side]):
                entry.last_ts[side] = theirs

    def stored(self) -> tuple[int, int]:
        w = self.worker
        return len(w.r) + sum(map(len, w.sent_right.values())), len(w.s) + sum(map(len, w.sent_left.values()))

