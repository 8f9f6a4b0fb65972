"""BoltHarness: run one bolt instance without a topology, as the runtime would.

    from esault.testing.harness import BoltHarness

    with BoltHarness(MySink, params={"table": "t"}, data_dir=tmp_path) as h:
        h.feed("k", 1)
        h.wait_acked(1, timeout=10)
    assert h.emitted == []

The harness opens the bolt with a TopologyContext, calls process() with real
Tuples on the calling thread, records what the bolt emits, and hands out
anchors from defer() that record ack()/fail() from any thread. Waits are on a
condition with a timeout, never on a sleep.
"""

from __future__ import annotations

import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Iterable

from esault.clock import ManualClock
from esault.dsl.context import TopologyContext
from esault.datapath.pe_services import PeServices
from esault.dsl.tuple import Tuple


class HarnessAnchor:
    """An anchor handed out by defer(): records ack()/fail(reason); thread-safe."""

    __slots__ = ("tuple", "acked", "failed", "reason", "settle_count", "_harness")

    def __init__(self, harness: "BoltHarness", tup: Tuple) -> None:
        self._harness = harness
        self.tuple = tup
        self.acked = False
        self.failed = False
        self.reason: str | None = None
        self.settle_count = 0

    @property
    def settled(self) -> bool:
        return self.acked or self.failed

    def ack(self) -> None:
        self._harness._settle(self, None)

    def fail(self, reason: str) -> None:
        self._harness._settle(self, reason)

    def __repr__(self) -> str:
        state = "acked" if self.acked else f"failed({self.reason!r})" if self.failed else "pending"
        return f"<HarnessAnchor key={self.tuple.key!r} {state}>"


