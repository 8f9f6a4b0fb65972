"""One pyzmq endpoint per process: a ROUTER in, a DEALER per peer process out.

Threads. One I/O thread owns every zmq socket (they are not thread-safe). Any
thread may call `send`, `connect`, `disconnect`, `mailbox`, `queued` and
`close`. `send` encodes the message in the calling thread (so an unencodable
message fails right there, with SerializationError), appends the frame to an
outbox and wakes the I/O thread through an inproc PAIR socket: at most one
wake-up byte is outstanding however many frames wait. The I/O thread blocks in
`zmq.Poller.poll` with no timeout: no busy loop, no sleeps. Its non-blocking
reads and writes keep the GIL (`gil_io`): pyzmq's give it up for each part,
and beside a busy SPU thread each give-up waited a switch interval.

Frames. A peer's DEALER sends the multipart message ``[actor, frame]``
(actor: the destination actor's name in UTF-8; frame: `WireCodec.encode`);
the receiving ROUTER gives each connection its own routing id (peers cannot pick one). It
sees ``[routing id, actor, frame]``, decodes the frame and calls
``deliver(actor, message, sender, size)`` in the I/O thread (`sender`: the
Identity the connection's Curve key proved; `size`: the frame's bytes). Anything malformed is dropped,
counted (esault_frames_dropped_total{reason}) and logged once per reason.

Guarantees. Per destination process, frames leave in the order `send`
accepted them, so the order per (sending thread, destination process) - and
hence per (sending actor, receiving actor) - is kept end to end (one TCP
connection per pair of processes, one delivering thread). Memory is bounded:
per peer at most `queue_size` frames wait in the endpoint, at most `hwm` in
each zmq queue (sender and receiver side) plus the kernel's socket buffers
(`socket_buffer`). When all are full, `send` blocks - with a timeout it
raises TimeoutError - so a slow receiver slows its senders. While `deliver`
runs nothing is read (that is what fills the queues), but nothing is sent
either: `deliver` should only hand the message on, e.g. an actor's tell.
Delivery is at most once: frames queued for a peer that dies or is
disconnected are lost (and counted); the ack tracker's replay covers data,
heartbeats (esault.transport.heartbeat) detect the dead peer.
"""

from __future__ import annotations

import itertools
import logging
import resource
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Iterable, Self

import zmq
from zmq.auth.thread import ThreadAuthenticator
from zmq.utils.monitor import parse_monitor_message

from esault.errors import ConfigError, FrameError, SerializationError
from esault.metrics.registry import (count_auth_rejected, count_dropped_frame, init_auth_rejected_series,
                                     init_frame_drop_series)
from esault.thread_names import os_named
from esault.transport.address import MAX_PROCESS_NAME_BYTES, Address
from esault.transport.frames import DATA_FRAME_PREFIX, EncodedFrame
from esault.transport.traffic import Traffic
from esault.transport.gil_io import nonblocking_io
from esault.transport.trust import Identity, KeyRing
from esault.transport.wire import FRAME_ERROR_REASONS, WireCodec, frame_error_reason

__all__ = ["ENDPOINT_DROP_REASONS", "PEER_GONE", "Endpoint", "RemoteMailbox"]

log = logging.getLogger(__name__)

ENDPOINT_DROP_REASONS: tuple[str, ...] = (
    "envelope",  # not [routing id, actor, frame], or the actor name is not UTF-8
    "deliver",  # the deliver handler raised
    "disconnected",  # frames still queued for a peer when disconnect() was called
    "connect_failed",  # the DEALER to a peer could not be created or connected
    "closed",  # frames still queued when close()'s linger ran out
    "unauthenticated",  # the sender's key is no longer admitted (revoked after it connected)
)
"""Drop reasons the endpoint adds to the decode reasons of wire.FRAME_ERROR_REASONS."""

_RECV_BATCH = 256  # frames read per poll round before outgoing frames get a turn
_REDIAL_FIRST, _REDIAL_MAX = 0.05, 2.0
"""Seconds before a refused connection is dialled again: doubling from the first to the max."""
_DEALER_EVENTS = (zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
                  | zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_SUCCEEDED)
DEFAULT_MAX_FRAME_BYTES = 16 * 2**20
"""Frames above this are refused by senders and cut off by receivers (zmq MAXMSGSIZE)."""
_HANDSHAKE_FAILURES = {
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL: "handshake",
    zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL: "no_curve",  # e.g. a peer without keys (NULL mechanism)
    zmq.EVENT_HANDSHAKE_FAILED_AUTH: "unknown_key",  # Curve, but ZAP refused its key (or a wrong server key)
}
_WAKE_IDS = itertools.count()
_TRANSPORTS = ("tcp://", "ipc://", "inproc://")


PEER_GONE: tuple[type[Exception], ...] = (LookupError, ConnectionError)
"""What a send to a process that is gone raises: LookupError once it was disconnected (declared dead),
ConnectionError for a send that waited on it then. A sender that can go on without it catches these."""


