"""Benchmark: the same word count on two peer engines, Bytewax and Pathway, over one input file.

    python bench/peers.py                       # 2M words, each engine twice: ~40 s on 2 cores
    python bench/peers.py --words 500000 --repeat 3

The input is bench/wordcount_input.py's: lines of 10 Zipf(1.1)-distributed
words over a 100,000-word vocabulary. Each engine counts every word and its
output is checked against `oracle()` (collections.Counter): `exact` is True
only when every count matches and no word is missing, extra or duplicated.

- Bytewax (0.21): lines -> op.flat_map(str.split) -> op.count_final (keyed by
  the word, counts emitted at EOF), 2 worker processes of one worker each,
  joined by TCP on loopback (what `python -m bytewax.testing -p 2` does, with
  ports chosen here). Each worker reads its own half of the file (a
  DynamicSource over newline-aligned byte ranges: bytewax's FileSource is one
  partition, so one worker would read everything) and writes the counts of
  the words routed to it to its own file.
- Pathway (0.33): pw.io.plaintext.read(mode="static") -> split (a typed Python
  UDF: 0.33's string namespace has no split) -> flatten -> groupby(word).
  reduce(count) -> pw.io.csv.write, in one process with PATHWAY_THREADS=2.
  Pathway reads one file on one worker; the groupby is exchanged by key.

Every engine runs in subprocesses of its own (its threads and processes never
share this interpreter, and a watchdog kills them on timeout). A worker
imports its engine and builds its dataflow, reports ready on stdout, and
waits for "go" on stdin; the clock starts when the last worker is ready and
"go" is sent, and stops when the last worker's run call returns (CLOCK_MONOTONIC
is system-wide on Linux, so the workers' readings compare). So the time
includes the engine's own start (cluster connection, worker threads), reading
and splitting the file, counting, and writing the output; it excludes
interpreter start-up, imports, dataflow building and teardown, which the note
gives as the whole subprocess wall time.
"""

from __future__ import annotations

import argparse
import csv
import importlib.metadata
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Callable, Iterator

HERE = Path(__file__).resolve()
TIMEOUT_S = 300.0
_READY, _DONE = "PEERS-READY", "PEERS-DONE"
"""Line prefixes of the worker -> parent protocol on stdout (engines may print other lines there)."""


@dataclass
class PeerResult:
    """One engine run: words counted, timed seconds, throughput, exactness, and what the time covers."""

    engine: str
    words: int
    seconds: float | None
    words_per_s: float | None
    exact: bool
    note: str
    wall_s: float | None = None  # whole subprocess lifetime: interpreter start, imports, run, teardown
    cpu_s: float | None = None  # CPU seconds (all threads) the workers spent between go and done


# ---------------------------------------------------------------- parent side


def _version(dist: str) -> str | None:
    """Installed version of `dist`, None if absent (bytewax imports as a namespace package, so find_spec would lie)."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _free_ports(n: int) -> list[int]:
    """n distinct loopback ports free right now (all held open together so none repeats)."""
    socks = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _tail(path: Path, lines: int = 8) -> str:
    """Last lines of a worker's stderr, for a failure note."""
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(text[-lines:])


@dataclass
class _Timing:
    seconds: float  # go -> last worker's run returned
    wall: float  # first spawn -> last exit
    cpu: float  # sum over workers of CPU seconds between go and done


class _WorkerError(RuntimeError):
    pass


