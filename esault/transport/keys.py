"""CurveZMQ key pairs and key files: who a process is, and whom it lets in.

Keys are Curve25519 pairs in Z85 text (40 characters), as `zmq.curve_keypair`
makes them. Key files are zmq.auth certificates (`name.key` holds the public
key, `name.key_secret` both), so `zmq.auth` tools read them too; `esault keys
generate` writes them, secret files with mode 0600.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import zmq
import zmq.auth

from esault.errors import ConfigError

__all__ = ["KeyPair", "generate_key_files", "load_keypair", "load_public_keys"]


@dataclass(frozen=True, slots=True)
class KeyPair:
    """A process's Curve identity: `public` goes to peers, `secret` never leaves the process."""

    public: bytes
    secret: bytes = b""

    @classmethod
    def generate(cls) -> "KeyPair":
        public, secret = zmq.curve_keypair()
        return cls(public, secret)

    def __post_init__(self) -> None:
        for name in ("public", "secret") if self.secret else ("public",):
            value = getattr(self, name)
            if not isinstance(value, bytes) or len(value) != 40:
                raise ConfigError(f"a Curve {name} key is 40 Z85 characters, got {len(value) if isinstance(value, bytes) else value!r}")

    def __repr__(self) -> str:  # never print the secret
        return f"KeyPair(public={self.public.decode()!r}{', secret=...' if self.secret else ''})"


def load_keypair(path: str | os.PathLike[str]) -> KeyPair:
    """This process's key pair from a `*.key_secret` certificate; ConfigError says what is wrong."""
    public, secret = _load(path)
    if not secret:
        raise ConfigError(f"{path} holds no secret key: pass the `.key_secret` file (from `esault keys generate`), "
                          "not the public `.key` file")
    return KeyPair(public, secret)


def load_public_keys(path: str | os.PathLike[str], prefix: str = "") -> list[bytes]:
    """Public keys from one certificate file, or from the `{prefix}*.key` files of a directory
    (so `--worker-keys DIR` on a folder made by `esault keys generate` takes only worker-N.key)."""
    where = Path(path)
    if where.is_dir():
        files = sorted(p for p in where.iterdir() if p.suffix == ".key" and p.name.startswith(prefix) and p.is_file())
        if not files:
            raise ConfigError(f"{where} holds no `{prefix}*.key` public key files; create them with "
                              "`esault keys generate`")
    else:
        files = [where]
    return [_load(f)[0] for f in files]


def generate_key_files(directory: str | os.PathLike[str], workers: int, clients: int = 1,
                       enroll: bool = False) -> list[Path]:
    """Write driver, worker-1..N and client-1..M certificates (and `enroll`, shared by replica workers) into
    `directory`; the files written.

    Refuses to overwrite: replacing keys of a running cluster locks its
    workers out, so that must be a deliberate `rm` first.
    """
    if type(workers) is not int or workers < 0 or type(clients) is not int or clients < 0:
        raise ConfigError(f"--workers and --clients must be ints >= 0, got {workers!r} and {clients!r}")
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    names = ["driver", *(f"worker-{i}" for i in range(1, workers + 1)), *(f"client-{i}" for i in range(1, clients + 1)),
             *(["enroll"] if enroll else [])]
    taken = [n for n in names if (folder / f"{n}.key").exists() or (folder / f"{n}.key_secret").exists()]
    if taken:
        raise ConfigError(f"{folder} already has keys for {', '.join(taken)}; remove them first to make new ones")
    written: list[Path] = []
    for name in names:
        public_file, secret_file = zmq.auth.create_certificates(str(folder), name)
        os.chmod(secret_file, 0o600)
        written += [Path(public_file), Path(secret_file)]
    return written


def _load(path: str | os.PathLike[str]) -> tuple[bytes, bytes]:
    try:
        public, secret = zmq.auth.load_certificate(str(path))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read a Curve key from {path}: {exc}; create key files with "
                          "`esault keys generate DIR --workers N`") from None
    if not public or len(public) != 40:
        raise ConfigError(f"{path} is not a zmq certificate with a 40-character public key")
    return public, secret or b""
