"""Start Spark's JVM without running Python in a forked child: a multi-threaded process must not.

PySpark starts its gateway JVM with `Popen(..., preexec_fn=...)` (to ignore SIGINT there). A preexec_fn
makes CPython fork() and run Python code in the child before exec, which POSIX only allows for
async-signal-safe calls in a multi-threaded process: whatever another thread held at the fork (a lock of
pyarrow's S3 client, the AWS SDK's, libcurl's) stays held in the child, and its fork handlers run there.
In the compose driver, with checkpoints on S3, the child died of SIGSEGV before exec every time and the
Spark sink could not start (JAVA_GATEWAY_EXITED). Without a preexec_fn CPython vfork()s and execs at once;
`start_new_session` keeps terminal SIGINT away from the JVM as the ignore did (a new session has no
controlling terminal), and the JVM still ends when its stdin closes with the driver.
"""

from __future__ import annotations

import subprocess
from typing import Any

__all__ = ["launch_without_preexec"]


def launch_without_preexec() -> None:
    """Make pyspark.java_gateway start the JVM with start_new_session instead of a preexec_fn (idempotent)."""
    import pyspark.java_gateway as gateway

    if getattr(gateway.Popen, "esault_without_preexec", False):
        return
    original = gateway.Popen

    def popen(command: Any, **kwargs: Any) -> subprocess.Popen:
        if kwargs.pop("preexec_fn", None) is not None:
            kwargs["start_new_session"] = True
        return original(command, **kwargs)

    popen.esault_without_preexec = True  # type: ignore[attr-defined]
    gateway.Popen = popen