def _run_workers(argvs: list[list[str]], env: dict[str, str], logdir: Path, timeout: float) -> _Timing:
    """Spawn one subprocess per argv, start them together once all are ready, time them, wait for exit.

    Raises _WorkerError with the workers' stderr tails when one fails, says
    something unexpected, or the watchdog had to kill them after `timeout`.
    """
    procs: list[subprocess.Popen[str]] = []
    errs: list[Path] = []
    timed_out = threading.Event()

    def kill_all() -> None:
        for p in procs:
            if p.poll() is None:
                p.kill()

    def on_timeout() -> None:
        timed_out.set()
        kill_all()

    watchdog = threading.Timer(timeout, on_timeout)
    t_spawn = time.monotonic()
    try:
        for i, argv in enumerate(argvs):
            err = logdir / f"worker-{i}.stderr"
            errs.append(err)
            with err.open("w") as ef:
                procs.append(subprocess.Popen(
                    argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=ef, text=True, env=env,
                ))
        watchdog.start()

        def fail(what: str) -> _WorkerError:
            kill_all()  # a lone survivor would wait for its dead peers forever
            for p in procs:
                p.wait()
            why = f"timed out after {timeout:g} s" if timed_out.is_set() else what
            tails = "; ".join(f"w{i}: {_tail(e)}" for i, e in enumerate(errs) if _tail(e))
            return _WorkerError(f"{why}; exit codes {[p.returncode for p in procs]}; stderr {tails}")

        def expect(p: subprocess.Popen[str], prefix: str) -> str:
            assert p.stdout is not None
            for line in p.stdout:  # EOF when the worker dies or the watchdog kills it
                if line.startswith(prefix):
                    return line[len(prefix):].strip()
            raise fail(f"worker exited before {prefix}")

        for p in procs:
            expect(p, _READY)
        t_go = time.monotonic()
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.close()
        done = [expect(p, _DONE).split() for p in procs]
        codes = [p.wait() for p in procs]
        t_exit = time.monotonic()
        if timed_out.is_set() or any(codes):
            raise fail(f"worker failed after finishing: exit codes {codes}")
        return _Timing(seconds=max(float(end) for end, _ in done) - t_go, wall=t_exit - t_spawn,
                       cpu=sum(float(cpu) for _, cpu in done))
    finally:
        watchdog.cancel()
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
            if p.stdout is not None:
                p.stdout.close()


def _run_peer(
    engine: str,
    dist: str,
    path: Path,
    expected: Counter[str] | None,
    launch: Callable[[Path], tuple[list[list[str]], dict[str, str], str]],
    read_counts: Callable[[Path], dict[str, int]],
    timeout: float,
) -> PeerResult:
    """Shared shape of a peer run: skip if not installed, run the workers in a temp dir, check against the oracle."""
    if expected is None:
        if str(HERE.parent) not in sys.path:
            sys.path.insert(0, str(HERE.parent))
        from wordcount_input import oracle  # numpy is only needed here, never in the workers

        expected = oracle(path)
    words = sum(expected.values())
    version = _version(dist)
    if version is None:
        return PeerResult(engine, words, None, None, False, f"{dist} not installed")
    with tempfile.TemporaryDirectory(prefix=f"peers-{dist}-") as tmp:
        work = Path(tmp)
        argvs, env, setup = launch(work)
        try:
            t = _run_workers(argvs, env, work, timeout)
            counts = read_counts(work)
        except (_WorkerError, OSError, ValueError) as e:
            return PeerResult(engine, words, None, None, False, f"{dist} {version}, {setup}: failed: {e}")
    exact = counts == dict(expected)
    diff = "" if exact else f"; MISMATCH: {_describe_mismatch(counts, expected)}"
    note = (f"{dist} {version}, {setup}; timed from go (engine imported, dataflow built) to the last "
            f"run call returning: engine start, file read, counting, output write{diff}")
    return PeerResult(engine, words, t.seconds, words / t.seconds, exact, note, t.wall, t.cpu)


def _describe_mismatch(got: dict[str, int], want: Counter[str]) -> str:
    """A short account of how a peer's counts differ from the oracle's."""
    missing = want.keys() - got.keys()
    extra = got.keys() - want.keys()
    wrong = [w for w in want.keys() & got.keys() if got[w] != want[w]]
    return (f"{len(missing)} words missing, {len(extra)} extra, {len(wrong)} miscounted, "
            f"total {sum(got.values())} vs {sum(want.values())}")


def _worker_argv(engine: str, *args: str) -> list[str]:
    return [sys.executable, str(HERE), "--worker", engine, *args]


def run_bytewax(path: str | Path, workers: int = 2, *, expected: Counter[str] | None = None,
                timeout: float = TIMEOUT_S) -> PeerResult:
    """Bytewax word count with `workers` worker processes (one worker each) over loopback TCP.

    Processes are started as `python -m bytewax.testing -p N` would (each one
    `cluster_main(flow, addresses, proc_id)`), but by us, so ports are free
    ones and the clock can exclude start-up. Output: one TSV per worker.
    """
    path = Path(path).resolve()

    def launch(work: Path) -> tuple[list[list[str]], dict[str, str], str]:
        addresses = ";".join(f"127.0.0.1:{port}" for port in _free_ports(workers))
        argvs = [_worker_argv("bytewax", "--input", str(path), "--out", str(work),
                              "--proc-id", str(i), "--addresses", addresses) for i in range(workers)]
        return argvs, dict(os.environ), f"{workers} processes x 1 worker (cluster_main over loopback TCP)"

    def read_counts(work: Path) -> dict[str, int]:
        counts: dict[str, int] = {}
        for part in sorted(work.glob("part-*.tsv")):
            for line in part.read_text().splitlines():
                word, n = line.split("\t")
                if word in counts:
                    raise ValueError(f"{word!r} counted by two workers")
                counts[word] = int(n)
        return counts

    return _run_peer("bytewax", "bytewax", path, expected, launch, read_counts, timeout)