class RemoteMailbox:
    """A Mailbox for an actor in another process: ``tell(m)`` is ``endpoint.send(address, m)``.

    `tell` may block under backpressure (see Endpoint.send). Equal when the
    addresses are equal; the wire codec names it by its `address`.
    """

    __slots__ = ("_endpoint", "address")

    def __init__(self, endpoint: Endpoint, address: Address) -> None:
        self._endpoint = endpoint
        self.address = address

    def tell(self, message: Any) -> None:
        self._endpoint.send(self.address, message)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RemoteMailbox) and other.address == self.address

    def __hash__(self) -> int:
        # Identity within this process (dict/set membership), never routing: see esault.keyhash.
        return self.address.__hash__()

    def __repr__(self) -> str:
        return f"RemoteMailbox({self.address})"


def tell_all(mailboxes: Iterable[Any], message: Any) -> list[tuple[Any, Exception]]:
    """Tell every mailbox `message`: the remote ones of one endpoint share one encoding (Endpoint.send_many), the
    others are told one by one. The mailboxes it could not reach, each with why; the rest were told."""
    failed: list[tuple[Any, Exception]] = []
    remote: dict[int, tuple[Endpoint, list[RemoteMailbox]]] = {}
    for mailbox in mailboxes:
        if type(mailbox) is RemoteMailbox:
            remote.setdefault(id(mailbox._endpoint), (mailbox._endpoint, []))[1].append(mailbox)
            continue
        try:
            mailbox.tell(message)
        except Exception as exc:  # noqa: BLE001 - an actor that stopped: the caller says what that means
            failed.append((mailbox, exc))
    for endpoint, boxes in remote.values():
        by_address = {box.address: box for box in boxes}
        failed += [(by_address[address], exc) for address, exc in endpoint.send_many(list(by_address), message)]
    return failed


class _Peer:
    """One connection lifetime to one process; `queued` is guarded by the endpoint's lock."""

    __slots__ = ("address", "closed", "error", "name", "queued", "queued_bytes", "space")

    def __init__(self, name: str, address: str, lock: threading.Lock) -> None:
        self.name = name
        self.address = address
        self.queued = 0  # frames accepted by send() and not yet handed to zmq
        self.queued_bytes = 0  # their size
        self.space = threading.Condition(lock)
        self.closed = False
        self.error: str | None = None


