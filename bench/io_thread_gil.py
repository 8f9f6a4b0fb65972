"""What the endpoint's I/O thread pays per frame for pyzmq giving up the GIL, alone and beside a busy thread.

    python bench/io_thread_gil.py [--frames 2000] [--size 1000] [--rounds 4] [--no-write]

A worker's I/O thread shares the GIL with its SPU threads. pyzmq gives the GIL
up around every send and recv, non-blocking ones too, and getting it back from
a thread that computes waits for a switch interval (5 ms). This measures one
thread reading `--frames` 3-part messages from a ROUTER (what the endpoint's
`_receive` does) and writing as many 2-part messages into a DEALER (its
`_flush`), through pyzmq's calls and through `esault.transport.gil_io.ZmqIO`
(libzmq called with the GIL kept), with no other thread and beside a thread
that only computes (an SPU in a busy worker). CPU (thread_time) and wall time
per message, the medians of `--rounds` rounds in which the two take turns.
Writes docs/PERFORMANCE.md's "io-thread-gil" section.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "bench"), str(ROOT)]

import zmq  # noqa: E402

from _report import publish  # noqa: E402
from esault.transport.gil_io import PyzmqIO, ZmqIO, loaded_libzmq  # noqa: E402


class Busy:
    """A thread that only computes, as an SPU does between its messages."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        x = 0
        while not self._stop.is_set():
            for _ in range(1000):
                x += 1

    def __enter__(self) -> "Busy":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def one_round(io, router: zmq.Socket, dealer: zmq.Socket, frames: int, payload: bytes) -> tuple[float, ...]:
    """(recv CPU, recv wall, send CPU, send wall) per message, in seconds."""
    for _ in range(frames):
        dealer.send_multipart([b"spu-1", payload])
    while router.getsockopt(zmq.EVENTS) & zmq.POLLIN == 0:
        time.sleep(0.001)  # inproc: the first frame is there at once; this only yields to the pipe
    cpu, wall = time.thread_time(), time.perf_counter()
    got = 0
    while got < frames:
        if io.recv_multipart(router) is not None:
            got += 1
    recv_cpu, recv_wall = time.thread_time() - cpu, time.perf_counter() - wall
    cpu, wall = time.thread_time(), time.perf_counter()
    for _ in range(frames):
        while not io.send_multipart(dealer, (b"spu-1", payload)):
            router.recv_multipart()
    send_cpu, send_wall = time.thread_time() - cpu, time.perf_counter() - wall
    while router.getsockopt(zmq.EVENTS) & zmq.POLLIN:
        router.recv_multipart()
    return recv_cpu / frames, recv_wall / frames, send_cpu / frames, send_wall / frames


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--frames", type=int, default=2000)
    ap.add_argument("--size", type=int, default=1000, help="bytes per frame (a small data batch)")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    library = loaded_libzmq()
    if library is None:
        sys.exit("pyzmq's libzmq is not a library of its own here: the endpoint uses pyzmq's calls, nothing to compare")
    ios = {"pyzmq's calls (before)": PyzmqIO(), "libzmq, GIL kept (ZmqIO)": ZmqIO(library)}
    ctx = zmq.Context()
    router, dealer = ctx.socket(zmq.ROUTER), ctx.socket(zmq.DEALER)
    for sock in (router, dealer):
        sock.setsockopt(zmq.SNDHWM, 0)
        sock.setsockopt(zmq.RCVHWM, 0)
    router.bind("inproc://io-thread-gil")
    dealer.connect("inproc://io-thread-gil")
    payload = b"x" * args.size
    results: dict[tuple[str, str], list[tuple[float, ...]]] = {}
    for round_ in range(args.rounds):
        for beside in ("no other thread", "a busy thread"):
            order = list(ios) if round_ % 2 == 0 else list(ios)[::-1]
            for name in order:
                if beside == "a busy thread":
                    with Busy():
                        time.sleep(0.02)
                        figures = one_round(ios[name], router, dealer, args.frames, payload)
                else:
                    figures = one_round(ios[name], router, dealer, args.frames, payload)
                results.setdefault((beside, name), []).append(figures)
    rows = []
    before = list(ios)[0]
    for (beside, name), runs in results.items():
        med = [statistics.median(r[i] for r in runs) * 1e6 for i in range(4)]
        base = results[(beside, before)]
        ratio = [statistics.median(r[i] / b[i] for r, b in zip(runs, base)) for i in range(4)]  # round by round
        rows.append(f"| {beside} | {name} | {med[0]:.1f} us ({ratio[0]:.2f}) | {med[1]:.1f} us ({ratio[1]:.3f}) | "
                    f"{med[2]:.1f} us ({ratio[2]:.2f}) | {med[3]:.1f} us ({ratio[3]:.3f}) |")
    text = (f"### The I/O thread's reads and writes, and the GIL\n\n`python bench/io_thread_gil.py` on "
            f"{time.strftime('%Y-%m-%d')}: {args.frames:,} messages of {args.size:,} bytes read from a ROUTER "
            f"(3 parts) and written into a DEALER (2 parts) by one thread, alone and beside a thread that only "
            f"computes (a busy SPU), {args.rounds} rounds, the two ways taking turns; Python "
            f"{platform.python_version()}, pyzmq {zmq.__version__}, libzmq {zmq.zmq_version()}. Medians per "
            "message, and in brackets the median of the rounds' ratios to pyzmq's calls beside the same thread. "
            "docs/TRANSPORT.md, \"The GIL and the I/O thread\", says why and what it changed end to end.\n\n"
            "| beside it | calls | read, CPU | read, wall | write, CPU | write, wall |\n"
            "| --- | --- | ---: | ---: | ---: | ---: |\n" + "\n".join(rows))
    publish("io-thread-gil", text, write=not args.no_write)
    router.close(linger=0)
    dealer.close(linger=0)
    ctx.term()


if __name__ == "__main__":
    main()
