"""A process of simulated workers: `python -m esault.testing.sim.workers --driver HOST:PORT [...] < keys`.

Reads one JSON line per worker on stdin ({"name": ..., "keys": WorkerKeys.to_json()}: keys the driver made, no key
on disk), joins each to the driver, and every HEARTBEAT_INTERVAL moves each stand-in SPU's counts by the paced
rate in `--rate-file` (tuples a second per SPU; 0 = idle; re-read every second, so one run measures idle and
loaded) and sends the heartbeats that are due. Exits when every worker was told Shutdown, or on SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
import time
from pathlib import Path

from esault.cluster.credentials import WorkerKeys
from esault.cluster.worker import HEARTBEAT_INTERVAL
from esault.testing.sim.host import SimWorker


def _rate(path: Path | None, current: float) -> float:
    if path is None:
        return current
    try:
        return max(0.0, float(path.read_text().strip() or 0))
    except (OSError, ValueError):
        return current


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--driver", required=True)
    parser.add_argument("--rate-file", type=Path, default=None)
    parser.add_argument("--state-rows", type=int, default=4, help="rows a loaded SPU changes between checkpoints")
    parser.add_argument("--quiet", type=float, default=1.0, help="seconds between heartbeats that say nothing new")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s sim %(levelname)s %(name)s: %(message)s")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    workers = []
    for line in sys.stdin:
        if not line.strip():
            break
        entry = json.loads(line)
        workers.append(SimWorker(args.driver, entry["name"], WorkerKeys.from_json(entry["keys"]), args.state_rows,
                                 args.quiet))
    rate, read_at, last = 0.0, 0.0, time.monotonic()
    carry: dict[int, float] = {}
    try:
        while not stop.wait(HEARTBEAT_INTERVAL) and not all(w.done.is_set() for w in workers):
            now = time.monotonic()
            if now - read_at >= 1.0:
                rate, read_at = _rate(args.rate_file, rate), now
            for worker in workers:
                for sim in worker.sims():
                    due = carry.get(sim.spu_id, 0.0) + rate * (now - last)
                    whole = int(due)
                    carry[sim.spu_id] = due - whole
                    sim.advance(whole)
                worker.beat(now)
            last = now
    finally:
        for worker in workers:
            worker.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
