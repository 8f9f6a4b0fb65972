"""A real server the tests start as a child process on 127.0.0.1: the Kafka broker, the S3 server, Prometheus.

Each one is started the same way and must be stopped the same way: on a free port (chosen again when another
process takes it before the server binds it), its output kept for the failure message, ready once it answers
a request of its own protocol, paused with SIGSTOP (a server that stops answering without closing its
sockets), and killed and reaped by its own pid, never by name. A subclass says only how to start it and how
to ask it whether it answers.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import tempfile
import time
from typing import Any

from esault.errors import ConfigError
from esault.testing import wait_until

__all__ = ["ServerProcess", "free_port"]


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now (another process may take it before the caller binds it)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class ServerProcess:
    """One server process on <host>:<port>; subclasses give `what`, `command()` and `probe()`."""

    what = "server"
    """For messages: "the tansu broker", "moto_server", ..."""

    def __init__(self, host: str = "127.0.0.1", port: int | None = None, start_timeout: float = 30.0) -> None:
        self._fixed_port = port is not None
        self.host = host
        self.port = port or free_port(host)
        self.start_timeout = start_timeout
        self.process: subprocess.Popen | None = None
        self._log: Any = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    # --- what a subclass says --------------------------------------------------------

    def command(self) -> list[str]:
        """The argv that starts the server on self.host:self.port (ConfigError if its binary is missing)."""
        raise NotImplementedError

    def probe(self) -> None:
        """Return once the server answered one request; raise (anything) while it does not yet."""
        raise NotImplementedError

    def process_env(self) -> dict[str, str] | None:
        """The server process's environment (None: this process's)."""
        return None

    # --- lifecycle -----------------------------------------------------------------------

    def start(self, attempts: int = 3) -> "ServerProcess":
        """Start the server and return once it answers; one that runs already is left as it is."""
        if self.process is not None and self.process.poll() is None:
            return self
        for attempt in range(attempts):
            try:
                return self._start()
            except ConfigError as exc:
                if "exited at start" not in str(exc) or attempt == attempts - 1 or self._fixed_port:
                    raise
                self.port = free_port(self.host)
                self._port_changed()
        raise AssertionError("unreachable")

    def _port_changed(self) -> None:
        """The port was chosen again (a subclass that derives addresses from it updates them)."""

    def _start(self) -> "ServerProcess":
        command = self.command()
        if self._log is not None:  # a server started again after kill(): its earlier output is not needed
            self._log.close()
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 - closed in stop(); read when the start fails
        self.process = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                        env=self.process_env())
        try:
            self._wait_until_it_answers()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_until_it_answers(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self.process is None or self.process.poll() is not None:
                raise ConfigError(f"{self.what} for {self.address} exited at start: {self.output()!r}")
            try:
                self.probe()
                return
            except Exception as exc:  # noqa: BLE001 - not up yet: ask again until the deadline
                last = exc
                time.sleep(0.05)
        raise ConfigError(f"{self.what} at {self.address} did not answer within {self.start_timeout}s "
                          f"(last: {last!r}); its output: {self.output()!r}")

    def output(self) -> str:
        """What the server printed so far (the tail)."""
        if self._log is None:
            return ""
        self._log.seek(0)
        return self._log.read().decode("utf-8", "replace")[-4000:]

    def pause(self) -> None:
        """SIGSTOP the server and return once the kernel says it is stopped: a thread of it may still be
        finishing a system call when the signal is sent, and a request it answered then would land in an
        outage a test meant to be total."""
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)
        wait_until(lambda: self.state().startswith("T"), 5.0, interval=0.001,
                   message=f"{self.what} at {self.address} stopped after SIGSTOP")

    def state(self) -> str:
        """The process's scheduler state from /proc ("T (stopped)" while paused), for test reports."""
        if self.process is None:
            return "no process"
        try:
            with open(f"/proc/{self.process.pid}/status") as status:
                return next((line.split(":", 1)[1].strip() for line in status if line.startswith("State:")), "?")
        except OSError as exc:
            return f"unreadable: {exc}"

    def resume(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)

    def kill(self) -> None:
        """kill -9 the server and reap it, keeping its port (clients hold the address) for start() again."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGCONT)
            process.kill()
            process.wait(10)
        self._fixed_port = True

    def stop(self) -> None:
        """Kill the server (SIGKILL: what it keeps in memory goes with it) and reap it."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGCONT)  # a paused server still dies, but not before this
            process.kill()
            process.wait(10)
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> Any:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