class BoltHarness:
    """Open `bolt_class(**params)` with a TopologyContext and drive it by hand.

    emitted: (key, value) pairs the bolt emitted, in order. anchors: every
    HarnessAnchor created by defer(), in order. double_settled: anchors acked or
    failed more than once (a bug in the bolt). The first settle wins.
    """

    def __init__(
        self,
        bolt_class: type,
        params: dict[str, Any] | None = None,
        data_dir: str | Path | None = None,
        unit: str = "b",
        topology: str = "t",
        spu_id: int = 0,
        per_key: bool = False,
        key: Any = None,
        source: str = "src",
        open: bool = True,
        guarantee: str = "at_least_once",
        clock: Any = None,
    ) -> None:
        self.params = dict(params or {})
        if data_dir is None:
            data_dir = tempfile.mkdtemp(prefix="esault-harness-")
        self.data_dir = Path(data_dir)
        self.context = TopologyContext(
            topology=topology, unit=unit, spu_id=spu_id, data_dir=self.data_dir,
            params=dict(self.params), key=key, per_key=per_key, guarantee=guarantee,
        )
        self.source = source
        self.bolt = bolt_class(**self.params)
        if per_key:
            self.bolt.key = key
        self.emitted: list[tuple[Any, Any]] = []
        self.anchors: list[HarnessAnchor] = []
        self.double_settled: list[HarnessAnchor] = []
        self._cond = threading.Condition()
        self._current: Tuple | None = None
        self._fed: list[HarnessAnchor] = []
        self._acked = 0
        self._failed = 0
        self.opened = False
        self.closed = False
        self.finished = False
        self.bolt._esault_emit = self._emit
        self.clock = clock if clock is not None else ManualClock()
        """The bolt's now() and the time tick() passes: a ManualClock unless given."""
        self.services = PeServices(self.clock)
        self.bolt._esault_spu = self.services
        if open:
            self.open()

    # -- driving the bolt ------------------------------------------------------

    def open(self) -> None:
        """Call bolt.open(context) (done by the constructor unless open=False)."""
        if self.opened:
            raise RuntimeError("BoltHarness.open(): the bolt is already open")
        self.bolt.open(self.context)
        self.opened = True

    def feed(self, key: Any, value: Any, source: str | None = None) -> list[HarnessAnchor]:
        """Call process() with Tuple(key, value, source) on this thread.

        Returns the anchors the bolt deferred during this call. An exception
        from process() propagates (the runtime would fail the tuple).
        """
        if not self.opened or self.closed:
            raise RuntimeError("BoltHarness.feed(): the bolt is not open (construct with open=True, or close()d)")
        tup = Tuple(key, value, source or self.source)
        self._current = tup
        self._fed = []
        self.bolt._esault_defer = self._defer
        try:
            self.bolt.process(tup)
        finally:
            self.bolt._esault_defer = None
            self._current = None
        return self._fed

    def feed_many(self, pairs: Iterable[tuple[Any, Any]]) -> list[HarnessAnchor]:
        out: list[HarnessAnchor] = []
        for key, value in pairs:
            out.extend(self.feed(key, value))
        return out

    def tick(self) -> bool:
        """Call on_tick(clock.now()) if the bolt asked for ticks (want_ticks); True if it did."""
        if self.bolt.key not in self.services.ticking:
            return False
        self.bolt.on_tick(self.clock.now())
        return True

    def finish(self) -> None:
        """Call bolt.finish() once: the end of the input (what it emits joins `emitted`)."""
        if self.opened and not self.finished:
            self.finished = True
            self.bolt.finish()

    def close(self) -> None:
        """Call bolt.close() once, after finish() if the test did not call it (as the runtime does at a stop
        without checkpoints)."""
        if self.opened and not self.closed:
            self.finish()
            self.closed = True
            self.bolt.close()

    def __enter__(self) -> "BoltHarness":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- the runtime's side ------------------------------------------------------

    def _emit(self, key: Any, value: Any) -> None:
        self.emitted.append((key, value))

    def _defer(self) -> HarnessAnchor:
        assert self._current is not None
        anchor = HarnessAnchor(self, self._current)
        with self._cond:
            self.anchors.append(anchor)
        self._fed.append(anchor)
        return anchor

    def _settle(self, anchor: HarnessAnchor, reason: str | None) -> None:
        with self._cond:
            anchor.settle_count += 1
            if anchor.settle_count > 1:
                self.double_settled.append(anchor)
                return
            if reason is None:
                anchor.acked = True
                self._acked += 1
            else:
                anchor.failed = True
                anchor.reason = reason
                self._failed += 1
            self._cond.notify_all()

    # -- observing -------------------------------------------------------------

    @property
    def acked_count(self) -> int:
        with self._cond:
            return self._acked

    @property
    def failed_count(self) -> int:
        with self._cond:
            return self._failed

    @property
    def pending(self) -> list[HarnessAnchor]:
        with self._cond:
            return [a for a in self.anchors if not a.settled]

    def failures(self) -> list[tuple[Any, str | None]]:
        """(key, reason) of every failed anchor."""
        with self._cond:
            return [(a.tuple.key, a.reason) for a in self.anchors if a.failed]

    def wait_acked(self, n: int, timeout: float = 10.0) -> None:
        """Block until at least n anchors are acked; TimeoutError says how far it got."""
        self._wait(lambda: self._acked >= n, timeout, f"{n} acked anchors")

    def wait_settled(self, timeout: float = 10.0) -> None:
        """Block until every anchor handed out so far is acked or failed."""
        self._wait(lambda: self._acked + self._failed >= len(self.anchors), timeout, "every anchor settled")

    def _wait(self, done: Any, timeout: float, what: str) -> None:
        end = time.monotonic() + timeout
        with self._cond:
            while not done():
                left = end - time.monotonic()
                if left <= 0:
                    raise TimeoutError(
                        f"BoltHarness: waited {timeout}s for {what}; anchors: {len(self.anchors)}, "
                        f"acked {self._acked}, failed {self._failed}"
                        + (f" (first failure: {self.failures()[0][1]})" if self._failed else "")
                    )
                self._cond.wait(left)