def run_pathway(path: str | Path, threads: int = 2, *, expected: Counter[str] | None = None,
                timeout: float = TIMEOUT_S) -> PeerResult:
    """Pathway word count in one process with PATHWAY_THREADS=`threads`, static mode, CSV output."""
    path = Path(path).resolve()

    def launch(work: Path) -> tuple[list[list[str]], dict[str, str], str]:
        env = dict(os.environ, PATHWAY_THREADS=str(threads), PATHWAY_PROCESSES="1")
        argv = _worker_argv("pathway", "--input", str(path), "--out", str(work / "counts.csv"))
        return [argv], env, f"1 process, PATHWAY_THREADS={threads}, plaintext.read(mode='static')"

    def read_counts(work: Path) -> dict[str, int]:
        return _replay_pathway_csv(work / "counts.csv")

    return _run_peer("pathway", "pathway", path, expected, launch, read_counts, timeout)


def _replay_pathway_csv(path: Path) -> dict[str, int]:
    """Final table from pw.io.csv.write's change log (rows of word,count,time,diff; retractions first per time)."""
    with path.open(newline="") as f:
        rows = sorted(csv.DictReader(f), key=lambda r: (int(r["time"]), int(r["diff"])))
    counts: dict[str, int] = {}
    for r in rows:
        word, n, diff = r["word"], int(r["count"]), int(r["diff"])
        if diff == 1:
            if word in counts:
                raise ValueError(f"{word!r} inserted twice without a retraction")
            counts[word] = n
        elif diff == -1 and counts.get(word) == n:
            del counts[word]
        else:
            raise ValueError(f"unexpected change row {r}")
    return counts


# ---------------------------------------------------------------- worker side
# Runs in the subprocesses only: engines are imported here, never in the parent.


def _handshake(run: Callable[[], None]) -> None:
    """Report ready, wait for go, run, report the monotonic end time and the CPU time (all threads) of the run."""
    print(_READY, flush=True)
    if sys.stdin.readline().strip() != "go":
        raise SystemExit("parent went away before go")
    cpu = time.process_time()
    run()
    print(_DONE, time.monotonic(), time.process_time() - cpu, flush=True)


def _line_ranges(path: Path, index: int, count: int) -> Iterator[list[str]]:
    """Batches of ≤1,000 lines of the `index`-th of `count` byte ranges of `path`, cut at line starts.

    A line belongs to the range its first byte falls in, so every line is read
    by exactly one worker.
    """
    size = path.stat().st_size
    start, end = size * index // count, size * (index + 1) // count
    with path.open("rb") as f:
        if start > 0:
            f.seek(start - 1)
            f.readline()  # finish the line that started before `start`
        batch: list[str] = []
        while f.tell() < end:
            line = f.readline()
            if not line:
                break
            batch.append(line.decode())
            if len(batch) == 1000:
                yield batch
                batch = []
        if batch:
            yield batch


def _bytewax_worker(args: argparse.Namespace) -> None:
    """One bytewax process: split file half -> flat_map(split) -> count_final -> own TSV."""
    import bytewax.operators as op
    from bytewax.dataflow import Dataflow
    from bytewax.inputs import DynamicSource, StatelessSourcePartition
    from bytewax.outputs import DynamicSink, StatelessSinkPartition
    from bytewax.testing import cluster_main

    class LinesPartition(StatelessSourcePartition[str]):
        def __init__(self, batches: Iterator[list[str]]) -> None:
            self._batches = batches

        def next_batch(self) -> list[str]:
            return next(self._batches)  # StopIteration ends this worker's input

    class LinesSource(DynamicSource[str]):
        """Each worker reads its own newline-aligned byte range of one file."""

        def build(self, step_id: str, worker_index: int, worker_count: int) -> LinesPartition:
            return LinesPartition(_line_ranges(Path(args.input), worker_index, worker_count))

    class TsvPartition(StatelessSinkPartition[tuple[str, int]]):
        def __init__(self, path: Path) -> None:
            self._f: IO[str] = path.open("w")

        def write_batch(self, items: list[tuple[str, int]]) -> None:
            self._f.writelines(f"{w}\t{n}\n" for w, n in items)
            self._f.flush()

        def close(self) -> None:
            self._f.close()

    class TsvSink(DynamicSink[tuple[str, int]]):
        """Each worker writes the counts of the words keyed to it to part-<worker>.tsv."""

        def build(self, step_id: str, worker_index: int, worker_count: int) -> TsvPartition:
            return TsvPartition(Path(args.out) / f"part-{worker_index}.tsv")

    flow = Dataflow("peers_wordcount")
    lines = op.input("lines", flow, LinesSource())
    words = op.flat_map("split", lines, str.split)
    counts = op.count_final("count", words, lambda w: w)
    op.output("out", counts, TsvSink())
    addresses = args.addresses.split(";")
    _handshake(lambda: cluster_main(flow, addresses, args.proc_id))


