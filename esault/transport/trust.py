"""KeyRing: the public keys a process lets in, each with a role and, once known, a process name.

Authority comes from the key that authenticated a connection, never from a
frame: the endpoint asks the ring who a received frame's Curve key is
(`identity`), and what that identity may do is decided by its role (see
esault.cluster.authority). A name is bound to a key once (`bind`), so one
admitted peer cannot speak under another's name.
"""

from __future__ import annotations

import enum
import threading
from dataclasses import dataclass

from esault.transport.keys import KeyPair

__all__ = ["Identity", "KeyRing", "Role"]


class Role(enum.Enum):
    """What an admitted key may do (esault.cluster.authority has the rules)."""

    DRIVER = "driver"  # places SPUs, stops workers, sends anything
    WORKER = "worker"  # hosts SPUs: data, acks and its own reports
    CLIENT = "client"  # `esault status`: may ask for status, nothing else
    ENROLL = "enroll"  # a replica worker's shared key: may only ask for a worker key of its own


@dataclass(frozen=True, slots=True)
class Identity:
    """Who sent a frame, as its authenticated key says."""

    key: str
    """The sender's public key (Z85 text): the ZAP User-Id of its connection."""
    role: Role
    name: str | None
    """The process name bound to the key; None until a worker's hello bound it."""


class KeyRing:
    """This process's key pair and the keys it admits. Thread-safe (the ZAP thread asks it)."""

    def __init__(self, own: KeyPair, name: str, role: Role) -> None:
        if not own.secret:
            raise ValueError("a KeyRing needs this process's secret key")
        self.own = own
        self._lock = threading.Lock()
        self._roles: dict[str, Role] = {}  # key -> role
        self._names: dict[str, str] = {}  # name -> key
        self._name_of: dict[str, str] = {}  # key -> name
        self.admit(own.public, role, name)

    @classmethod
    def solo(cls, name: str, role: Role = Role.DRIVER) -> "KeyRing":
        """A fresh key pair that admits only itself: reachable by nobody until keys are exchanged."""
        return cls(KeyPair.generate(), name, role)

    def admit(self, public: bytes | str, role: Role, name: str | None = None) -> None:
        """Let `public` connect with `role`; bind it to `name` too if given (replacing an older binding)."""
        key = _text(public)
        with self._lock:
            self._roles[key] = role
            if name is not None:
                self._bind(name, key)

    def revoke(self, public: bytes | str) -> None:
        """Stop admitting `public` (new connections); frames on its open connections are refused too."""
        key = _text(public)
        with self._lock:
            self._roles.pop(key, None)
            name = self._name_of.pop(key, None)
            if name is not None and self._names.get(name) == key:
                del self._names[name]

    def bind(self, name: str, public: bytes | str) -> str | None:
        """Bind `name` to the admitted key `public`; None on success, else why not.

        A name already bound to another admitted key is refused: a second key
        cannot take over a process's name (its data, its SPUs). A worker's key
        keeps the first name it was bound to; a status client's moves to the new one.
        """
        key = _text(public)
        with self._lock:
            if key not in self._roles:
                return "the key is not admitted"
            holder = self._names.get(name)
            if holder is not None and holder != key and holder in self._roles:
                return f"the name {name!r} belongs to another key"
            current = self._name_of.get(key)
            if current is not None and current != name:
                if self._roles[key] not in (Role.CLIENT, Role.ENROLL):  # these name each call afresh
                    return f"the key is already bound to {current!r}"
                del self._names[current]
            self._bind(name, key)
            return None

    def allows(self, public: bytes | str) -> bool:
        """Whether a connection with this client key may be set up (the ZAP question)."""
        with self._lock:
            return _text(public) in self._roles

    def identity(self, user_id: str) -> Identity | None:
        """Who an authenticated connection's User-Id (its Z85 key) is; None if no longer admitted."""
        with self._lock:
            role = self._roles.get(user_id)
            return None if role is None else Identity(user_id, role, self._name_of.get(user_id))

    def key_of(self, name: str) -> bytes | None:
        """The public key bound to process `name` (the server key to connect to it), or None."""
        with self._lock:
            key = self._names.get(name)
            return None if key is None else key.encode("ascii")

    def _bind(self, name: str, key: str) -> None:
        old = self._names.get(name)
        if old is not None and old != key:
            self._name_of.pop(old, None)
        self._names[name] = key
        self._name_of[key] = name


def _text(public: bytes | str) -> str:
    return public.decode("ascii") if isinstance(public, bytes) else public
