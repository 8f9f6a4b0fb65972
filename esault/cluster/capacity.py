"""The driver's capacity keeper: workers asked for when new SPUs have no room, given back when idle.

A split (or a rescale up, or an assignment with new SPUs) first reserves room for its new SPUs here. Room
is the placement rule's (esault.cluster.placement) over the SPUs each live worker hosts. When there is too
little, the keeper asks its provider (esault.cluster.providers) for the workers that are short and the
reservation waits for them to join, up to `worker_wait` seconds; it is declined, with the reason, when the
provider cannot grow or nobody joined in time, and the job goes on at the layout it has (never a stall:
the waiting is on a future, not on the job's control thread). A worker that hosted no SPU for
`release_after` seconds, above the provider's floor, is told to exit and given back to its provider.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Callable

from esault.cluster.placement import Placement
from esault.cluster.providers.base import WorkerOrigin, WorkerProvider, WorkerRequest
from esault.errors import ConfigError, ResourceError, ScalingError

log = logging.getLogger("esault.cluster")


ASK_AGAIN = 3
"""Times a reservation asks again for a worker that ended before it joined (a Ray node that died as the
actor was placed on it): then it is declined, not left to its deadline."""


@dataclass(slots=True)
class _Reservation:
    spus: int
    reason: str
    deadline: float
    future: Future
    asked_again: int = 0


class Capacity:
    """Joins a provider, the worker registry's SPU counts and a placement rule. Thread-safe: jobs' control
    threads reserve, the cluster actor ticks; both only under the keeper's lock, and neither blocks in it."""

    def __init__(self, provider: WorkerProvider, counts: Callable[[], dict[str, int]],
                 retire: Callable[[str], None], placement: Placement | None = None,
                 worker_wait: float = 60.0, release_after: float = 30.0, join_timeout: float = 120.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        for name, value in (("worker_wait", worker_wait), ("release_after", release_after),
                            ("join_timeout", join_timeout)):
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
                raise ConfigError(f"{name} must be seconds >= 0, got {value!r}")
        self.provider = provider
        self.placement = placement or Placement()
        self.worker_wait = float(worker_wait)
        self.release_after = float(release_after)
        self.join_timeout = float(join_timeout)
        self._counts = counts
        """Live workers (joined, not leaving) -> the SPUs each hosts now."""
        self._retire = retire
        """Tells a worker to exit and forgets it (the registry's side of giving it back)."""
        self._clock = clock
        self._lock = threading.Lock()
        self._arrivals = threading.Condition(self._lock)
        """Notified as a worker joins (await_a_worker waits on it)."""
        self._waiting: list[_Reservation] = []
        self.pending: dict[str, WorkerRequest] = {}
        """Workers asked for that have not joined yet, by the name they will join under."""
        self._asked_at: dict[str, float] = {}
        self._idle_since: dict[str, float] = {}
        self._names = itertools.count(1)
        self.declined: list[str] = []
        """Why reservations were declined, newest last (bounded): the status views show the latest."""
        self.released: list[str] = []

    # --- reserving room ------------------------------------------------------

    def reserve(self, spus: int, reason: str) -> Future:
        """A future done once `spus` new SPUs have room; its exception (ScalingError) says why they never will."""
        future: Future = Future()
        with self._lock:
            counts = self._counts()
            if spus <= 0 or self.placement.free(counts, len(self.pending)) >= spus:
                future.set_result(None)
                return future
            needed = self.placement.workers_needed(counts, spus, len(self.pending))
            live = len(counts) + len(self.pending)
            why = self.provider.cannot_grow(live + needed - 1)
            if why is not None:
                self._decline(future, f"{reason}: {needed} more worker(s) needed for {spus} new SPU(s) "
                                      f"({self._layout(counts)}), but {why}")
                return future
            try:
                for _ in range(needed):
                    self._ask(reason)
            except ResourceError as exc:
                self._decline(future, f"{reason}: the {self.provider.kind} provider could not start a worker: {exc}")
                return future
            self._waiting.append(_Reservation(spus, reason, self._clock() + self.worker_wait, future))
        return future

    def has_workers(self) -> bool:
        """True while a worker is live (joined, not leaving)."""
        return bool(self._counts())

    def await_a_worker(self, reason: str) -> bool:
        """Block until a worker is live, asking the provider for one unless one is on its way (every worker
        was lost: a rollback or replacement has nowhere to start). False when the provider can start none,
        or none joined within worker_wait."""
        if self.has_workers():
            return True
        room = self.reserve(1, reason)  # with no worker live it is room only once one is asked for
        deadline = self._clock() + self.worker_wait
        with self._arrivals:
            while not self._counts():
                left = deadline - self._clock()
                if left <= 0 or (room.done() and room.exception() is not None):
                    return False
                self._arrivals.wait(min(left, 1.0))
        return True

    def _ask(self, reason: str) -> None:
        while True:
            name = f"{self.provider.kind}-{next(self._names)}"
            if name not in self._counts() and name not in self.pending:
                break
        request = WorkerRequest(name, reason)
        self.provider.request(request)
        self.pending[name] = request
        self._asked_at[name] = self._clock()
        log.info("asked the %s provider for worker %s: %s", self.provider.kind, name, reason)

    def _decline(self, future: Future, why: str) -> None:
        message = f"declined: {why}; the job goes on at its layout"
        log.warning("%s", message)
        self.declined = (self.declined + [message])[-20:]
        future.set_exception(ScalingError(message))

    def _layout(self, counts: dict[str, int]) -> str:
        budget = self.placement.spus_per_worker
        shown = ", ".join(f"{w}: {n}" for w, n in sorted(counts.items())) or "no worker"
        return f"{shown}; {budget} SPUs a worker" if budget is not None else shown

    # --- the cluster's clock and its workers' comings and goings ------------------

    def joined(self, worker: str) -> None:
        """`worker` joined the driver: a pending request is answered, reservations that now fit go on."""
        with self._lock:
            self.pending.pop(worker, None)
            self._asked_at.pop(worker, None)
            self._settle()
            self._arrivals.notify_all()

    def lost(self, worker: str) -> None:
        """`worker` died (joined or not): a reservation still short of room asks again for one that never
        joined, up to ASK_AGAIN times, and is declined after that."""
        with self._lock:
            unborn = self.pending.pop(worker, None) is not None
            self._asked_at.pop(worker, None)
            self._idle_since.pop(worker, None)
            if unborn:
                self._ask_again(worker)
        self.provider.lost(worker)

    def _ask_again(self, ended: str) -> None:
        """A worker asked for ended before its hello (lock held): replace it for the first reservation that
        still needs it."""
        counts = self._counts()
        for reservation in self._waiting:
            if reservation.future.done():
                continue
            if self.placement.workers_needed(counts, reservation.spus, len(self.pending)) == 0:
                return
            if reservation.asked_again >= ASK_AGAIN:
                self._decline(reservation.future, f"{reservation.reason}: the worker(s) asked for ended before "
                                                  f"they joined, {ASK_AGAIN + 1} times (the last: {ended})")
                continue
            reservation.asked_again += 1
            try:
                self._ask(f"{reservation.reason} (again: {ended} ended before it joined)")
            except ResourceError as exc:
                self._decline(reservation.future, f"{reservation.reason}: the {self.provider.kind} provider could "
                                                  f"not start a worker: {exc}")
            return

    def tick(self) -> None:
        """Periodically (the cluster actor's tick): settle reservations, give up on workers that never joined,
        give back idle ones."""
        idle: list[str] = []
        with self._lock:
            now = self._clock()
            self._settle()
            for name in [n for n, at in self._asked_at.items() if now - at > self.join_timeout]:
                log.warning("worker %s, asked of the %s provider %.0f s ago, never joined: given up", name,
                            self.provider.kind, now - self._asked_at[name])
                self.pending.pop(name, None)
                self._asked_at.pop(name, None)
                idle.append(name)
            idle.extend(self._idle_workers(now))
        for worker in idle:  # outside the lock: telling a worker to exit sends a message
            self._give_back(worker)

    def _settle(self) -> None:
        """Answer waiting reservations in order while they fit; expire those past their deadline (lock held)."""
        counts = self._counts()
        free = self.placement.free(counts)
        still: list[_Reservation] = []
        for reservation in self._waiting:
            if reservation.future.done():  # withdrawn
                continue
            if free >= reservation.spus:
                free -= reservation.spus
                reservation.future.set_result(None)
            elif self._clock() >= reservation.deadline:
                pending = ", ".join(sorted(self.pending)) or "none"
                self._decline(reservation.future,
                              f"{reservation.reason}: no room for {reservation.spus} new SPU(s) within "
                              f"worker_wait={self.worker_wait:g}s ({self._layout(counts)}; asked of the "
                              f"{self.provider.kind} provider and not joined: {pending})")
            else:
                still.append(reservation)
        self._waiting = still

    def _idle_workers(self, now: float) -> list[str]:
        counts = self._counts()
        for worker in list(self._idle_since):
            if counts.get(worker, 1) > 0:
                del self._idle_since[worker]
        for worker, n in counts.items():
            if n == 0:
                self._idle_since.setdefault(worker, now)
        spare = len(counts) - self.provider.floor
        if spare <= 0 or self._waiting:
            return []
        due = [w for w, since in self._idle_since.items() if now - since >= self.release_after]
        due.sort(key=self._newest_first)  # the ones asked for on demand go first, the pool's own last
        chosen = due[:spare]
        for worker in chosen:
            del self._idle_since[worker]
        return chosen

    def _newest_first(self, worker: str) -> tuple[float, str]:
        origin = self.provider.origin(worker)
        return (-(origin.started_at if origin is not None else 0.0), worker)

    def _give_back(self, worker: str) -> None:
        try:
            self._retire(worker)
        except Exception:  # noqa: BLE001 - a worker that cannot be told exits after its driver timeout
            log.exception("worker %s: could not be told to exit", worker)
        try:
            self.provider.release(worker)
        except Exception:  # noqa: BLE001 - the provider's own error; the worker was told to exit already
            log.exception("the %s provider failed to release worker %s", self.provider.kind, worker)
        with self._lock:
            self.released = (self.released + [worker])[-100:]
        log.info("worker %s hosted no SPU for %.0f s: given back to the %s provider", worker, self.release_after,
                 self.provider.kind)

    # --- what the status views show ------------------------------------------

    def origin(self, worker: str) -> WorkerOrigin | None:
        return self.provider.origin(worker)

    def view(self) -> dict:
        """The provider, its pending requests and the latest declined reservation, for status views."""
        with self._lock:
            now = time.time()
            return {"provider": self.provider.kind,
                    "spus_per_worker": self.placement.spus_per_worker,
                    "pending": [{"worker": r.name, "reason": r.reason, "waiting_s": round(now - r.asked_at, 1)}
                                for r in self.pending.values()],
                    "declined": self.declined[-1] if self.declined else None}

    def shutdown(self) -> None:
        with self._lock:
            for reservation in self._waiting:
                if not reservation.future.done():
                    reservation.future.set_exception(ScalingError("the cluster shuts down"))
            self._waiting = []
        self.provider.shutdown()