def _pathway_worker(args: argparse.Namespace) -> None:
    """The Pathway process: plaintext static read -> split UDF -> flatten -> groupby count -> CSV."""
    import pathway as pw

    lines = pw.io.plaintext.read(args.input, mode="static")
    words = lines.select(word=pw.apply_with_type(str.split, list[str], pw.this.data)).flatten(pw.this.word)
    counts = words.groupby(pw.this.word).reduce(pw.this.word, count=pw.reducers.count())
    pw.io.csv.write(counts, args.out)
    _handshake(lambda: pw.run(monitoring_level=pw.MonitoringLevel.NONE))


# ---------------------------------------------------------------- CLI


def _row(r: PeerResult | None) -> str:
    """One table row; None gives the header. Failures show their note in place of the figures."""
    if r is None:
        return f"{'engine':<8} {'words':>10} {'seconds':>8} {'words/s':>10} {'cpu s':>6} {'wall s':>6}  exact"
    if r.seconds is None or r.words_per_s is None:
        return f"{r.engine:<8} {r.words:>10,}  {r.note}"
    cpu = "-" if r.cpu_s is None else f"{r.cpu_s:.2f}"
    wall = "-" if r.wall_s is None else f"{r.wall_s:.2f}"
    return f"{r.engine:<8} {r.words:>10,} {r.seconds:>8.2f} {r.words_per_s:>10,.0f} {cpu:>6} {wall:>6}  {r.exact}"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--words", type=int, default=2_000_000)
    ap.add_argument("--repeat", type=int, default=2, help="runs per engine, interleaved")
    ap.add_argument("--parallelism", type=int, default=2, help="bytewax processes / pathway threads")
    ap.add_argument("--timeout", type=float, default=TIMEOUT_S, help="seconds per run before the watchdog kills it")
    ap.add_argument("--worker", choices=["bytewax", "pathway"], help=argparse.SUPPRESS)
    ap.add_argument("--input", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--proc-id", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--addresses", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker == "bytewax":
        return _bytewax_worker(args)
    if args.worker == "pathway":
        return _pathway_worker(args)

    sys.path.insert(0, str(HERE.parent))
    from wordcount_input import make_input, oracle

    with tempfile.TemporaryDirectory(prefix="peers-input-") as tmp:
        t = time.perf_counter()
        path = make_input(Path(tmp) / "words.txt", words=args.words)
        expected = oracle(path)
        print(f"input: {args.words:,} words, {len(expected):,} distinct, {path.stat().st_size / 1e6:.1f} MB "
              f"(made in {time.perf_counter() - t:.1f} s)", flush=True)
        print(_row(None), flush=True)
        results: list[PeerResult] = []
        for _ in range(args.repeat):
            for run in (run_bytewax, run_pathway):
                results.append(run(path, args.parallelism, expected=expected, timeout=args.timeout))
                print(_row(results[-1]), flush=True)
    print("\nseconds: go -> done (see below); cpu s: workers' CPU in that span; "
          "wall s: whole subprocess lifetime incl. interpreter start, imports, teardown")
    for engine in ("bytewax", "pathway"):
        ok = [r for r in results if r.engine == engine and r.words_per_s is not None]
        if ok:
            wps = statistics.median(r.words_per_s or 0.0 for r in ok)
            print(f"{engine}: median {wps:,.0f} words/s over {len(ok)} runs; {ok[0].note}")


if __name__ == "__main__":
    main()
