"""Spark's JVM is started without a preexec_fn: CPython then execs at once instead of running Python in a
forked child of a multi-threaded process (which died of SIGSEGV beside pyarrow's S3 threads in the compose
driver). The JVM still gets no terminal SIGINT: it runs in a session of its own."""

from __future__ import annotations

import os
import subprocess
import sys

from spark_sink.jvm_launch import launch_without_preexec


def test_the_gateway_popen_drops_the_preexec_fn_and_starts_a_new_session(tmp_path):
    import pyspark.java_gateway as gateway

    launch_without_preexec()
    launch_without_preexec()  # idempotent: one wrapper, not two
    marker = tmp_path / "preexec-ran"
    child = gateway.Popen([sys.executable, "-c", "import os; print(os.getsid(0))"], stdout=subprocess.PIPE,
                          stdin=subprocess.PIPE, preexec_fn=lambda: marker.write_text("ran"), text=True)
    out, _ = child.communicate(timeout=60)
    assert child.returncode == 0
    assert int(out) == child.pid != os.getsid(0), "the JVM's session is its own"
    assert not marker.exists(), "no Python ran in the forked child"
    assert getattr(gateway.Popen, "esault_without_preexec", False)
