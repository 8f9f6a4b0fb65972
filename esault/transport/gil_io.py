"""Non-blocking zmq reads and writes that keep the GIL, for the endpoint's I/O thread.

pyzmq gives the GIL up around every send and recv, non-blocking ones too. The
I/O thread shares its process with busy SPU threads, and against a busy thread
each give-up costs a switch interval's wait (5 ms) to get the GIL back:
measured on the 2-core VM (bench/io_thread_gil.py), a 3-part non-blocking
read took 4.5-7 ms of wall time and 150-290 us of CPU beside a busy thread,
10-13 us alone; so a busy worker read a few hundred frames a second
(docs/TRANSPORT.md, "The GIL and the I/O thread"). A non-blocking call never
waits in libzmq, so it has no reason to let go of the GIL. `ZmqIO` makes those
calls into the libzmq that pyzmq loaded, through `ctypes.PyDLL`, which keeps
the GIL: 0.06x the CPU and 0.004x the wall time of a read beside a busy thread.

Only the same library instance is safe to call with pyzmq's socket handles,
so it is found in this process's memory map, never by name; where it cannot
be (not Linux, libzmq linked into pyzmq's module), `PyzmqIO` makes pyzmq's
own calls, with the same results and the old cost. Both raise zmq.ZMQError
as pyzmq does for anything but "would block".
"""

from __future__ import annotations

import ctypes
import errno
import logging
from pathlib import Path
import zmq

log = logging.getLogger(__name__)

# Plain ints, not pyzmq's enums: an enum's `|` or `&` costs as much as the libzmq call it prepares
_DONTWAIT, _SNDMORE, _EAGAIN = int(zmq.DONTWAIT), int(zmq.SNDMORE), int(zmq.EAGAIN)
_EVENTS, _POLLIN = int(zmq.EVENTS), int(zmq.POLLIN)
_EINTR = errno.EINTR  # a libzmq call interrupted by a signal: asked again


class _Msg(ctypes.Structure):
    """libzmq's zmq_msg_t: 64 opaque bytes, pointer-aligned."""

    _fields_ = [("_", ctypes.c_uint64 * 8)]


class NonBlockingIO:
    """The I/O thread's non-blocking reads and writes of whole messages."""

    def recv_multipart(self, sock: zmq.Socket) -> tuple[list[bytes], str] | None:
        """The next whole message's parts and the connection's "User-Id" ("" if none), or None if none waits."""
        raise NotImplementedError

    def send_multipart(self, sock: zmq.Socket, parts: tuple[bytes, ...] | list[bytes]) -> bool:
        """Hands a whole message to zmq; False (nothing sent) when the socket would block (its HWM)."""
        raise NotImplementedError

    @staticmethod
    def readable(sock: zmq.Socket) -> bool:
        """Whether a message waits on `sock` (EVENTS keeps the GIL); with pyzmq's flag enums the `&` cost
        as much as the call (6.0 against 3.9 us on a slow day)."""
        return bool(sock.getsockopt(_EVENTS) & _POLLIN)

    def drain(self, sock: zmq.Socket) -> None:
        """Reads and drops every message waiting on `sock`."""
        while self.readable(sock):
            if self.recv_multipart(sock) is None:
                return


class PyzmqIO(NonBlockingIO):
    """pyzmq's own calls (each gives the GIL up and takes it back)."""

    def recv_multipart(self, sock: zmq.Socket) -> tuple[list[bytes], str] | None:
        try:
            frames = sock.recv_multipart(zmq.NOBLOCK, copy=False)
        except zmq.Again:
            return None
        try:
            user = frames[-1].get("User-Id")
        except zmq.ZMQError:
            user = ""
        return [f.bytes for f in frames], user

    def send_multipart(self, sock: zmq.Socket, parts: tuple[bytes, ...] | list[bytes]) -> bool:
        try:
            sock.send_multipart(parts, zmq.NOBLOCK, copy=False)
        except zmq.Again:
            return False
        return True


