"""A warm process that forks `esault worker` processes for one driver (cluster/forker.py starts it as
`python -m esault.worker_zygote FD`, the entry point that hands it the CLI).

Why: a fresh `python -m esault.cli worker` spends 0.7-1 s of CPU starting Python
and importing esault, pykka, pyzmq and prometheus-client before it can join; a
driver that starts workers, or replaces a lost one, waits for that each time.
This process imports all of it once and forks a worker per request, ready in
milliseconds (PySpark's daemon.py and multiprocessing's forkserver do the same).

It is safe to fork because nothing here runs a thread, holds a zmq context or
has read any topology module: a child is what a fresh worker would be after
its imports. Each child takes the requester's working directory, environment,
sys.path and standard streams (passed as file descriptors), starts its own
session, and runs the worker command; the random module reseeds itself in a
child. Only the worker command is run, with arguments the driver composed; the
request comes over a socket pair this process inherited from its driver and
nobody else holds.

Protocol (one JSON object per SOCK_SEQPACKET message):
  driver -> here: {"argv": [...], "cwd": str, "env": {...}, "path": [...]} with fds
                  [stdin, stdout, stderr] attached
  here -> driver: {"pid": int} (or {"error": str}) per request, in order;
                  {"exited": pid, "code": int} when a child ends (negative: killed by that signal)
The process exits when the driver's end closes (the driver exited or was killed).
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import sys
import threading
from typing import Any, Callable

import setproctitle

MAX_REQUEST_BYTES = 1 << 20
"""A request's size limit: an environment and a sys.path fit many times over."""


def _validated(raw: bytes) -> dict[str, Any]:
    """The request, or ValueError saying what is wrong with it."""
    request = json.loads(raw)
    if not isinstance(request, dict):
        raise ValueError("a request is a JSON object")
    argv, cwd, env, path = request.get("argv"), request.get("cwd"), request.get("env"), request.get("path")
    if not (isinstance(argv, list) and argv[:1] == ["worker"] and all(isinstance(a, str) for a in argv)):
        raise ValueError("argv must be the worker command's arguments: ['worker', ...] of strings")
    if not isinstance(cwd, str):
        raise ValueError("cwd must be a string")
    if not (isinstance(env, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())):
        raise ValueError("env must map strings to strings")
    if not (isinstance(path, list) and all(isinstance(p, str) for p in path)):
        raise ValueError("path must be a list of strings")
    return request


def _send(sock: socket.socket, message: dict[str, Any]) -> None:
    try:
        sock.send(json.dumps(message).encode())
    except OSError:  # the driver is gone: the loop ends on its EOF
        pass


def _reap(sock: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _send(sock, {"exited": pid, "code": os.waitstatus_to_exitcode(status)})


def serve(sock: socket.socket) -> dict[str, Any] | None:
    """Fork a worker per request until the driver's end closes (then None). In a child it returns that child's
    request, its standard streams and process state already set up: the caller runs the worker."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so the wakeup fd below hears each exit
    signal.set_wakeup_fd(wake_w)
    selector = selectors.DefaultSelector()
    selector.register(sock, selectors.EVENT_READ)
    selector.register(wake_r, selectors.EVENT_READ)
    while True:
        for key, _ in selector.select():
            if key.fileobj == wake_r:
                try:
                    while os.read(wake_r, 512):
                        pass
                except BlockingIOError:
                    pass
                _reap(sock)
                continue
            try:
                raw, fds, _, _ = socket.recv_fds(sock, MAX_REQUEST_BYTES, 3)
            except OSError:
                raw, fds = b"", []
            if not raw:  # the driver's end closed
                selector.close()
                return None
            try:
                request = _validated(raw)
                if len(fds) != 3:
                    raise ValueError(f"a request carries 3 file descriptors (stdin, stdout, stderr), got {len(fds)}")
                refusal = None
            except ValueError as exc:
                refusal = f"refused a malformed request: {exc}"
            threads = _threads()
            if refusal is None and threads != 1:  # forking while another thread holds a lock would be unsafe
                refusal = f"the zygote runs {threads} threads; it forks with one only"
            if refusal is not None:
                for fd in fds:
                    os.close(fd)
                _send(sock, {"error": refusal})
                continue
            pid = os.fork()
            if pid == 0:
                selector.close()
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                os.close(wake_r)
                os.close(wake_w)
                sock.close()
                _become(request, fds)
                return request
            for fd in fds:
                os.close(fd)
            _send(sock, {"pid": pid})
            _reap(sock)


def _threads() -> int:
    """This process's threads, native ones (a library's) included where /proc tells."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def _become(request: dict[str, Any], fds: list[int]) -> None:
    """Turn this fresh child into the requester's worker: its own session, its streams, cwd, env and path."""
    # What ps, top and pkill -f show: the worker's own command line, not the zygote's it was forked from (the
    # arguments name the driver and the worker; its keys came on stdin). Before the environment is replaced:
    # setproctitle finds the room for the title next to the original environment's strings.
    setproctitle.setproctitle(" ".join(["esault", *request["argv"]]))
    os.setsid()
    for target, fd in enumerate(fds):
        if fd != target:
            os.dup2(fd, target)
            os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.path[:] = request["path"]
    sys.argv = ["esault", *request["argv"]]
    signal.signal(signal.SIGINT, signal.default_int_handler)


def main(argv: list[str], run_worker: Callable[[list[str]], int]) -> int:
    """Serve fork requests on the socket fd in argv[1]; a forked child runs `run_worker(its argv)` (the CLI's
    main, handed down by the entry point esault/worker_zygote.py: this floor does not import the CLI)."""
    if len(argv) != 2 or not argv[1].isdigit():
        print("usage: python -m esault.worker_zygote FD (started by the driver, see esault/cluster/forker.py)",
              file=sys.stderr)
        return 2
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C is the driver's to handle; EOF ends this process
    sock = socket.socket(fileno=int(argv[1]))
    request = serve(sock)
    if request is None:
        return 0
    return run_worker(request["argv"])
