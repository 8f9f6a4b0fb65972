"""What CurveZMQ costs the data path: the same data frames over loopback, encrypted and not.

Every esault socket is CurveZMQ (docs/SECURITY.md), so the throughput bench
(bench/throughput.py) already runs encrypted; this bench isolates the price.
It sends word-count DataBatch frames (1,024 words each, encoded by esault's
wire codec, as the split stage sends them) from a DEALER to a ROUTER in a
second process, once with Curve (a ZAP handler admitting the key, as the
endpoint does) and once over plain TCP, interleaved rounds in one run, and
reports words/s for each and the ratio. Writes docs/PERFORMANCE.md between
<!-- bench:encryption:start --> and <!-- bench:encryption:end --> (--no-write to skip).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import random
import statistics
import sys
import time
from pathlib import Path

import zmq
from zmq.auth.thread import ThreadAuthenticator

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import write_section  # noqa: E402

from esault.messages.data import DataBatch  # noqa: E402
from esault.transport.wire import encode_frame  # noqa: E402

WORDS_PER_FRAME = 1024


class _Allow:
    def __init__(self, key: bytes) -> None:
        self.key = key

    def callback(self, domain: str, key: bytes) -> bool:
        return key == self.key


def _frames(n: int) -> list[bytes]:
    rng = random.Random(1)
    vocab = [f"w{i}" for i in range(100_000)]
    frames = []
    for i in range(n):
        words = [vocab[min(int(rng.paretovariate(1.1)) - 1, 99_999)] for _ in range(WORDS_PER_FRAME)]
        frames.append(encode_frame(DataBatch(1, "split", words, [1] * WORDS_PER_FRAME, [i], [i])))
    return frames


def _receiver(curve: bool, keys: dict, count: int, ready, address_out) -> None:
    ctx = zmq.Context()
    auth = None
    router = ctx.socket(zmq.ROUTER)
    if curve:
        auth = ThreadAuthenticator(ctx)
        auth.start()
        auth.configure_curve_callback("*", credentials_provider=_Allow(keys["client_public"]))
        router.curve_server = True
        router.curve_secretkey, router.curve_publickey = keys["server_secret"], keys["server_public"]
    port = router.bind_to_random_port("tcp://127.0.0.1")
    address_out.put(f"tcp://127.0.0.1:{port}")
    for _ in range(count):
        router.recv_multipart(copy=False)
    ready.set()
    router.close(0)
    if auth:
        auth.stop()
    ctx.term()


def one_round(curve: bool, frames: list[bytes], repeat: int) -> float:
    """Words/s for `repeat` passes over `frames`, sender in this process, receiver in another."""
    server_public, server_secret = zmq.curve_keypair()
    client_public, client_secret = zmq.curve_keypair()
    keys = {"server_public": server_public, "server_secret": server_secret, "client_public": client_public}
    count = len(frames) * repeat
    done, addresses = mp.Event(), mp.Queue()
    receiver = mp.Process(target=_receiver, args=(curve, keys, count, done, addresses))
    receiver.start()
    address = addresses.get(timeout=30)
    ctx = zmq.Context()
    dealer = ctx.socket(zmq.DEALER)
    dealer.setsockopt(zmq.SNDHWM, 1000)
    if curve:
        dealer.curve_publickey, dealer.curve_secretkey, dealer.curve_serverkey = client_public, client_secret, server_public
    dealer.connect(address)
    actor = b"spu-1"
    dealer.send_multipart([actor, frames[0]])  # the handshake, outside the timed part
    started = time.perf_counter()
    for _ in range(repeat):
        for frame in frames[1:] if _ == 0 else frames:
            dealer.send_multipart([actor, frame], copy=False)
    if not done.wait(120):
        raise RuntimeError("the receiver did not get every frame")
    elapsed = time.perf_counter() - started
    receiver.join(30)
    dealer.close(0)
    ctx.term()
    return (count - 1) * WORDS_PER_FRAME / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--frames", type=int, default=500, help="distinct frames (default 500)")
    parser.add_argument("--repeat", type=int, default=8, help="passes over them per round (default 8)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per mode, interleaved (default 3)")
    parser.add_argument("--job-rate", type=float, default=1_211_027,
                        help="words/s of the word count to price the overhead at (default: docs/PERFORMANCE.md's)")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    frames = _frames(args.frames)
    size = statistics.mean(len(f) for f in frames)
    results: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(args.rounds):
        for curve in (False, True):
            results[curve].append(one_round(curve, frames, args.repeat))
    plain, curve = statistics.median(results[False]), statistics.median(results[True])
    extra_ns = (1 / curve - 1 / plain) * 1e9
    share = args.job_rate * (1 / curve - 1 / plain) * 100
    throughput_doc = Path(__file__).resolve().parents[1] / "docs" / "PERFORMANCE.md"
    lines = [
        "| link (loopback, one sender, one receiver process) | words/s (median of "
        f"{args.rounds}) | MB/s |",
        "| --- | ---: | ---: |",
        f"| plain TCP (NULL mechanism) | {plain:,.0f} | {plain / WORDS_PER_FRAME * size / 1e6:,.0f} |",
        f"| CurveZMQ (what esault uses) | {curve:,.0f} | {curve / WORDS_PER_FRAME * size / 1e6:,.0f} |",
        "",
        f"On a saturated link Curve takes {(1 - curve / plain) * 100:.1f}% of the raw capacity for "
        f"{WORDS_PER_FRAME}-word DataBatch frames ({size:,.0f} bytes each, {args.frames * args.repeat:,} frames "
        f"per round): **{extra_ns:.1f} ns per word** more. At the word count's {args.job_rate:,.0f} words/s "
        f"(the table above, itself measured encrypted) that is **{share:.1f}% of one core**, against the target "
        "of < 15% throughput cost; every word crosses one link (split -> count).",
        "",
        f"`python bench/encryption.py` on {time.strftime('%Y-%m-%d')}: pyzmq {zmq.__version__}, libzmq "
        f"{zmq.zmq_version()}.",
    ]
    table = "\n".join(lines)
    print(table)
    if not args.no_write:
        write_section(throughput_doc, "encryption", "### What encryption costs the data path\n\n" + table)


if __name__ == "__main__":
    main()