class ZmqIO(NonBlockingIO):
    """The same calls into pyzmq's libzmq through ctypes.PyDLL: the GIL is kept, and none of them waits."""

    def __init__(self, library: str) -> None:
        z = ctypes.PyDLL(library, use_errno=True)  # errno as the failing call left it, saved by ctypes
        msg_p = ctypes.POINTER(_Msg)
        for name, args, result in (
            ("zmq_msg_init", [msg_p], ctypes.c_int),
            ("zmq_msg_recv", [msg_p, ctypes.c_void_p, ctypes.c_int], ctypes.c_int),
            ("zmq_msg_data", [msg_p], ctypes.c_void_p),
            ("zmq_msg_size", [msg_p], ctypes.c_size_t),
            ("zmq_msg_more", [msg_p], ctypes.c_int),
            ("zmq_msg_gets", [msg_p, ctypes.c_char_p], ctypes.c_char_p),
            ("zmq_msg_close", [msg_p], ctypes.c_int),
            ("zmq_send", [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int], ctypes.c_int),
        ):
            fn = getattr(z, name)
            fn.argtypes, fn.restype = args, result
        self._z = z
        self._msg = _Msg()  # one thread (the endpoint's I/O thread) uses an instance

    def recv_multipart(self, sock: zmq.Socket) -> tuple[list[bytes], str] | None:
        z, msg, handle = self._z, self._msg, _handle(sock)
        parts: list[bytes] = []
        while True:
            z.zmq_msg_init(msg)
            error = self._recv_part(msg, handle)
            if error:
                z.zmq_msg_close(msg)
                if error == _EAGAIN and not parts:
                    return None
                raise zmq.ZMQError(error)  # EAGAIN within a message cannot happen: zmq delivers whole messages
            parts.append(ctypes.string_at(z.zmq_msg_data(msg), z.zmq_msg_size(msg)))
            if z.zmq_msg_more(msg):
                z.zmq_msg_close(msg)
                continue
            user = z.zmq_msg_gets(msg, b"User-Id")  # read before the close: it points into the message
            z.zmq_msg_close(msg)
            return parts, user.decode("utf-8", "replace") if user else ""

    def _recv_part(self, msg: _Msg, handle: int) -> int:
        """Reads one part into `msg`: 0, or the errno of the failure (an interrupted read is asked again)."""
        while self._z.zmq_msg_recv(msg, handle, _DONTWAIT) < 0:
            error = ctypes.get_errno()
            if error != _EINTR:
                return error
        return 0

    def send_multipart(self, sock: zmq.Socket, parts: tuple[bytes, ...] | list[bytes]) -> bool:
        z, handle = self._z, _handle(sock)
        last = len(parts) - 1
        for i, part in enumerate(parts):
            data = part if type(part) is bytes else bytes(part)
            flags = _DONTWAIT if i == last else _DONTWAIT | _SNDMORE
            while z.zmq_send(handle, data, len(data), flags) < 0:
                error = ctypes.get_errno()
                if error == _EINTR:
                    continue
                if error == _EAGAIN and i == 0:
                    return False  # nothing of it was taken: it waits for the HWM to clear
                raise zmq.ZMQError(error)  # a later part is always taken once the first was (atomic messages)
        return True


def _handle(sock: zmq.Socket) -> int:
    """The libzmq socket under `sock`; a closed one raises as pyzmq does (its handle is freed memory)."""
    if sock.closed:
        raise zmq.ZMQError(zmq.ENOTSOCK)
    return sock.underlying


def loaded_libzmq() -> str | None:
    """The path of the libzmq this process loaded for pyzmq (from /proc/self/maps), or None."""
    import zmq.backend  # noqa: F401  (loads the library)
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return None
    for line in maps.splitlines():
        fields = line.split(maxsplit=5)  # address perms offset device inode [path]
        if len(fields) == 6 and "/libzmq" in fields[5] and ".so" in fields[5]:
            return fields[5].strip()
    return None


def nonblocking_io() -> NonBlockingIO:
    """ZmqIO on pyzmq's own libzmq where it can be found, else PyzmqIO."""
    library = loaded_libzmq()
    if library is None:
        log.info("libzmq is not a library of its own in this process; the I/O thread uses pyzmq's calls")
        return PyzmqIO()
    try:
        return ZmqIO(library)
    except (OSError, AttributeError) as exc:
        log.info("could not call libzmq (%s) directly (%s); the I/O thread uses pyzmq's calls", library, exc)
        return PyzmqIO()
