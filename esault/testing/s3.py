"""A real S3-compatible server for tests: moto's (`moto_server`, in esault's `test` extra), on 127.0.0.1.

`S3Server` starts it on a free port, waits until it answers, creates a bucket, and kills it on `stop()`.
`url(prefix)` is a checkpoint_storage URL for it; `env()` the AWS variables a process needs to reach it
(credentials moto accepts, the endpoint, a region), which child processes inherit. `pause()`/`resume()`
send SIGSTOP/SIGCONT: a store that stops answering without closing its sockets. moto >= 5.2.5: 5.2.1's
CompleteMultipartUpload answer made pyarrow's uploads fail (getmoto/moto#10055).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from esault.errors import ConfigError
from esault.testing.kafka import _free_port

__all__ = ["S3Server"]


class S3Server:
    """One moto server process (in-memory) on 127.0.0.1:<port>, with one bucket."""

    def __init__(self, bucket: str = "esault", host: str = "127.0.0.1", port: int | None = None,
                 start_timeout: float = 30.0) -> None:
        self.bucket = bucket
        self.host = host
        self.port = port or _free_port()
        self.start_timeout = start_timeout
        self.process: subprocess.Popen | None = None
        self._log: Any = None

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.port}"

    def url(self, prefix: str = "checkpoints") -> str:
        """A checkpoint_storage URL in this server's bucket, its endpoint in the query."""
        return f"s3://{self.bucket}/{prefix}?endpoint_override={self.endpoint}&scheme=http&region=us-east-1"

    def env(self) -> dict[str, str]:
        """What a process needs to reach this server the usual AWS way (no endpoint in the URL needed)."""
        return {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1",
                "AWS_ENDPOINT_URL": f"http://{self.endpoint}", "AWS_EC2_METADATA_DISABLED": "true"}

    def start(self) -> "S3Server":
        binary = shutil.which("moto_server") or str(Path(sys.executable).with_name("moto_server"))
        if not os.path.exists(binary):
            raise ConfigError("no moto_server: install the test extra (pip install 'esault[test]', which brings "
                              "moto[server])")
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen([binary, "-H", self.host, "-p", str(self.port)], stdout=self._log,
                                        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            self._wait_until_it_answers()
        except BaseException:
            self.stop()
            raise
        return self

    def filesystem(self) -> Any:
        from pyarrow import fs

        return fs.S3FileSystem(endpoint_override=self.endpoint, scheme="http", region="us-east-1",
                               access_key="testing", secret_key="testing", allow_bucket_creation=True,
                               connect_timeout=2, request_timeout=5)

    def _wait_until_it_answers(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self.process is None or self.process.poll() is not None:
                raise ConfigError(f"moto_server on {self.endpoint} exited at start: {self.output()!r}")
            try:
                self.filesystem().create_dir(self.bucket)
                return
            except OSError as exc:  # not up yet: ask again until the deadline
                last = exc
                time.sleep(0.1)
        raise ConfigError(f"moto_server on {self.endpoint} did not answer within {self.start_timeout}s "
                          f"(last: {last!r}); its output: {self.output()!r}")

    def output(self) -> str:
        if self._log is None:
            return ""
        self._log.seek(0)
        return self._log.read().decode(errors="replace")[-2000:]

    def pause(self) -> None:
        if self.process is not None:
            self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self.process is not None:
            self.process.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        if self.process is not None:
            self.process.send_signal(signal.SIGCONT)
            self.process.kill()
            self.process.wait(10)
            self.process = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> "S3Server":
        return self.start() if self.process is None else self

    def __exit__(self, *exc: Any) -> None:
        self.stop()
