"""`esault status HOST:PORT`: ask a running driver for its jobs' status over pyzmq."""

from __future__ import annotations

import itertools
import os
import threading

from esault.cluster.postman import Postman
from esault.errors import ConfigError
from esault.runtime.messages import StatusReply, StatusRequest


_calls = itertools.count(1)


class _Inbox:
    """A mailbox that keeps the one reply this client waits for."""

    def __init__(self) -> None:
        self.reply: StatusReply | None = None
        self.arrived = threading.Event()
        self.actor_urn = "status-inbox"

    def tell(self, message: object) -> None:
        if isinstance(message, StatusReply):
            self.reply = message
            self.arrived.set()


def fetch_status(address: str, timeout: float = 10.0) -> StatusReply:
    """The driver's StatusReply, or ConfigError saying that nothing answered at `address`."""
    if ":" not in address:
        raise ConfigError(f"esault status needs the driver's HOST:PORT, got {address!r}")
    postman = Postman(f"status-{os.getpid()}-{next(_calls)}")
    inbox = _Inbox()
    postman.register("status", inbox)
    try:
        postman.connect("driver", address if address.startswith("tcp://") else f"tcp://{address}")
        postman.send("driver", "cluster", StatusRequest(1, inbox, postman.address), timeout=timeout)
        if not inbox.arrived.wait(timeout):
            raise ConfigError(f"no esault driver answered at {address} within {timeout}s; is `esault run` running "
                              "there with --listen?")
        return inbox.reply
    except TimeoutError:
        raise ConfigError(f"could not reach an esault driver at {address}") from None
    finally:
        postman.close()
