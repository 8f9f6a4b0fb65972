"""Starts local worker processes by asking a warm zygote (cluster/zygote.py) to fork them.

Why: a worker started as a fresh interpreter spends 0.7-1 s of CPU importing
before it can join; one forked from a process that imported everything once
is ready in milliseconds. One zygote serves every pool of this driver process
(it starts with the first worker asked for and ends when the driver does).

A forked worker is the zygote's child, not the driver's, so the driver holds a
ForkedProcess instead of a subprocess.Popen: it has the methods a pool uses
(poll, wait, kill, terminate, pid, returncode). Exit codes come from the
zygote, which reaps its children; signals go through a pidfd, so a signal
never reaches another process that reused the pid after the worker ended.
When the zygote cannot start or dies, WorkerForker.start raises
ForkerUnavailable and the pool starts a fresh interpreter instead.
"""

from __future__ import annotations

import json
import logging
import os
import select
import signal
import socket
import subprocess
import sys
import threading
from typing import Any, Callable

log = logging.getLogger("esault.cluster")

START_TIMEOUT = 60.0
"""Seconds the zygote may take to import esault and answer its first request."""


class ForkerUnavailable(Exception):
    """The zygote could not start or stopped answering: start the worker as a fresh interpreter."""


class ForkedProcess:
    """A worker process forked by the zygote: the part of subprocess.Popen a pool uses."""

    def __init__(self, pid: int, args: list[str]) -> None:
        self.pid = pid
        self.args = args
        self.returncode: int | None = None
        self._ended = threading.Event()
        self._lock = threading.Lock()
        self._exit_callbacks: list[Callable[[int], None]] = []
        try:
            self._pidfd: int | None = os.pidfd_open(pid)
        except (OSError, AttributeError):  # ended already (its exit is on its way), or no pidfd here
            self._pidfd = None

    def _exited(self, code: int) -> None:
        with self._lock:
            self.returncode = code
            if self._pidfd is not None:
                os.close(self._pidfd)
                self._pidfd = None
            callbacks, self._exit_callbacks = self._exit_callbacks, []
        self._ended.set()
        for callback in callbacks:
            callback(code)

    def add_exit_callback(self, callback: Callable[[int], None]) -> None:
        """Call `callback(code)` once when this process ends (at once if it has)."""
        with self._lock:
            code = self.returncode
            if code is None:
                self._exit_callbacks.append(callback)
                return
        callback(code)

    def _forker_lost(self) -> None:
        """The zygote died: nobody will report this process's exit, so its pidfd tells when it ends (its code
        is then unknown: -1)."""
        with self._lock:
            pidfd = self._pidfd
        if pidfd is None:
            if self.returncode is None:
                self._exited(-1)
            return

        def ended() -> None:
            if self.returncode is None:
                self._exited(-1)

        call_when_ended(pidfd, ended, f"esault-forked-{self.pid}")

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._ended.wait(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        return self.returncode  # type: ignore[return-value]

    def send_signal(self, sig: int) -> None:
        with self._lock:
            if self.returncode is not None:
                return
            try:
                if self._pidfd is not None:
                    signal.pidfd_send_signal(self._pidfd, sig)
                else:
                    os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


class WorkerForker:
    """The driver's end of one zygote. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._zygote: subprocess.Popen | None = None
        self._replies: list[dict[str, Any]] = []
        self._answered = threading.Condition(threading.Lock())
        self._children: dict[int, ForkedProcess] = {}
        self._early: dict[int, int] = {}  # exits reported before the fork's reply was read
        self._broken = False

    @property
    def zygote_pid(self) -> int | None:
        """The zygote's process id while it runs (None before the first start or after it failed)."""
        zygote = self._zygote
        return None if zygote is None or self._sock is None else zygote.pid

    def start(self, argv: list[str], stdin_data: str) -> ForkedProcess:
        """Fork `esault <argv>` (argv[0] == "worker") with this process's cwd, environment, sys.path and
        standard output and error; `stdin_data` is its standard input. Raises ForkerUnavailable."""
        with self._lock:
            if self._broken:
                raise ForkerUnavailable("the worker zygote failed before")
            if self._sock is None:
                self._launch()
            read_end, write_end = os.pipe()
            try:
                request = {"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ), "path": _path()}
                try:  # fds 1 and 2 as they are now, as a Popen child inherits them
                    socket.send_fds(self._sock, [json.dumps(request).encode()], [read_end, 1, 2])  # type: ignore
                except OSError as exc:
                    self._fail(f"sending it a request failed: {exc!r}")
                reply = self._reply()
            except BaseException:
                os.close(write_end)
                raise
            finally:
                os.close(read_end)
            if "pid" not in reply:
                os.close(write_end)
                raise ForkerUnavailable(f"the worker zygote refused: {reply.get('error', reply)}")
            _write_and_close(write_end, stdin_data.encode())
            process = ForkedProcess(reply["pid"], ["esault", *argv])
            with self._answered:
                self._children[process.pid] = process
                early = self._early.pop(process.pid, None)
            if early is not None:
                process._exited(early)
            return process

    def _launch(self) -> None:
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._zygote = subprocess.Popen([sys.executable, "-m", "esault.worker_zygote", str(theirs.fileno())],
                                            pass_fds=[theirs.fileno()], env=child_env(), stdin=subprocess.DEVNULL,
                                            start_new_session=True)
        except OSError as exc:
            mine.close()
            self._broken = True
            raise ForkerUnavailable(f"the worker zygote could not start: {exc!r}") from None
        finally:
            theirs.close()
        self._sock = mine
        threading.Thread(target=self._read, args=(mine,), name="esault-zygote-reader", daemon=True).start()

    def _reply(self) -> dict[str, Any]:
        with self._answered:
            if not self._answered.wait_for(lambda: self._replies or self._sock is None, START_TIMEOUT):
                self._fail(f"it did not answer within {START_TIMEOUT}s")
            if not self._replies:
                self._fail("it exited")
            return self._replies.pop(0)

    def _fail(self, why: str) -> None:
        self._broken = True
        log.warning("worker zygote: %s; starting workers as fresh interpreters from now on", why)
        self._close()
        raise ForkerUnavailable(f"the worker zygote failed: {why}")

    def _read(self, sock: socket.socket) -> None:
        while True:
            try:
                raw = sock.recv(65536)
            except OSError:
                raw = b""
            if not raw:
                break
            try:
                message = json.loads(raw)
            except ValueError:
                continue
            with self._answered:
                if "exited" in message:
                    child = self._children.pop(message["exited"], None)
                    if child is None:
                        self._early[message["exited"]] = message["code"]
                else:
                    self._replies.append(message)
                    self._answered.notify_all()
                    child = None
            if child is not None:
                child._exited(message["code"])
        zygote = self._zygote
        if zygote is not None:  # reaped, not left a zombie of this driver
            try:
                zygote.wait(5)
            except subprocess.TimeoutExpired:
                pass
        with self._answered:  # the zygote is gone: its children's exits come from their pidfds
            if self._sock is sock:
                self._sock = None
                self._broken = True
            children, self._children = list(self._children.values()), {}
            self._answered.notify_all()
        for child in children:
            child._forker_lost()

    def _close(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()


def call_when_ended(pidfd: int, then: Callable[[], None], name: str) -> None:
    """Call `then()` on a thread of its own once the process of `pidfd` has ended."""

    def wait() -> None:
        select.select([pidfd], [], [])
        then()

    threading.Thread(target=wait, name=name, daemon=True).start()


def _path() -> list[str]:
    return [p for p in sys.path if p]


def child_env() -> dict[str, str]:
    """This process's environment with its sys.path as PYTHONPATH: what a fresh interpreter it starts (a worker,
    or the zygote) needs to import the same modules, the topology's included."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(_path())}


def _write_and_close(fd: int, data: bytes) -> None:
    """The worker's standard input (its keys: far under a pipe's buffer, so this never blocks)."""
    try:
        while data:
            data = data[os.write(fd, data):]
    except OSError:  # it died at once; the pool's join wait reports it
        pass
    finally:
        os.close(fd)


_FORKER: WorkerForker | None = None
_FORKER_LOCK = threading.Lock()


def shared_forker() -> WorkerForker:
    """This driver process's zygote (made on first use)."""
    global _FORKER
    with _FORKER_LOCK:
        if _FORKER is None:
            _FORKER = WorkerForker()
        return _FORKER
