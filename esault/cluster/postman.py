"""Postman: one per process; names its actors so messages can name them across processes.

Local actors (Pykka refs) are registered under a name ("acker", "unit-count",
"spu-17"); the wire codec turns a registered ref into Address(process, name)
and an incoming Address back into a local ref or a RemoteMailbox. A message
for a name that is still being started is held and handed over, in order,
when the actor is registered, so nothing overtakes it.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections import defaultdict
from typing import Any, Callable

from esault.errors import SerializationError
from esault.transport.address import Address
from esault.transport.endpoint import Endpoint, RemoteMailbox
from esault.transport.wire import WireCodec

log = logging.getLogger("esault.cluster")

_MAX_HELD = 100_000


class Postman:
    """Endpoint + the registry of this process's named actors."""

    def __init__(self, process: str, bind: str = "tcp://127.0.0.1:0") -> None:
        self.process = process
        self._lock = threading.Lock()
        self._refs: dict[str, Any] = {}
        self._names: dict[str, str] = {}  # actor_urn -> name
        self._held: dict[str, list[Any]] = defaultdict(list)
        self.fallback: Callable[[str, Any], None] | None = None
        codec = WireCodec(to_address=self.address_of, from_address=self.mailbox_for)
        self.endpoint = Endpoint(process, self._deliver, bind=bind, codec=codec)

    @property
    def address(self) -> str:
        """Where peers reach this process: the bound address, with a wildcard host replaced by
        this machine's host name (e.g. a docker-compose service name)."""
        address = self.endpoint.address
        if "://0.0.0.0:" in address or "://*:" in address:
            port = address.rsplit(":", 1)[1]
            return f"tcp://{socket.gethostname()}:{port}"
        return address

    def register(self, name: str, ref: Any) -> None:
        """Name a local actor; messages held for it are told first, in arrival order."""
        with self._lock:
            for message in self._held.pop(name, ()):
                ref.tell(message)
            self._refs[name] = ref
            self._names[ref.actor_urn] = name

    def start_and_register(self, name: str, start: Callable[[], Any]) -> Any:
        """Start an actor and register it atomically with deliveries (no message can overtake)."""
        with self._lock:
            ref = start()
            for message in self._held.pop(name, ()):
                ref.tell(message)
            self._refs[name] = ref
            self._names[ref.actor_urn] = name
            return ref

    def unregister(self, name: str) -> None:
        with self._lock:
            ref = self._refs.pop(name, None)
            if ref is not None:
                self._names.pop(ref.actor_urn, None)

    def local(self, name: str) -> Any:
        with self._lock:
            return self._refs.get(name)

    def connect(self, process: str, address: str) -> None:
        if process != self.process:
            self.endpoint.connect(process, address)

    def remote(self, process: str, actor: str) -> RemoteMailbox:
        return self.endpoint.mailbox(Address(process, actor))

    def send(self, process: str, actor: str, message: Any, timeout: float | None = None) -> None:
        self.endpoint.send(Address(process, actor), message, timeout=timeout)

    # --- the codec's hooks -----------------------------------------------------

    def address_of(self, mailbox: Any) -> Address:
        named = getattr(mailbox, "address", None)
        if type(named) is Address:  # a RemoteMailbox or a _LocalName
            return named
        name = self._names.get(getattr(mailbox, "actor_urn", None))
        if name is None:
            raise SerializationError(
                f"{mailbox!r} is not a registered actor of process {self.process!r}: register it with the "
                "postman before sending its mailbox to another process"
            )
        return Address(self.process, name)

    def mailbox_for(self, address: Address) -> Any:
        if address.process == self.process:
            return _LocalName(self, address.actor)
        return self.endpoint.mailbox(address)

    def _deliver(self, actor: str, message: Any) -> None:
        """Runs on the endpoint's I/O thread: hand over, never block."""
        with self._lock:
            ref = self._refs.get(actor)
            if ref is None:
                held = self._held[actor]
                if len(held) >= _MAX_HELD:
                    log.error("process %r: dropping a %s for unknown actor %r (%d held)", self.process,
                              type(message).__name__, actor, len(held))
                    return
                held.append(message)
                return
        try:
            ref.tell(message)
        except Exception as exc:  # the actor stopped meanwhile
            log.warning("process %r: %s for %r not delivered: %r", self.process, type(message).__name__, actor, exc)

    def close(self) -> None:
        self.endpoint.close()


class _LocalName:
    """A mailbox of this process named in a received message; resolved at tell time."""

    __slots__ = ("_postman", "name", "address")

    def __init__(self, postman: Postman, name: str) -> None:
        self._postman = postman
        self.name = name
        self.address = Address(postman.process, name)

    def tell(self, message: Any) -> None:
        self._postman._deliver(self.name, message)

    @property
    def actor_urn(self) -> str:
        return f"name:{self.name}"

    def __repr__(self) -> str:
        return f"LocalName({self.address})"
