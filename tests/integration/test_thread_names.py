"""esault's threads carry their names at the OS level, where `top -H` and /proc/<pid>/task/*/comm see them."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from esault.testing import wait_until
from esault.thread_names import OS_NAME_BYTES, name_os_thread, os_named, os_thread_name
from esault.transport.endpoint import Endpoint

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/<pid>/task/*/comm is Linux's")


def comm(native_id: int) -> str:
    return Path(f"/proc/self/task/{native_id}/comm").read_text().strip()


def comm_seen_by(target_wrapper, name: str) -> str:
    """The OS name a thread called `name` has while its target runs (target wrapped by `target_wrapper`)."""
    seen: dict[str, str] = {}

    def body() -> None:
        seen["comm"] = comm(threading.get_native_id())

    thread = threading.Thread(target=target_wrapper(body), name=name)
    thread.start()
    thread.join(10)
    return seen["comm"]


def test_a_name_drops_its_esault_prefix_and_keeps_whole_characters_within_15_bytes():
    assert os_thread_name("esault-endpoint-driver") == "endpoint-driver"
    assert os_thread_name("spu-12 wordcount-splitter") == "spu-12 wordcoun"
    half = "spu-3 aaaaaaaa\u00f6b"  # the ö's two bytes are the 15th and the 16th: it goes whole
    assert os_thread_name(half) == "spu-3 aaaaaaaa"
    assert len("spu-3 zählwör".encode("utf-8")) == OS_NAME_BYTES
    assert os_thread_name("spu-3 zählwörter") == "spu-3 zählwör"


def test_a_thread_started_through_os_named_carries_its_python_name():
    assert comm_seen_by(os_named, "esault-probe-thread") == "probe-thread"


def test_a_thread_started_without_it_shows_another_name():
    """The check above can fail: an unnamed thread shows what it inherited, not its Python name."""
    assert comm_seen_by(lambda body: body, "esault-probe-thread") != "probe-thread"


def test_a_thread_can_name_itself_as_it_runs():
    seen: dict[str, str] = {}

    def body() -> None:
        name_os_thread("spu-41 count")
        seen["comm"] = comm(threading.get_native_id())

    thread = threading.Thread(target=body)
    thread.start()
    thread.join(10)
    assert seen["comm"] == "spu-41 count"


def test_the_endpoints_io_thread_is_named_after_its_process():
    endpoint = Endpoint("w7", lambda *args: None)
    try:
        native_id = endpoint._thread.native_id
        wait_until(lambda: comm(native_id) == "endpoint-w7", timeout=10, message="the I/O thread's OS name")
    finally:
        endpoint.close()
