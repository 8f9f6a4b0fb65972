"""Which keys a cluster's processes hold and admit, from key files or made fresh per cluster.

Local clusters (`LocalCluster(workers=N)`, `esault run`) make every key pair
fresh: each spawned worker gets its pair and the driver's public key on its
stdin (never argv or the environment, which other users may read), and
`esault status` finds a client pair in a file only this user can read
(`status_key_file`). A static cluster reads zmq certificates made by
`esault keys generate` (docs/SECURITY.md).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from esault.errors import ConfigError
from esault.transport.keys import KeyPair, load_keypair, load_public_keys
from esault.transport.trust import KeyRing, Role

__all__ = ["ClusterKeys", "WorkerKeys", "read_status_keys", "remove_status_keys", "status_key_file",
           "write_status_keys"]


@dataclass(frozen=True)
class ClusterKeys:
    """The driver's key pair and the public keys it admits: workers, and `esault status` clients."""

    driver: KeyPair
    workers: tuple[bytes, ...] = ()
    clients: tuple[bytes, ...] = ()
    local_client: KeyPair | None = field(default=None, repr=False)
    """A status client pair made for this cluster, written to status_key_file() for `esault status`."""
    enroll: tuple[bytes, ...] = ()
    """Enrollment public keys: replica workers that share one ask the driver for a key of their own
    (esault.cluster.enrollment)."""

    @classmethod
    def fresh(cls) -> "ClusterKeys":
        """New keys for one cluster: no files, no user action."""
        client = KeyPair.generate()
        return cls(KeyPair.generate(), (), (client.public,), client)

    @classmethod
    def from_files(cls, secret_key: str | os.PathLike[str], worker_keys: str | os.PathLike[str] | None,
                   client_keys: str | os.PathLike[str] | None = None,
                   enroll_keys: str | os.PathLike[str] | None = None) -> "ClusterKeys":
        """The driver's `driver.key_secret`, the workers' public keys (a `.key` file or a folder of them),
        and, optionally, status clients' and enrollment public keys (`enroll.key`: replica workers)."""
        clients = tuple(load_public_keys(client_keys, "client")) if client_keys else ()
        enroll = tuple(load_public_keys(enroll_keys, "enroll")) if enroll_keys else ()
        workers = tuple(load_public_keys(worker_keys, "worker")) if worker_keys else ()
        if not workers and not enroll:
            raise ConfigError("a static cluster admits workers by their keys: give --worker-keys (worker-N.key "
                              "files) or --enroll-key (enroll.key, shared by replica workers), or both")
        return cls(load_keypair(secret_key), workers, clients, enroll=enroll)

    def ring(self) -> KeyRing:
        """The driver's KeyRing: itself as 'driver', every worker and client key admitted (names bound at join)."""
        ring = KeyRing(self.driver, "driver", Role.DRIVER)
        for role, keys in ((Role.WORKER, self.workers), (Role.CLIENT, self.clients), (Role.ENROLL, self.enroll)):
            for key in keys:
                if key == self.driver.public:
                    raise ConfigError(f"the driver's own public key is listed among the {role.value} keys; "
                                      f"list only {role.value}-N.key files")
                ring.admit(key, role)
        return ring


@dataclass(frozen=True)
class WorkerKeys:
    """A worker's key pair and the one driver key it accepts commands from."""

    own: KeyPair
    driver: bytes

    @classmethod
    def from_files(cls, secret_key: str | os.PathLike[str], driver_key: str | os.PathLike[str]) -> "WorkerKeys":
        keys = load_public_keys(driver_key)
        if len(keys) != 1:
            raise ConfigError(f"--driver-key must name the driver's one public key file, found {len(keys)} keys "
                              f"in {driver_key}")
        return cls(load_keypair(secret_key), keys[0])

    def to_json(self) -> str:
        return json.dumps({"public": self.own.public.decode(), "secret": self.own.secret.decode(),
                           "driver": self.driver.decode()})

    @classmethod
    def from_json(cls, text: str, source: str = "stdin") -> "WorkerKeys":
        """The keys to_json() wrote, handed over by the driver that made them (on a worker's stdin, or as a Ray
        actor's argument); `source` names where they came from in the error."""
        try:
            data = json.loads(text)
            return cls(KeyPair(data["public"].encode(), data["secret"].encode()), data["driver"].encode())
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ConfigError(f"worker keys on {source} are not {{public, secret, driver}} JSON ({exc}); "
                              "`--keys-stdin` is for workers the driver spawns itself") from None

    @classmethod
    def read(cls, stream: IO[str]) -> "WorkerKeys":
        return cls.from_json(stream.readline())

    def ring(self, name: str) -> KeyRing:
        ring = KeyRing(self.own, name, Role.WORKER)
        ring.admit(self.driver, Role.DRIVER, "driver")
        return ring


def status_key_file(address: str) -> Path:
    """Where a driver listening at HOST:PORT leaves the status client's keys for this user."""
    base = Path(os.environ.get("ESAULT_RUNTIME_DIR") or Path.home() / ".esault" / "run")
    host_port = address.replace("tcp://", "").replace(":", "_").replace("/", "_")
    return base / f"{host_port}.status-key"


def write_status_keys(address: str, client: KeyPair, driver_public: bytes) -> Path:
    """Write the status client pair and the driver's public key, readable by this user only."""
    path = status_key_file(address)
    path.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump({"public": client.public.decode(), "secret": client.secret.decode(),
                   "driver": driver_public.decode()}, out)
    return path


def read_status_keys(address: str) -> WorkerKeys | None:
    """The status client's pair (as `own`) and the driver's key, if a local driver left them."""
    path = status_key_file(address)
    try:
        return WorkerKeys.from_json(path.read_text())
    except OSError:
        return None


def remove_status_keys(address: str) -> None:
    try:
        status_key_file(address).unlink()
    except OSError:
        pass
