"""A real S3-compatible server for tests: moto's (`moto_server`, in esault's `test` extra), on 127.0.0.1.

`S3Server` starts it on a free port (esault.testing.server_process), ready once it made the bucket, and kills it
on `stop()`.
`url(prefix)` is a checkpoint_storage URL for it; `env()` the AWS variables a process needs to reach it
(credentials moto accepts, the endpoint, a region), which child processes inherit. `pause()`/`resume()`
send SIGSTOP/SIGCONT: a store that stops answering without closing its sockets. moto >= 5.2.5: 5.2.1's
CompleteMultipartUpload answer made pyarrow's uploads fail (getmoto/moto#10055).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

from esault.errors import ConfigError
from esault.testing.server_process import ServerProcess

__all__ = ["S3Server"]


class S3Server(ServerProcess):
    """One moto server process (in-memory) on 127.0.0.1:<port>, with one bucket."""

    what = "moto_server"

    def __init__(self, bucket: str = "esault", host: str = "127.0.0.1", port: int | None = None,
                 start_timeout: float = 30.0) -> None:
        super().__init__(host, port, start_timeout)
        self.bucket = bucket

    @property
    def endpoint(self) -> str:
        return self.address

    def url(self, prefix: str = "checkpoints") -> str:
        """A checkpoint_storage URL in this server's bucket, its endpoint in the query."""
        return f"s3://{self.bucket}/{prefix}?endpoint_override={self.endpoint}&scheme=http&region=us-east-1"

    def env(self) -> dict[str, str]:
        """What a process needs to reach this server the usual AWS way (no endpoint in the URL needed)."""
        return {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1",
                "AWS_ENDPOINT_URL": f"http://{self.endpoint}", "AWS_EC2_METADATA_DISABLED": "true"}

    def command(self) -> list[str]:
        binary = shutil.which("moto_server") or str(Path(sys.executable).with_name("moto_server"))
        if not os.path.exists(binary):
            raise ConfigError("no moto_server: install the test extra (pip install 'esault[test]', which brings "
                              "moto[server])")
        return [binary, "-H", self.host, "-p", str(self.port)]

    def probe(self) -> None:
        """Answers once the bucket is made (the one request every test needs first)."""
        self.filesystem().create_dir(self.bucket)

    def filesystem(self) -> Any:
        from pyarrow import fs

        return fs.S3FileSystem(endpoint_override=self.endpoint, scheme="http", region="us-east-1",
                               access_key="testing", secret_key="testing", allow_bucket_creation=True,
                               connect_timeout=2, request_timeout=5)

    def __enter__(self) -> "S3Server":
        return self.start() if self.process is None else self
