"""`esault status HOST:PORT`: ask a running driver for its jobs' status over pyzmq."""

from __future__ import annotations

import itertools
import os
import secrets
import threading
from typing import Any, Callable

from esault.cluster.addresses import bind_host_toward, split_host_port
from esault.cluster.credentials import WorkerKeys, read_status_keys, status_key_file
from esault.cluster.postman import Postman
from esault.transport.trust import KeyRing, Role
from esault.errors import ConfigError
from esault.messages.cluster import SavepointReply, SavepointRequest, StatusReply, StatusRequest


_calls = itertools.count(1)


class _Inbox:
    """A mailbox that keeps the one reply this client waits for."""

    def __init__(self, kind: type) -> None:
        self.kind = kind
        self.reply: Any = None
        self.arrived = threading.Event()
        self.actor_urn = "status-inbox"

    def tell(self, message: object) -> None:
        if isinstance(message, self.kind):
            self.reply = message
            self.arrived.set()


def fetch_status(address: str, timeout: float = 10.0, keys: WorkerKeys | None = None,
                 advertise: str | None = None) -> StatusReply:
    """The driver's StatusReply, or ConfigError saying that nothing answered at `address`.

    `keys`: a status client's key pair (as `own`) and the driver's public key;
    default: the ones a local driver at `address` left for this user. The
    driver connects back for the reply: to the interface that routes to it
    (loopback for a local driver), or to `advertise` (HOST[:PORT]; then this
    client listens on all interfaces, at PORT if given).
    """
    return ask_driver(address, lambda inbox, me: StatusRequest(1, inbox, me), StatusReply, timeout, keys, advertise)


def request_savepoint(address: str, topology: str, stop: bool = False, timeout: float = 120.0,
                      keys: WorkerKeys | None = None, advertise: str | None = None) -> SavepointReply:
    """Ask the driver at `address` for a savepoint of job `topology` (ending its spouts if `stop`)."""
    return ask_driver(address, lambda inbox, me: SavepointRequest(1, inbox, me, topology, stop), SavepointReply,
                timeout, keys, advertise)


def ask_driver(address: str, request: Callable[[Any, str], Any], reply: type, timeout: float,
               keys: WorkerKeys | None, advertise: str | None, name_prefix: str = "status",
               role: Role = Role.CLIENT, unanswered: str | None = None) -> Any:
    """One request to the driver's cluster actor from a short-lived process of its own, and its one reply:
    `esault status`, a savepoint, a replica's enrollment."""
    driver_host, _ = split_host_port(address, "the driver's address")
    if advertise:
        port = split_host_port(advertise, "--advertise", port_required=False)[1] or 0
        bind = f"tcp://0.0.0.0:{port}"
    else:
        bind = f"tcp://{bind_host_toward(driver_host)}:0"
    keys = keys or read_status_keys(address)
    if keys is None:
        raise ConfigError(f"no status key for the driver at {address}: a driver started by this user on this "
                          f"machine leaves one in {status_key_file(address)}; for a static cluster pass "
                          "--secret-key client-N.key_secret --driver-key driver.key (from `esault keys generate`)")
    name = f"{name_prefix}-{os.getpid()}-{next(_calls)}-{secrets.token_hex(4)}"
    ring = KeyRing(keys.own, name, role)
    ring.admit(keys.driver, Role.DRIVER, "driver")
    postman = Postman(name, bind=bind, keys=ring, advertise=advertise)
    inbox = _Inbox(reply)
    postman.register("status", inbox)
    try:
        postman.connect("driver", address if address.startswith("tcp://") else f"tcp://{address}")
        postman.send("driver", "cluster", request(inbox, postman.address), timeout=timeout)
        if not inbox.arrived.wait(timeout):
            raise ConfigError(unanswered or f"no esault driver answered at {address} within {timeout}s; is `esault "
                              "run` running there with --listen, and does it admit this client's key?")
        return inbox.reply
    except TimeoutError:
        raise ConfigError(f"could not reach an esault driver at {address}") from None
    finally:
        postman.close()
