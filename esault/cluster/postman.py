"""Postman: one per process; names its actors so messages can name them across processes.

Local actors (Pykka refs) are registered under a name ("acker", "unit-count",
"spu-17"); the wire codec turns a registered ref into Address(process, name)
and an incoming Address back into a local ref or a RemoteMailbox. A message
for a name that is still being started is held and handed over, in order,
when the actor is registered, so nothing overtakes it; what is held is capped
in bytes (then dropped and counted), so frames for names that never start
cannot grow the process.

Every received message passes esault.cluster.authority first: the sender is
the identity its Curve key proves, and a message it may not send is dropped,
counted (esault_auth_rejected_total{reason="not_permitted"}) and logged.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Iterable

from esault.cluster.addresses import advertised
from esault.cluster.authority import ack_refusal, refusal
from esault.errors import SerializationError
from esault.metrics.registry import (count_auth_rejected, count_dropped_frame, init_auth_rejected_series,
                                     init_frame_drop_series)
from esault.messages.cluster import EnrollRequest, SavepointRequest, StatusRequest, WorkerHello
from esault.transport.address import Address
from esault.transport.endpoint import DEFAULT_MAX_FRAME_BYTES, Endpoint, RemoteMailbox
from esault.cluster.lanes import CONTROL_LANE
from esault.transport.trust import Identity, KeyRing, Role
from esault.transport.wire import WireCodec

log = logging.getLogger("esault.cluster")

DEFAULT_HELD_BYTES = 4 * 2**20
"""Bytes of frames held, in all, for actors not (yet) registered here."""
HELD_MAX_AGE = 30.0
"""Seconds after which frames held for a name that never registered may be evicted for newer ones."""


class _Held:
    __slots__ = ("messages", "size", "since")

    def __init__(self, since: float) -> None:
        self.messages: list[Any] = []
        self.size = 0
        self.since = since


class Postman:
    """Endpoint + the registry of this process's named actors."""

    def __init__(self, process: str, bind: str = "tcp://127.0.0.1:0", keys: KeyRing | None = None,
                 max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES, held_bytes: int = DEFAULT_HELD_BYTES,
                 advertise: str | None = None, toward: str | None = None) -> None:
        self.process = process
        self._advertise = advertise
        self._toward = toward
        self._address: str | None = None
        self.keys = keys or KeyRing.solo(process)
        self._lock = threading.Lock()
        self.ack_host: Callable[[int, str], str | None] | None = None
        """Where the driver placed an SPU (the driver's postman: WorkerRegistry.host_of): a worker's checkpoint
        acks are refused unless their SPUs run on it (authority.ack_refusal)."""
        self._refs: dict[str, Any] = {}
        self._names: dict[str, str] = {}  # actor_urn -> name
        self._held: dict[str, _Held] = {}
        self._held_bytes = 0
        self._held_cap = held_bytes
        self.refused: dict[str, int] = {}
        """Messages dropped here, by reason ('not_permitted', 'held_full', 'actor_stopped')."""
        init_frame_drop_series(("held_full", "actor_stopped"))
        init_auth_rejected_series(("not_permitted",))
        codec = WireCodec(to_address=self.address_of, from_address=self.mailbox_for, max_frame_bytes=max_frame_bytes)
        self.endpoint = Endpoint(process, self._deliver, bind=bind, keys=self.keys, codec=codec,
                                 max_frame_bytes=max_frame_bytes, control=CONTROL_LANE)

    @property
    def address(self) -> str:
        """Where peers reach this process: `advertise` (HOST[:PORT]) if given, else the bound address
        with a wildcard host replaced by the route toward `toward` or the host name (esault.cluster.addresses)."""
        if self._address is None:  # fixed once bound; the route lookup opens a socket
            self._address = advertised(self.endpoint.address, self._advertise, self._toward)
        return self._address

    def register(self, name: str, ref: Any) -> None:
        """Name a local actor; messages held for it are told first, in arrival order."""
        with self._lock:
            self._release_held(name, ref)
            self._refs[name] = ref
            self._names[ref.actor_urn] = name

    def start_and_register(self, name: str, start: Callable[[], Any]) -> Any:
        """Start an actor and register it atomically with deliveries (no message can overtake)."""
        with self._lock:
            ref = start()
            self._release_held(name, ref)
            self._refs[name] = ref
            self._names[ref.actor_urn] = name
            return ref

    def admit_peer(self, process: str, address: str, public_key: str | bytes, role: Role = Role.WORKER) -> None:
        """Let `process` (Curve key `public_key`) in and connect to it at `address`."""
        self.keys.admit(public_key, role, process)
        self.connect(process, address)

    @property
    def held_bytes(self) -> int:
        """Bytes of frames held now for actors not registered here (at most the cap)."""
        with self._lock:
            return self._held_bytes

    @property
    def held_messages(self) -> int:
        """Messages held now for actors not registered here."""
        with self._lock:
            return sum(len(h.messages) for h in self._held.values())

    def _release_held(self, name: str, ref: Any) -> None:
        held = self._held.pop(name, None)
        if held is not None:
            self._held_bytes -= held.size
            for message in held.messages:
                ref.tell(message)

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

    def send_many(self, processes: Iterable[str], actor: str, message: Any, timeout: float | None = None
                  ) -> list[tuple[str, Exception]]:
        """send() of one message to the actor `actor` of each process, encoded once; the processes it could not
        be queued for, each with why (Endpoint.send_many)."""
        failed = self.endpoint.send_many([Address(p, actor) for p in processes], message, timeout=timeout)
        return [(address.process, exc) for address, exc in failed]

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

    def _deliver(self, actor: str, message: Any, sender: Identity | None = None, size: int = 0) -> None:
        """Runs on the endpoint's I/O thread: check the sender's authority, hand over, never block.

        `sender` is None only for a message of this process (a _LocalName's tell).
        """
        if sender is not None:
            why = refusal(sender, actor, message)
            if why is None and sender.role is not Role.DRIVER:
                claimed = _claimed_name(message)  # a hello or status request names its sender: bind it to the key
                if claimed is not None and claimed != sender.name:
                    why = self.keys.bind(claimed, sender.key)
                if why is None and self.ack_host is not None and sender.name is not None:
                    why = ack_refusal(sender.name, message, self.ack_host)
            if why is not None:
                self._refuse("not_permitted", f"{type(message).__name__} to {actor!r} from "
                                              f"{sender.name or sender.role.value} ({sender.key[:8]}...): {why}")
                return
        with self._lock:
            ref = self._refs.get(actor)
            if ref is None:
                self._hold(actor, message, size)
                return
        try:
            ref.tell(message)
        except Exception as exc:  # the actor stopped meanwhile: normal around a stop or a rollback
            self._dropped_for_stopped(actor, message, exc)

    def _dropped_for_stopped(self, actor: str, message: Any, exc: Exception) -> None:
        """Count a message whose actor stopped before it was handed over (its sender learns it on its next
        send, or never needs to: a lease answer to a spout SPU a rollback replaced). Logged once per process at
        info, then at debug: a rollback stops many actors while answers to them are still on their way."""
        first = self._count("actor_stopped")
        count_dropped_frame("actor_stopped")
        (log.info if first else log.debug)("process %r: %s for %r not delivered, the actor had stopped: %r "
                                           "(counted in esault_frames_dropped_total{reason=\"actor_stopped\"})",
                                           self.process, type(message).__name__, actor, exc)

    def _hold(self, actor: str, message: Any, size: int) -> None:
        """Keep `message` until `actor` registers, within the byte cap (lock held)."""
        size = max(size, 64)  # a held message costs at least its bookkeeping
        if self._held_bytes + size > self._held_cap:
            self._evict_stale(time.monotonic() - HELD_MAX_AGE)
        if self._held_bytes + size > self._held_cap:
            self.refused["held_full"] = self.refused.get("held_full", 0) + 1
            count_dropped_frame("held_full")
            if self.refused["held_full"] == 1:
                log.warning("process %r: dropping a %s for actor %r, not registered here: %d bytes are held for "
                            "such actors (the cap); further drops are only counted", self.process,
                            type(message).__name__, actor, self._held_bytes)
            return
        held = self._held.get(actor)
        if held is None:
            held = self._held[actor] = _Held(time.monotonic())
        held.messages.append(message)
        held.size += size
        self._held_bytes += size

    def _evict_stale(self, before: float) -> None:
        for name in [n for n, h in self._held.items() if h.since < before]:
            held = self._held.pop(name)
            self._held_bytes -= held.size
            self.refused["held_full"] = self.refused.get("held_full", 0) + len(held.messages)
            for _ in held.messages:
                count_dropped_frame("held_full")

    def _refuse(self, reason: str, detail: str) -> None:
        first = self._count(reason)
        count_auth_rejected(reason)
        (log.warning if first else log.debug)("process %r refused %s", self.process, detail)

    def _count(self, reason: str) -> bool:
        """One more message dropped for `reason`; True for the first (the one logged loudly)."""
        with self._lock:
            self.refused[reason] = self.refused.get(reason, 0) + 1
            return self.refused[reason] == 1

    def close(self) -> None:
        self.endpoint.close()


def _claimed_name(message: Any) -> str | None:
    """The process name a joining message claims for its sender (its key gets bound to it)."""
    kind = type(message)
    if kind is WorkerHello:
        return message.process
    if kind is StatusRequest or kind is SavepointRequest or kind is EnrollRequest:
        return getattr(getattr(message.reply_to, "address", None), "process", None)
    return None


class _LocalName:
    """A mailbox of this process named in a received message; resolved at tell time."""

    __slots__ = ("_postman", "name", "address")

    def __init__(self, postman: Postman, name: str) -> None:
        self._postman = postman
        self.name = name
        self.address = Address(postman.process, name)

    def tell(self, message: Any) -> None:
        self._postman._deliver(self.name, message, None, 0)

    @property
    def actor_urn(self) -> str:
        return f"name:{self.name}"

    def __repr__(self) -> str:
        return f"LocalName({self.address})"
