"""A worker's host actor behind a real postman that admits one driver key: where driver commands land."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from esault.cluster.postman import Postman
from esault.cluster.worker import DriverLiveness, HostActor, WorkerControl
from esault.transport.keys import KeyPair
from esault.transport.trust import Identity, KeyRing, Role


@contextmanager
def worker_host(control: bool = False) -> Iterator[tuple[Postman, Any, Identity]]:
    """(postman of worker "w1", its host actor's ref, the driver's identity); `control` also registers the
    worker's control mailbox (PeerGone, ReportNow)."""
    driver = KeyPair.generate()
    keys = KeyRing(KeyPair.generate(), "w1", Role.WORKER)
    keys.admit(driver.public, Role.DRIVER, "driver")
    postman = Postman("w1", keys=keys)
    ref = postman.start_and_register("host", lambda: HostActor.start(postman, threading.Event()))
    if control:
        postman.register("control", WorkerControl(postman, DriverLiveness()))
    try:
        yield postman, ref, Identity(driver.public.decode(), Role.DRIVER, "driver")
    finally:
        ref.stop()
        postman.close()
