"""Replica workers: many processes started from one credential, each named and keyed by the driver.

A Deployment, a KubeRay worker group or `podman-compose up --scale worker=N` starts identical containers, so
they cannot each hold a key of their own. They share an enrollment key pair instead (`esault keys generate
DIR --enroll`); the driver admits its public key with the ENROLL role, which may send one thing: an
EnrollRequest. The driver answers it with a fresh worker name and key pair, sent inside the CurveZMQ session
to the address the request gave (whose server key must be the enrollment key). The replica then joins as any
worker does, under its own key: from there on it is a worker like the others, and a worker's per-connection
session stays authenticated by its own key. What a holder of the enrollment secret can do is in
docs/SECURITY.md: enroll up to `max_enrollments` workers, no more.
"""

from __future__ import annotations

import itertools
import logging
import threading

from esault.cluster.credentials import WorkerKeys
from esault.errors import ConfigError
from esault.messages.cluster import Enrolled, EnrollRequest
from esault.transport.keys import KeyPair
from esault.transport.trust import KeyRing, Role

log = logging.getLogger("esault.cluster")

DEFAULT_MAX_ENROLLMENTS = 256
"""Worker identities one driver hands out to enrollment requests in its life (a replica that restarts takes a
new one); past it, requests are refused with the reason, so a leaked enrollment secret cannot mint keys
without bound."""


class Enrollments:
    """The driver's side: a name and a fresh key pair per request, admitted as a worker's. Thread-safe."""

    def __init__(self, ring: KeyRing, limit: int = DEFAULT_MAX_ENROLLMENTS) -> None:
        if type(limit) is not int or limit < 0:
            raise ConfigError(f"max_enrollments must be a whole number >= 0, got {limit!r}")
        self.ring = ring
        self.limit = limit
        self._numbers = itertools.count(1)
        self._lock = threading.Lock()
        self.granted: list[str] = []

    def grant(self, request: EnrollRequest) -> Enrolled:
        """The answer to one request: a name no worker holds and a key pair admitted for it, or why not."""
        with self._lock:
            if len(self.granted) >= self.limit:
                log.warning("enrollment refused: %d worker identities handed out already (max_enrollments)",
                            len(self.granted))
                return Enrolled(request.request_id, "", "", "",
                                f"this driver handed out its {self.limit} enrollments (max_enrollments); restart "
                                "it with a higher limit, or give the worker a key of its own")
            while True:
                name = f"replica-{next(self._numbers)}"
                if self.ring.key_of(name) is None:
                    break
            pair = KeyPair.generate()
            self.ring.admit(pair.public, Role.WORKER)  # bound to `name` by its hello, as any worker's key
            self.granted.append(name)
        log.info("enrolled a replica worker as %s (answer to %s)", name, request.address)
        return Enrolled(request.request_id, name, pair.public.decode(), pair.secret.decode(), "")


def enroll(driver: str, keys: WorkerKeys, timeout: float = 30.0, advertise: str | None = None) -> tuple[str, WorkerKeys]:
    """The replica's side: ask the driver at `driver` (HOST:PORT) for a worker name and key pair, using the
    shared enrollment pair `keys.own`; returns (name, the worker's own keys). ConfigError says why not."""
    from esault.cluster.status import ask_driver

    reply = ask_driver(driver, lambda inbox, me: EnrollRequest(1, inbox, me), Enrolled, timeout, keys, advertise,
                       name_prefix="enroll", role=Role.ENROLL,
                       unanswered=f"no esault driver answered the enrollment at {driver} within {timeout}s; is it "
                                  "running with --enroll-key naming this enrollment key's public half?")
    if reply.error:
        raise ConfigError(f"the driver at {driver} refused the enrollment: {reply.error}")
    try:
        own = KeyPair(reply.public.encode("ascii"), reply.secret.encode("ascii"))
    except (UnicodeEncodeError, ValueError) as exc:
        raise ConfigError(f"the driver's enrollment answer holds no usable key pair ({exc})") from None
    return reply.name, WorkerKeys(own, keys.driver)
