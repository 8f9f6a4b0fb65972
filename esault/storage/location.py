"""Parse a `checkpoint_storage` setting into a pyarrow filesystem and the root inside it.

Accepted: a local path (`/var/esault`, `relative/dir`, `file:///var/esault`) or `s3://bucket/prefix`. An
S3 location takes its endpoint, region and credentials the usual way: the AWS environment variables and
config files (pyarrow's AWS SDK reads `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_PROFILE`,
`~/.aws/config` and `credentials`, instance roles); the endpoint of an S3-compatible store (MinIO, Ceph, a
local moto server, GCS's interop endpoint) from `AWS_ENDPOINT_URL_S3` or `AWS_ENDPOINT_URL` (the AWS SDKs'
names, which this pyarrow does not read itself) or the URL's own query, as pyarrow spells it:
`s3://bucket/prefix?endpoint_override=127.0.0.1:9000&scheme=http&region=us-east-1`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from esault.errors import ConfigError

__all__ = ["StorageLocation"]

_S3_OPTIONS = {"endpoint_override", "scheme", "region", "access_key", "secret_key", "session_token",
               "connect_timeout", "request_timeout", "force_virtual_addressing"}
"""The S3FileSystem options a URL's query may set (numbers and booleans parsed)."""


@dataclass(frozen=True)
class StorageLocation:
    """A parsed location: `url` as given (for messages, never with secrets), `kind` "local" or "s3", `root`
    the path inside the filesystem (for S3: "bucket/prefix"), and the S3 options."""

    url: str
    kind: str
    root: str
    options: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def parse(cls, value: str | os.PathLike[str]) -> "StorageLocation":
        text = os.fspath(value)
        if not isinstance(text, str) or not text.strip():
            raise ConfigError(f"checkpoint_storage must be a local path or s3://bucket/prefix, got {value!r}")
        parts = urlsplit(text)
        if parts.scheme in ("", "file") or len(parts.scheme) == 1:  # a path (a Windows drive letter too)
            path = parts.path if parts.scheme == "file" else text
            return cls(text, "local", str(Path(path).expanduser().resolve()))
        if parts.scheme != "s3":
            raise ConfigError(f"checkpoint_storage {text!r}: the scheme {parts.scheme!r} is not supported; use a "
                              "local path, or s3://bucket/prefix for S3 and S3-compatible stores (MinIO, Ceph, "
                              "GCS's interop endpoint)")
        if not parts.netloc:
            raise ConfigError(f"checkpoint_storage {text!r} names no bucket: write s3://bucket/prefix")
        options: dict[str, Any] = {}
        for name, raw in parse_qsl(parts.query, keep_blank_values=True):
            if name not in _S3_OPTIONS:
                raise ConfigError(f"checkpoint_storage {_without_query(text)!r}: unknown option {name!r} in its "
                                  f"query; known: {', '.join(sorted(_S3_OPTIONS))}")
            options[name] = _option(name, raw)
        if "endpoint_override" not in options:
            endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
            if endpoint:
                scheme, _, host = endpoint.partition("://")
                options["endpoint_override"] = host.rstrip("/") if host else endpoint
                if host:
                    options.setdefault("scheme", scheme)
        if "region" not in options:
            region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
            if region:
                options["region"] = region
        root = f"{parts.netloc}/{parts.path.strip('/')}".rstrip("/")
        return cls(_without_query(text), "s3", root, tuple(sorted(options.items())))

    @property
    def is_local(self) -> bool:
        return self.kind == "local"

    def filesystem(self) -> Any:
        """A new pyarrow filesystem for this location (one per thread or process is cheap: it holds a client)."""
        from pyarrow import fs

        if self.is_local:
            return fs.LocalFileSystem()
        options = dict(self.options)
        options.setdefault("connect_timeout", 5.0)
        options.setdefault("request_timeout", 30.0)
        # A small object is one PutObject when the stream closes (not a multipart upload of three requests);
        # a large one is still uploaded in parts, and visible only once whole.
        return fs.S3FileSystem(allow_delayed_open=True, **options)

    def child(self, *names: str) -> "StorageLocation":
        """The location of a folder inside this one (a job's, under the storage root)."""
        root = "/".join([self.root.rstrip("/"), *names])
        url = "/".join([self.url.rstrip("/"), *names])
        return StorageLocation(url, self.kind, root, self.options)


def _without_query(url: str) -> str:
    """The URL without its query (which may hold credentials): what messages show."""
    return url.split("?", 1)[0]


def _option(name: str, raw: str) -> Any:
    if name in ("connect_timeout", "request_timeout"):
        try:
            return float(raw)
        except ValueError:
            raise ConfigError(f"checkpoint_storage option {name}={raw!r} must be seconds") from None
    if name == "force_virtual_addressing":
        return raw.lower() in ("1", "true", "yes")
    return raw
