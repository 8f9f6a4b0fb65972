"""Location-independent mailbox names: which process, which actor in it.

An `Address` is what crosses the wire where a message refers to a mailbox
(an SPU, a unit, the ack server). Inside a process the runtime keeps using
whatever `Mailbox` it has (a Pykka ActorRef, a `RemoteMailbox`); the wire
codec turns mailboxes into addresses and back through hooks the runtime
supplies (see `esault.transport.wire.WireCodec`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

__all__ = ["MAX_PROCESS_NAME_BYTES", "Address", "Mailbox"]

MAX_PROCESS_NAME_BYTES = 255
"""A process name is a zmq routing id, and zmq limits those to 255 bytes."""


@dataclass(frozen=True, slots=True)
class Address:
    """A mailbox name: `process` ("driver", "w3") and `actor` in it ("spu-17", "unit-count", "acker").

    Frozen and hashable, so it can key dicts; equal addresses name the same
    mailbox in every process and every run.
    """

    process: str
    actor: str

    def __post_init__(self) -> None:
        for name in ("process", "actor"):
            value = getattr(self, name)
            if type(value) is not str or not value:
                raise ValueError(
                    f"Address.{name} must be a non-empty str, got {value!r}; "
                    f"e.g. Address(process='w3', actor='spu-17')"
                )
        if len(self.process.encode("utf-8", "surrogatepass")) > MAX_PROCESS_NAME_BYTES:
            raise ValueError(
                f"Address.process {self.process[:40]!r}... is longer than {MAX_PROCESS_NAME_BYTES} bytes "
                "(it is used as a zmq routing id); use a short name such as 'w3'"
            )

    def __str__(self) -> str:
        return f"{self.process}/{self.actor}"


@runtime_checkable
class Mailbox(Protocol):
    """Anything messages can be told to: a Pykka ActorRef, a RemoteMailbox, a test double.

    `tell` never waits for the message to be handled; it may block briefly
    when a transport applies backpressure.
    """

    def tell(self, message: Any) -> None: ...
