"""AckTracker: Storm's XOR tuple-tree tracking, the core of the ack server.

Every tuple edge of a tree rooted at a spout tuple gets a random 64-bit id.
The spout starts the tree with the XOR of the root's edge ids; each bolt, when
it acks a tuple, sends that tuple's edge id XOR the ids of the tuples it
emitted anchored to it. Every edge id is XORed in exactly twice (once when it
is emitted, once when it is acked), so the tree's value returns to 0 exactly
when every edge is acked (a false 0 has probability ~2**-64 per message).

Messages may arrive in any order: updates for a root whose start has not yet
arrived are kept in an un-started entry and combined; a tree completes only
once started. All operations are O(1) amortised; expire() is O(expired).
Not thread-safe: one actor owns a tracker.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Hashable, Iterable

from esault.clock import Clock
from esault.errors import ConfigError

__all__ = ["AckTracker", "TreeOutcome"]

_UNSTARTED = 0  # updates seen, start not yet
_UNSTARTED_FAILED = 1  # a fail arrived before start: report it when start arrives
_STARTED = 2  # pending
_COMPACT_SLACK = 4096
_FAILED = 3  # outcome reported; remembered until the deadline to swallow late updates


@dataclass(frozen=True, slots=True)
class TreeOutcome:
    """The final word on one tuple tree, for its owner (the spout SPU)."""

    root: int
    owner: Hashable
    ok: bool
    reason: str | None
    latency: float
    """Seconds from start() to the outcome."""


class _Tree:
    __slots__ = ("value", "owner", "started_at", "deadline", "state", "reason")

    def __init__(self, value: int, owner: Hashable, started_at: float | None, deadline: float, state: int) -> None:
        self.value = value
        self.owner = owner
        self.started_at = started_at
        self.deadline = deadline
        self.state = state
        self.reason: str | None = None


class AckTracker:
    """Tracks tuple trees by root id; reports each tree's outcome exactly once.

    `timeout` (seconds, the job's message_timeout) bounds how long a started
    tree may stay incomplete, and how long un-started entries and failed roots
    are remembered. Root ids must be fresh per emission: a replay gets a new
    root (a second start() for a remembered root is ignored and counted).
    """

    def __init__(self, clock: Clock, timeout: float) -> None:
        if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or timeout <= 0:
            raise ConfigError(f"AckTracker timeout must be seconds > 0 (message_timeout), got {timeout!r}")
        self._clock = clock
        self._timeout = float(timeout)
        self._trees: dict[int, _Tree] = {}
        # (deadline, root, entry) in non-decreasing deadline order: the timeout
        # is constant and the clock monotonic. Stale items (entry replaced or
        # gone) are skipped when popped.
        self._deadlines: deque[tuple[float, int, _Tree]] = deque()
        self._pending = 0
        self.completed = 0
        """Trees that completed successfully."""
        self.failed = 0
        """Trees reported failed by fail() (excluding timeouts)."""
        self.timed_out = 0
        """Started trees that expired incomplete."""
        self.orphans_expired = 0
        """Un-started entries (updates or fails whose start never came) discarded at their timeout."""
        self.ignored = 0
        """Updates and fails for roots already failed, and duplicate starts."""

    @property
    def timeout(self) -> float:
        return self._timeout

    @property
    def pending(self) -> int:
        """Started trees that have neither completed nor failed."""
        return self._pending

    def __len__(self) -> int:
        """Entries held in memory (pending, un-started and remembered failed roots)."""
        return len(self._trees)

    # -------------------------------------------------------------- messages
    def start(self, root: int, owner: Hashable, xor: int) -> TreeOutcome | None:
        """Register root's tree; xor = XOR of the root's initial edge ids. O(1).

        Returns an outcome if the tree is already decided: every edge acked
        before the start arrived (or xor == 0), or a fail arrived first.
        """
        now = self._clock.now()
        tree = self._trees.get(root)
        value = xor
        if tree is not None:
            if tree.state == _UNSTARTED:
                value ^= tree.value
            elif tree.state == _UNSTARTED_FAILED:
                failed = self._remember_failed(root, owner, now, tree.reason)
                self.failed += 1
                return TreeOutcome(root, owner, False, failed.reason, 0.0)
            else:
                self.ignored += 1
                return None
        if value == 0:
            self._trees.pop(root, None)
            self.completed += 1
            return TreeOutcome(root, owner, True, None, 0.0)
        entry = _Tree(value, owner, now, now + self._timeout, _STARTED)
        self._trees[root] = entry
        self._deadlines.append((entry.deadline, root, entry))
        self._pending += 1
        return None

    def update(self, root: int, xor: int) -> TreeOutcome | None:
        """XOR an ack into root's tree; returns the outcome if this completed it. O(1)."""
        tree = self._trees.get(root)
        if tree is None:
            now = self._clock.now()
            entry = _Tree(xor, None, None, now + self._timeout, _UNSTARTED)
            self._trees[root] = entry
            self._deadlines.append((entry.deadline, root, entry))
            return None
        state = tree.state
        if state == _STARTED:
            value = tree.value ^ xor
            if value:
                tree.value = value
                return None
            del self._trees[root]
            self._pending -= 1
            self.completed += 1
            return TreeOutcome(root, tree.owner, True, None, self._clock.now() - tree.started_at)  # type: ignore[operator]
        if state == _UNSTARTED:
            tree.value ^= xor
            return None
        self.ignored += 1  # failed (reported or not yet started): the tree is decided
        return None

    def update_many(self, pairs: Iterable[tuple[int, int]]) -> list[TreeOutcome]:
        """update() for each (root, xor); the outcomes of trees that completed."""
        out = []
        update = self.update
        for root, xor in pairs:
            outcome = update(root, xor)
            if outcome is not None:
                out.append(outcome)
        return out

    def fail(self, root: int, reason: str) -> TreeOutcome | None:
        """A bolt failed a tuple of root's tree: report failure once. O(1).

        Later updates and fails for root are ignored until its deadline. A
        fail before start is held and reported when start arrives.
        """
        tree = self._trees.get(root)
        if tree is None:
            now = self._clock.now()
            entry = _Tree(0, None, None, now + self._timeout, _UNSTARTED_FAILED)
            entry.reason = reason
            self._trees[root] = entry
            self._deadlines.append((entry.deadline, root, entry))
            return None
        if tree.state == _STARTED:
            tree.state = _FAILED
            tree.reason = reason
            self._pending -= 1
            self.failed += 1
            return TreeOutcome(root, tree.owner, False, reason, self._clock.now() - tree.started_at)  # type: ignore[operator]
        if tree.state == _UNSTARTED:
            tree.state = _UNSTARTED_FAILED
            tree.reason = reason
            return None
        self.ignored += 1
        return None

    def fail_all(self, reason: str) -> list[TreeOutcome]:
        """Fail every started tree at once (a worker holding some of them died). O(trees held)."""
        out = []
        for root, tree in list(self._trees.items()):
            if tree.state == _STARTED:
                outcome = self.fail(root, reason)
                if outcome is not None:
                    out.append(outcome)
        return out

    def expire(self) -> list[TreeOutcome]:
        """Fail started trees older than timeout; forget stale entries. O(expired).

        Call on every tick. A tree started at t expires once now >= t + timeout.
        """
        now = self._clock.now()
        deadlines = self._deadlines
        trees = self._trees
        out: list[TreeOutcome] = []
        while deadlines and deadlines[0][0] <= now:
            _, root, entry = deadlines.popleft()
            if trees.get(root) is not entry:
                continue  # completed, or replaced by a started entry with a later deadline
            del trees[root]
            if entry.state == _STARTED:
                self._pending -= 1
                self.timed_out += 1
                out.append(
                    TreeOutcome(
                        root,
                        entry.owner,
                        False,
                        f"timed out after {self._timeout}s (message_timeout)",
                        now - entry.started_at,  # type: ignore[operator]
                    )
                )
            elif entry.state in (_UNSTARTED, _UNSTARTED_FAILED):
                self.orphans_expired += 1
            # _FAILED: its outcome was reported; just forget it.
        if len(deadlines) > 2 * len(trees) + _COMPACT_SLACK:
            # Completed trees leave their deadline entry behind; without this the queue would
            # grow with rate x timeout instead of with the trees actually held. Amortised O(1).
            self._deadlines = deque(d for d in deadlines if trees.get(d[1]) is d[2])
        return out

    # --------------------------------------------------------------- helpers
    def _remember_failed(self, root: int, owner: Hashable, now: float, reason: str | None) -> _Tree:
        entry = _Tree(0, owner, now, now + self._timeout, _FAILED)
        entry.reason = reason
        self._trees[root] = entry
        self._deadlines.append((entry.deadline, root, entry))
        return entry