def socket_budget() -> int:
    """The context's socket limit, the process's file limit raised to its hard limit first. libzmq's default
    (1,023 sockets) stopped a driver at about 255 workers: a DEALER and its monitor for each of a peer's two
    lanes, 'Too many open files' when the 256th joined. Each socket also holds file descriptors, so the
    limit follows the file limit (at most 65,536)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = (1 << 16) if hard == resource.RLIM_INFINITY else min(hard, 1 << 16)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
        except (ValueError, OSError):  # not allowed here: the soft limit stays
            pass
    return max(1023, min(1 << 16 if soft == resource.RLIM_INFINITY else soft, 1 << 16))


class Endpoint:
    """The transport of one process: bound for incoming frames, connected on demand to peers.

    `deliver(actor_name, message, sender, size)` runs in the I/O thread for every good frame,
    in arrival order; it should hand the message on (an actor's tell) and not
    block for long, since it holds up all incoming and outgoing traffic of
    this process.
    `keys` is this process's Curve identity and the keys it admits: the
    ROUTER is a CurveZMQ server that a ZAP handler asks about every client key,
    and every DEALER authenticates the peer it connects to by the key bound to
    its name (default: a fresh key pair admitting only itself). `deliver` gets
    the sender's `Identity` from the connection's key, never from the frame.
    `codec` maps mailboxes to addresses and back (default: Address in, Address
    out). `queue_size` bounds the frames waiting in the endpoint per peer,
    `hwm` the zmq queues per connection, `socket_buffer` (bytes, optional) the
    kernel buffers; `linger` bounds how long close() keeps trying to send.

    Two lanes per peer: messages whose type is in `control` go on a connection
    of their own (a second DEALER, FIFO among themselves), so they never wait
    behind queued data frames in this endpoint, in zmq's queues or in the
    kernel's; nor do they wait for queue space (they are few and small). Only
    types that need no order against data may be control (esault: the
    reconfiguration commands an SPU's mailbox lets jump its data, and the
    worker's placement commands; esault/cluster/lanes.py).
    """

    def __init__(
        self,
        process_name: str,
        deliver: Callable[[str, Any, Identity, int], None],
        *,
        bind: str = "tcp://127.0.0.1:0",
        keys: KeyRing | None = None,
        codec: WireCodec | None = None,
        queue_size: int = 1024,
        queue_bytes: int = 64 * 2**20,
        hwm: int = 1000,
        socket_buffer: int | None = None,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        linger: float = 1.0,
        control: frozenset[type] = frozenset(),
    ) -> None:
        _check_name(process_name)
        init_frame_drop_series(FRAME_ERROR_REASONS + ENDPOINT_DROP_REASONS)  # counted from 0, so rate() sees the first drop
        init_auth_rejected_series(_HANDSHAKE_FAILURES.values())
        if not callable(deliver):
            raise ConfigError(f"Endpoint({process_name!r}): deliver must be callable(actor_name, message, sender, size), "
                              f"got {deliver!r}")
        for name, value, low in (("queue_size", queue_size, 1), ("queue_bytes", queue_bytes, 1), ("hwm", hwm, 1),
                                 ("max_frame_bytes", max_frame_bytes, 1)):
            if type(value) is not int or value < low:
                raise ConfigError(f"Endpoint({process_name!r}): {name} must be an int >= {low}, got {value!r}")
        if socket_buffer is not None and (type(socket_buffer) is not int or socket_buffer < 1024):
            raise ConfigError(f"Endpoint({process_name!r}): socket_buffer must be None or an int >= 1024 bytes, "
                              f"got {socket_buffer!r}")
        if not isinstance(linger, (int, float)) or linger < 0:
            raise ConfigError(f"Endpoint({process_name!r}): linger must be seconds >= 0, got {linger!r}")
        self.process = process_name
        self.keys = keys or KeyRing.solo(process_name)
        self._deliver = deliver
        self._codec = codec or WireCodec(max_frame_bytes=max_frame_bytes)
        self._queue_size = queue_size
        self._queue_bytes = queue_bytes
        self._hwm = hwm
        self._socket_buffer = socket_buffer
        self._linger = float(linger)
        self._max_frame_bytes = max_frame_bytes
        self._control = frozenset(control)

        self._lock = threading.Lock()
        self._peers: dict[str, _Peer] = {}
        self._outbox: list[tuple[tuple[_Peer, int], bytes | None, bytes | None]] = []
        self._signalled = False
        self._closing = False
        self._dropped: dict[str, int] = {}
        self._logged: set[str] = set()
        self.traffic: Traffic | None = None
        """Set to count every message sent and delivered by type (esault.transport.traffic); off by default."""

        self._ctx = zmq.Context()
        self._ctx.set(zmq.MAX_SOCKETS, socket_budget())
        self._io = nonblocking_io()  # the I/O thread's reads and writes: they keep the GIL where they can
        self._auth: ThreadAuthenticator | None = None
        try:
            # ZAP first: a CURVE server with no handler on its context would admit any client key.
            self._auth = ThreadAuthenticator(self._ctx, log=logging.getLogger("esault.transport.zap"))
            self._auth.start()
            self._auth.configure_curve_callback("*", credentials_provider=_ZapCheck(self.keys, process_name))
            self._router = self._ctx.socket(zmq.ROUTER)
            self._router.curve_server = True
            self._router.curve_secretkey = self.keys.own.secret
            self._router.curve_publickey = self.keys.own.public
            self._router.setsockopt(zmq.LINGER, 0)
            self._router.setsockopt(zmq.RCVHWM, hwm)
            self._router.setsockopt(zmq.MAXMSGSIZE, max_frame_bytes)
            if socket_buffer is not None:
                self._router.setsockopt(zmq.RCVBUF, socket_buffer)
            try:
                self._router.bind(bind)
            except zmq.ZMQError as exc:
                raise ConfigError(
                    f"Endpoint({process_name!r}) cannot bind {bind!r}: {exc}; pass a free address, "
                    "e.g. bind='tcp://127.0.0.1:0' for any free port"
                ) from None
            self.address: str = self._router.getsockopt(zmq.LAST_ENDPOINT).decode()
            """The address peers connect to, with the real port (e.g. 'tcp://127.0.0.1:41234')."""
            self._monitor = self._router.get_monitor_socket(
                zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
                | zmq.EVENT_HANDSHAKE_FAILED_AUTH)
            wake = f"inproc://esault-endpoint-wake-{next(_WAKE_IDS)}"
            self._wake_in = self._ctx.socket(zmq.PAIR)
            self._wake_in.bind(wake)
            self._wake_out = self._ctx.socket(zmq.PAIR)
            self._wake_out.connect(wake)
        except BaseException:
            if self._auth is not None:
                self._auth.stop()
            self._ctx.destroy(linger=0)
            raise
        self._peers[process_name] = _Peer(process_name, self.address, self._lock)
        self._thread = threading.Thread(target=os_named(self._run), name=f"esault-endpoint-{process_name}",
                                        daemon=True)
        self._io_ident: int | None = None
        self._thread.start()

    # --- the API any thread may call -----------------------------------------

    def connect(self, peer_process: str, address: str) -> None:
        """Let `send` reach `peer_process` at `address`; its DEALER is created on the first frame.

        Idempotent for the same address; a peer that moved needs disconnect() first.
        """
        _check_name(peer_process)
        if not isinstance(address, str) or not address.startswith(_TRANSPORTS):
            raise ConfigError(f"Endpoint({self.process!r}).connect({peer_process!r}, {address!r}): the address must "
                              f"be a zmq endpoint such as 'tcp://127.0.0.1:5555' (transports: {', '.join(_TRANSPORTS)})")
        with self._lock:
            self._check_open("connect")
            peer = self._peers.get(peer_process)
            if peer is not None:
                if peer.address == address:
                    return
                raise ConfigError(
                    f"Endpoint({self.process!r}): process {peer_process!r} is already connected at {peer.address!r}; "
                    f"call disconnect({peer_process!r}) before connecting it at {address!r}"
                )
            self._peers[peer_process] = _Peer(peer_process, address, self._lock)

    def disconnect(self, peer_process: str) -> None:
        """Forget `peer_process` (it died, or moved): its queued frames are dropped and counted.

        Threads blocked sending to it raise ConnectionError; later sends raise LookupError until
        it is connected again.
        """
        with self._lock:
            peer = self._peers.pop(peer_process, None)
            if peer is None or self._closing:
                return
            peer.closed = True
            peer.error = f"process {peer_process!r} was disconnected"
            peer.space.notify_all()
            self._outbox.append(((peer, DATA), None, None))
            self._signal()

    def send(self, to: Address, message: Any, timeout: float | None = None) -> None:
        """Queue `message` for the actor at `to`; blocks while `to.process`'s queue is full.

        Raises SerializationError (the message cannot be encoded, or its frame
        is over `max_frame_bytes`), LookupError
        (`to.process` is not connected), TimeoutError (still full after
        `timeout` seconds; None waits forever), ConnectionError (the peer was
        disconnected or its connection failed) or RuntimeError (the endpoint is
        closed). Called from inside `deliver` (the I/O thread) it never blocks:
        a full queue raises TimeoutError at once.
        """
        if type(to) is not Address:
            raise TypeError(f"Endpoint.send needs an Address, got {to!r}; e.g. send(Address('w3', 'spu-17'), message)")
        self._queue(to, message, self._frame(message, to), timeout)

    def send_many(self, to: Iterable[Address], message: Any, timeout: float | None = None
                  ) -> list[tuple[Address, Exception]]:
        """send() of one message to many actors, encoded once: a broadcast (new routes to every upstream SPU,
        a checkpoint's completion to every SPU) costs one encoding, not one per receiver. The message names no
        receiver, so every receiver gets the same frame. Returns the receivers it could not be queued for, each
        with send()'s error (LookupError, TimeoutError, ConnectionError); the others are queued. Raises what
        send() raises for the message itself (SerializationError) or a closed endpoint (RuntimeError)."""
        targets = list(to)
        if not targets:
            return []
        for address in targets:
            if type(address) is not Address:
                raise TypeError(f"Endpoint.send_many needs Addresses, got {address!r}")
        frame = self._frame(message, targets[0])
        failed: list[tuple[Address, Exception]] = []
        for address in targets:
            try:
                self._queue(address, message, frame, timeout)
            except (LookupError, TimeoutError, ConnectionError) as exc:
                failed.append((address, exc))
        return failed

    def _frame(self, message: Any, to: Address) -> bytes:
        frame = self._codec.encode(message)
        if len(frame) > self._max_frame_bytes:
            raise SerializationError(
                f"cannot send {type(message).__name__} to {to}: its frame is {len(frame)} bytes, over max_frame_bytes="
                f"{self._max_frame_bytes} (receivers drop the connection of a larger frame); send smaller batches"
            )
        return frame

    def _queue(self, to: Address, message: Any, frame: bytes, timeout: float | None) -> None:
        if self.traffic is not None:
            self.traffic.sent(message)
        actor = to.actor.encode("utf-8")
        lane = CONTROL if type(message) in self._control else DATA
        with self._lock:
            self._check_open("send")
            peer = self._peers.get(to.process)
            if peer is None:
                known = ", ".join(sorted(self._peers))
                raise LookupError(
                    f"Endpoint({self.process!r}) has no connection to process {to.process!r} (for {to}); call "
                    f"connect({to.process!r}, 'tcp://host:port') first (connected: {known})"
                )
            if lane == DATA and (peer.queued >= self._queue_size or peer.queued_bytes >= self._queue_bytes):
                self._wait_for_space(peer, to, timeout)
            peer.queued += 1
            peer.queued_bytes += len(frame)
            self._outbox.append(((peer, lane), actor, frame))
            self._signal()

    def mailbox(self, address: Address) -> RemoteMailbox:
        """A Mailbox whose tell() sends to `address` through this endpoint."""
        return RemoteMailbox(self, address)

    def queued(self, peer_process: str) -> int:
        """Frames accepted by send() for `peer_process` and not yet handed to zmq (<= queue_size)."""
        with self._lock:
            peer = self._peers.get(peer_process)
            return 0 if peer is None else peer.queued

    @property
    def queue_size(self) -> int:
        """The bound on queued(peer) for every peer."""
        return self._queue_size

    def dropped(self) -> dict[str, int]:
        """Frames this endpoint dropped, by reason (also in esault_frames_dropped_total)."""
        with self._lock:
            return dict(self._dropped)

    def close(self) -> None:
        """Stop: try to send queued frames for up to `linger` seconds, then close every socket.

        Blocked senders raise RuntimeError. Idempotent. From inside `deliver` it
        only starts the shutdown (the I/O thread cannot wait for itself).
        """
        with self._lock:
            if not self._closing:
                self._closing = True
                for peer in self._peers.values():
                    peer.space.notify_all()
                self._signal()
        if threading.get_ident() == self._io_ident:
            return
        self._thread.join(self._linger + 10.0)
        if self._thread.is_alive():
            log.error("endpoint %r: the I/O thread did not stop (is deliver() blocked?)", self.process)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Endpoint({self.process!r}, address={self.address!r})"

    # --- helpers for senders (called with the lock held) ---------------------

    def _check_open(self, what: str) -> None:
        if self._closing:
            raise RuntimeError(f"Endpoint({self.process!r}) is closed; cannot {what}")

    def _signal(self) -> None:
        if not self._signalled:
            self._signalled = True
            try:
                self._wake_out.send(b"", zmq.NOBLOCK)
            except zmq.ZMQError:  # the I/O thread is already shutting down
                pass

    def _wait_for_space(self, peer: _Peer, to: Address, timeout: float | None) -> None:
        in_io_thread = threading.get_ident() == self._io_ident
        deadline = None if timeout is None else time.monotonic() + max(timeout, 0.0)
        while peer.queued >= self._queue_size or peer.queued_bytes >= self._queue_bytes:
            if self._closing:
                raise RuntimeError(f"Endpoint({self.process!r}) closed while send() to {to} waited for queue space")
            if peer.closed:
                raise ConnectionError(f"cannot send to {to}: {peer.error}")
            remaining = None if deadline is None else deadline - time.monotonic()
            if in_io_thread or (remaining is not None and remaining <= 0):
                waited = "at once (inside deliver(), send never blocks)" if in_io_thread else f"after {timeout} s"
                raise TimeoutError(
                    f"Endpoint({self.process!r}): send to {to} timed out {waited}: {peer.queued} frames "
                    f"({peer.queued_bytes} bytes) are already queued for process {to.process!r} (queue_size="
                    f"{self._queue_size}, queue_bytes={self._queue_bytes}) and its zmq queues are full - the "
                    "receiver is slower than its senders. Retry later, shed load, or raise queue_size/queue_bytes"
                )
            peer.space.wait(remaining)
        if self._closing:
            raise RuntimeError(f"Endpoint({self.process!r}) closed while send() to {to} waited for queue space")
        if peer.closed:
            raise ConnectionError(f"cannot send to {to}: {peer.error}")

    # --- the I/O thread ---------------------------------------------------------

    def _run(self) -> None:
        self._io_ident = threading.get_ident()
        self._poller = zmq.Poller()
        self._poller.register(self._router, zmq.POLLIN)
        self._poller.register(self._wake_in, zmq.POLLIN)
        self._poller.register(self._monitor, zmq.POLLIN)
        self._watching: set[tuple[_Peer, int]] = set()  # lanes whose DEALER is polled for POLLOUT
        self._dealer_monitors: dict[zmq.Socket, tuple[_Peer, int]] = {}  # a DEALER's handshake events
        self._redial_at: dict[tuple[_Peer, int], float] = {}  # lanes whose connection was refused: when to retry
        self._redials: dict[tuple[_Peer, int], int] = {}  # refusals in a row, per lane (the backoff)
        dealers: dict[tuple[_Peer, int], zmq.Socket] = {}  # (peer, lane) -> its DEALER
        pending: dict[tuple[_Peer, int], deque[tuple[bytes, bytes]]] = {}
        try:
            while True:
                timeout = None
                if self._redial_at:
                    timeout = max(0, int((min(self._redial_at.values()) - time.monotonic()) * 1000) + 1)
                events = dict(self._poller.poll(timeout))
                if self._redial_at:
                    self._redial_due(dealers)
                for monitor in [sock for sock in events if sock in self._dealer_monitors]:
                    self._dealer_event(monitor, dealers)
                if self._wake_in in events:
                    self._drain_wake()
                with self._lock:
                    items, self._outbox = self._outbox, []
                    self._signalled = False
                    closing = self._closing
                self._requeue(items, dealers, pending)
                if closing:
                    break
                self._flush(dealers, pending)
                for lane, sock in dealers.items():
                    # POLLOUT only while frames wait: an idle writable socket would spin the poller
                    wants = bool(pending.get(lane))
                    if wants and lane not in self._watching:
                        self._poller.register(sock, zmq.POLLOUT)
                        self._watching.add(lane)
                    elif not wants and lane in self._watching:
                        self._poller.unregister(sock)
                        self._watching.discard(lane)
                if self._router in events:
                    self._receive()
                if self._monitor in events:
                    self._count_handshake_failures()
        except Exception:
            log.exception("endpoint %r: the I/O thread failed; closing the endpoint", self.process)
            with self._lock:
                self._closing = True
                for peer in self._peers.values():
                    peer.space.notify_all()
        finally:
            self._shutdown(dealers, pending)

    def _drain_wake(self) -> None:
        self._io.drain(self._wake_in)

    def _requeue(self, items: list, dealers: dict[tuple[_Peer, int], zmq.Socket],
                 pending: dict[tuple[_Peer, int], deque]) -> None:
        """Move frames from the outbox to their lane's queue; apply disconnects."""
        dropped: dict[_Peer, list[int]] = {}
        for lane, actor, frame in items:
            peer = lane[0]
            if actor is None:  # disconnect: both lanes go
                gone = [f for key in ((peer, DATA), (peer, CONTROL)) for _, f in pending.pop(key, ())]
                for key in ((peer, DATA), (peer, CONTROL)):
                    self._redial_at.pop(key, None)
                    self._redials.pop(key, None)
                    self._close_dealer(key, dealers)
                lost = len(gone)
                if lost:
                    self._release({peer: [lost, sum(len(f) for f in gone)]})
                    self._drop("disconnected", f"{lost} frame(s) queued for {peer.name!r} at disconnect", lost)
                continue
            if peer.closed or (lane not in dealers and lane not in self._redial_at
                               and not self._open_dealer(lane, dealers)):
                counts = dropped.setdefault(peer, [0, 0])
                counts[0] += 1
                counts[1] += len(frame)
                continue
            queue = pending.get(lane)
            if queue is None:
                queue = pending[lane] = deque()
            queue.append((actor, frame))
        if dropped:
            self._release(dropped)
            for peer, (n, _) in dropped.items():
                reason = "connect_failed" if peer.error and "disconnected" not in peer.error else "disconnected"
                self._drop(reason, f"{n} frame(s) for {peer.name!r}: {peer.error}", n)

    def _open_dealer(self, lane: tuple[_Peer, int], dealers: dict[tuple[_Peer, int], zmq.Socket]) -> bool:
        peer = lane[0]
        sock = self._ctx.socket(zmq.DEALER)
        try:
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.SNDHWM, self._hwm)
            sock.setsockopt(zmq.RCVHWM, self._hwm)
            # No ROUTING_ID: the receiving ROUTER makes one per connection, so no peer can choose (or take
            # over) another's; who sent a frame is what its Curve key is bound to.
            server_key = self.keys.key_of(peer.name)
            if server_key is None:
                raise zmq.ZMQError(msg=f"no public key is known for process {peer.name!r}, so its identity "
                                       "cannot be checked (the driver announces its peers' keys)")
            sock.curve_secretkey = self.keys.own.secret
            sock.curve_publickey = self.keys.own.public
            sock.curve_serverkey = server_key
            sock.setsockopt(zmq.MAXMSGSIZE, self._max_frame_bytes)
            # Frames go to zmq only once the handshake succeeded: a connection the receiver refuses (its
            # peers' keys not admitted yet) ends for good in zmq, taking its queued frames with it; they
            # wait here instead, and the lane is dialled again (_dealer_event).
            sock.setsockopt(zmq.IMMEDIATE, 1)
            if self._socket_buffer is not None:
                sock.setsockopt(zmq.SNDBUF, self._socket_buffer)
            monitor = sock.get_monitor_socket(_DEALER_EVENTS)
            sock.connect(peer.address)
        except zmq.ZMQError as exc:
            sock.close(linger=0)
            with self._lock:
                peer.closed = True
                peer.error = f"connecting to {peer.name!r} at {peer.address!r} failed: {exc}"
                if self._peers.get(peer.name) is peer:
                    del self._peers[peer.name]
                peer.space.notify_all()
            return False
        dealers[lane] = sock
        self._dealer_monitors[monitor] = lane
        self._poller.register(monitor, zmq.POLLIN)
        return True

    def _close_dealer(self, lane: tuple[_Peer, int], dealers: dict[tuple[_Peer, int], zmq.Socket]) -> None:
        sock = dealers.pop(lane, None)
        if sock is None:
            return
        if lane in self._watching:
            self._poller.unregister(sock)
            self._watching.discard(lane)
        for monitor in [m for m, of in self._dealer_monitors.items() if of == lane]:
            del self._dealer_monitors[monitor]
            self._poller.unregister(monitor)
            try:
                sock.disable_monitor()
            except zmq.ZMQError:
                pass
            monitor.close(linger=0)
        sock.close(linger=0)

    def _dealer_event(self, monitor: zmq.Socket, dealers: dict[tuple[_Peer, int], zmq.Socket]) -> None:
        """A DEALER's handshake ended: success resets its backoff; a refusal closes it (zmq never dials a
        refused connection again) and schedules a new one, its frames still queued here."""
        lane = self._dealer_monitors[monitor]
        refused = False
        for event in _monitor_events(monitor):
            if event["event"] == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                self._redials.pop(lane, None)
            elif event["event"] in _HANDSHAKE_FAILURES:
                refused = True
        if not refused:
            return
        peer = lane[0]
        tries = self._redials.get(lane, 0) + 1
        self._redials[lane] = tries
        wait = min(_REDIAL_MAX, _REDIAL_FIRST * 2 ** (tries - 1))
        self._close_dealer(lane, dealers)
        self._redial_at[lane] = time.monotonic() + wait
        key = f"refused:{peer.name}"
        if key not in self._logged:
            self._logged.add(key)
            log.warning("endpoint %r: process %r at %s refused our Curve handshake (it does not admit this "
                        "process's key yet, or expects another server key); its frames wait here and the "
                        "connection is dialled again, every %g s at most", self.process, peer.name,
                        peer.address, _REDIAL_MAX)

    def _redial_due(self, dealers: dict[tuple[_Peer, int], zmq.Socket]) -> None:
        now = time.monotonic()
        for lane in [lane for lane, at in self._redial_at.items() if at <= now]:
            del self._redial_at[lane]
            if not lane[0].closed:
                self._open_dealer(lane, dealers)

    def _flush(self, dealers: dict[tuple[_Peer, int], zmq.Socket], pending: dict[tuple[_Peer, int], deque]) -> None:
        """Hand queued frames to zmq until each lane's queue is empty or its HWM is reached (control first)."""
        sent: dict[_Peer, list[int]] = {}
        for lane in sorted(pending, key=lambda key: -key[1]):
            queue = pending[lane]
            if not queue:
                continue
            peer = lane[0]
            sock = dealers.get(lane)
            if sock is None:  # refused, dialled again soon: its frames wait
                continue
            n = size = 0
            send = self._io.send_multipart
            while queue:
                if not send(sock, queue[0]):
                    break
                size += len(queue.popleft()[1])
                n += 1
            if n:
                counts = sent.setdefault(peer, [0, 0])
                counts[0] += n
                counts[1] += size
        if sent:
            self._release(sent)

    def _release(self, counts: dict[_Peer, list[int]]) -> None:
        """Frames (and their bytes) left the endpoint's queue of each peer: wake blocked senders."""
        with self._lock:
            for peer, (n, size) in counts.items():
                peer.queued -= n
                peer.queued_bytes -= size
                peer.space.notify_all()

    def _receive(self) -> None:
        """Read up to _RECV_BATCH frames, fair-queued across the connections (lanes) of every peer.

        zmq notes that an idle connection has a frame again only when the socket
        processes its commands: on a poll, or every 100th read. Asking for the
        socket's events after each frame does that, so a control frame that
        arrives while a data lane stays busy is read next-but-one, not after up
        to a whole batch of data frames.
        """
        router, recv, readable = self._router, self._io.recv_multipart, self._io.readable
        for _ in range(_RECV_BATCH):
            received = recv(router)  # (parts, the key the connection authenticated with: ZAP's User-Id)
            if received is None:
                return
            self._handle(*received)  # that key is the only source of authority
            if not readable(router):
                return

    def _count_handshake_failures(self) -> None:
        """A peer that failed the Curve handshake (no keys, or a key not admitted): counted and logged."""
        for event in _monitor_events(self._monitor):
            reason = _HANDSHAKE_FAILURES.get(event["event"])
            if reason is not None:
                count_auth_rejected(reason)
                self._drop_log(f"auth:{reason}", f"a connection failed the Curve handshake ({reason}, "
                                                 f"{event['endpoint'].decode(errors='replace')}): it gets nothing")

    def _handle(self, parts: list[bytes], user: str = "") -> None:
        identity = self.keys.identity(user)
        if identity is None:
            self._drop("unauthenticated", f"a frame from key {user[:12]!r}..., which is not admitted (any more)")
            return
        sender = identity.name or f"{identity.role.value} {user[:8]}..."
        if len(parts) != 3:
            self._drop("envelope", f"from {sender!r}: expected [actor, frame], got {len(parts) - 1} part(s)")
            return
        try:
            actor = parts[1].decode("utf-8")
        except UnicodeDecodeError:
            actor = ""
        if not actor:
            self._drop("envelope", f"from {sender!r}: the actor name {parts[1][:40]!r} is empty or not UTF-8")
            return
        frame = parts[2]
        if frame[:2] == DATA_FRAME_PREFIX:  # data: decoded by the receiving actor, on its thread
            message: Any = EncodedFrame(frame, self._codec.decode, self._rejecter(sender, actor))
        else:
            try:
                message = self._codec.decode(frame)
            except FrameError as exc:
                self._drop(frame_error_reason(exc), f"from {sender!r} to {actor!r}: {exc}")
                return
        if self.traffic is not None:
            self.traffic.received(message)
        try:
            self._deliver(actor, message, identity, len(frame))
        except Exception as exc:  # noqa: BLE001
            self._drop("deliver", f"from {sender!r}: deliver({actor!r}, {type(message).__name__}) raised "
                                  f"{type(exc).__name__}: {exc}")

    def _rejecter(self, sender: str, actor: str) -> Callable[[FrameError], None]:
        """How an actor reports a data frame it could not decode: dropped and counted like any other."""
        def reject(exc: FrameError) -> None:
            self._drop(frame_error_reason(exc), f"from {sender!r} to {actor!r}: {exc}")
        return reject

    def _drop(self, reason: str, detail: str, n: int = 1) -> None:
        with self._lock:
            self._dropped[reason] = self._dropped.get(reason, 0) + n
            first = reason not in self._logged
            self._logged.add(reason)
        for _ in range(n):
            count_dropped_frame(reason)
        if first:
            log.warning("endpoint %r dropped a frame (%s): %s; further drops for this reason are only counted",
                        self.process, reason, detail)
        else:
            log.debug("endpoint %r dropped a frame (%s): %s", self.process, reason, detail)

    def _drop_log(self, reason: str, detail: str) -> None:
        with self._lock:
            first = reason not in self._logged
            self._logged.add(reason)
        if first:
            log.warning("endpoint %r: %s; further ones are only counted", self.process, detail)

    def _shutdown(self, dealers: dict[tuple[_Peer, int], zmq.Socket], pending: dict[tuple[_Peer, int], deque]) -> None:
        """Flush for up to `linger` seconds, then close every socket and the context."""
        deadline = time.monotonic() + self._linger
        try:
            self._flush(dealers, pending)
            while any(pending.values()):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                poller = zmq.Poller()
                for lane, queue in pending.items():
                    if queue and lane in dealers:
                        poller.register(dealers[lane], zmq.POLLOUT)
                if not poller.sockets:  # only refused lanes wait: nothing to flush to
                    break
                poller.poll(max(1, int(remaining * 1000)))
                self._flush(dealers, pending)
        except Exception:
            log.exception("endpoint %r: flushing at close failed", self.process)
        lost = sum(len(q) for q in pending.values())
        if lost:
            self._drop("closed", f"{lost} frame(s) still queued when close()'s linger ({self._linger} s) ran out", lost)
        linger_ms = max(0, int((deadline - time.monotonic()) * 1000))
        for sock in dealers.values():
            try:
                sock.disable_monitor()
            except zmq.ZMQError:
                pass
        for monitor in list(self._dealer_monitors):
            monitor.close(linger=0)
        self._dealer_monitors.clear()
        for sock in dealers.values():
            sock.close(linger=linger_ms)
        try:
            self._router.disable_monitor()
        except zmq.ZMQError:
            pass
        self._monitor.close(linger=0)
        self._router.close(linger=0)
        self._wake_in.close(linger=0)
        with self._lock:
            self._wake_out.close(linger=0)
        if self._auth is not None:
            self._auth.stop()
        self._ctx.term()


DATA, CONTROL = 0, 1
"""The two lanes to each peer (CONTROL: the `control` message types)."""


def _monitor_events(monitor: zmq.Socket) -> list[dict[str, Any]]:
    """The events waiting on a zmq monitor socket (read without blocking)."""
    events = []
    while True:
        try:
            events.append(parse_monitor_message(monitor.recv_multipart(zmq.NOBLOCK)))
        except zmq.Again:
            return events
        except Exception:  # noqa: BLE001 - a monitor message we cannot parse is not worth the I/O thread
            return events


def _check_name(name: Any) -> None:
    if type(name) is not str or not name or len(name.encode("utf-8", "surrogatepass")) > MAX_PROCESS_NAME_BYTES:
        raise ConfigError(f"a process name must be a non-empty str of at most {MAX_PROCESS_NAME_BYTES} bytes "
                          f"(e.g. 'driver', 'w3'), got {name!r}")


class _ZapCheck:
    """The ZAP handler's question, asked once per new connection: is this client key admitted?"""

    def __init__(self, keys: KeyRing, process: str) -> None:
        self._keys = keys
        self._process = process

    def callback(self, domain: str, key: bytes) -> bool:
        # A refusal is counted by the monitor (EVENT_HANDSHAKE_FAILED_AUTH), once per connection.
        return self._keys.allows(key)
