"""Benchmark: what a word costs in pieces esault cannot do without, beside the word count's own CPU per word.

    python bench/word_costs.py [--words 2000000] [--vocabulary 100000] [--rounds 5] [--no-write]

Issue #31 asks for 3x the best peer; this prints what the pieces of a word's
path cost on their own, in this process, on the bench's own input (Zipf(1.1)
words over a 100k vocabulary, bench/wordcount_input.py; --vocabulary changes
it), each a pass over the same lines in chunks of 100 (about a spout round's
batch), taking turns a round at a time (this VM's speed drifts within
seconds; each figure is the median round):

- the plain dict loop (one core: split and count), the reference;
- splitting the lines into words: one new str per word (the split bolt);
- the route's key -> buffer cache looked up for each word, in one C-level
  `map` (no interpreter per word): the split side's table of every word;
- the runtime's emit() per word (datapath/emitter.py over a real 2-SPU key
  route: the lookup above, a type check, two appends, a Python call);
- the frame: msgpack pack and unpack of each batch's keys and values (the
  unpack makes one new str per word again, on the count side);
- the PE table looked up for each decoded word (a `map` again; one count
  SPU's half of the keys, as a count SPU holds);
- process() per word on the PEs found (the bolt's `self.count += value`
  through the runtime's Tuple view: a Python call and an attribute update).

Then the same input through the real job (bench/esault_wordcount.py on
`LocalCluster(workers=2)`, the default exactly_once), its workers' CPU per
word from /proc, and what the tables and strings hold in memory beside the
machine's last-level cache. Each of two inputs (--vocabularies: 5,000 and the
throughput bench's 100,000 distinct words): a word makes two strings and two
lookups in tables as large as the key space, so the comparison tells how much
of the job's cost per word grows with that memory, against the pieces' own.
"""

from __future__ import annotations

import argparse
import collections
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import esault_wordcount  # noqa: E402
import msgpack  # noqa: E402
from _report import publish  # noqa: E402
from emit_many import refuse, router_over  # noqa: E402
from esault import LocalCluster  # noqa: E402
from esault.datapath.emitter import build_emit  # noqa: E402
from esault.datapath.pe_class import bucket_of_key, pe_class  # noqa: E402
from esault.dsl.tuple import Tuple  # noqa: E402
from throughput import run_esault  # noqa: E402
from wordcount_input import make_input, oracle  # noqa: E402

CHUNK_LINES = 100


def chunks_of(lines: list[str]) -> list[list[str]]:
    return [lines[i:i + CHUNK_LINES] for i in range(0, len(lines), CHUNK_LINES)]


class Pieces:
    """Each piece of a word's path as a function over all chunks; what it needs is built once."""

    def __init__(self, lines: list[str]) -> None:
        self.chunks = chunks_of(lines)
        self.words = sum(len(line.split()) for line in lines)
        self.router = router_over(2)
        self.route = self.router.routes[0]
        self.emit = build_emit(self.router, refuse)
        for chunk in self.chunks:  # every word's buffer cached, as after a job's first seconds
            for line in chunk:
                for word in line.split():
                    self.emit(word, 1)
            self._drain()
        buffers = {id(buf): spu for spu, buf in self.route.buffers.items()}
        mine = {word for word, buf in self.route._cache.items() if buffers[id(buf)] == 0}
        klass = pe_class(esault_wordcount.CountWord, refuse, lambda: None, None, None)
        self.pes: dict[str, Any] = {}
        for word in mine:  # one count SPU's PEs: the keys its hash interval holds
            pe = klass()
            pe.key, pe._esault_bucket, pe._esault_mark = word, bucket_of_key(word), None
            pe.open(None)
            self.pes[word] = pe
        self.frames = [self._frame(chunk) for chunk in self.chunks]  # this SPU's part of each batch, packed

    def _drain(self) -> list[tuple[int, list]]:
        return list(self.route.take())

    def _frame(self, chunk: list[str]) -> bytes:
        keys = [word for line in chunk for word in line.split() if word in self.pes]
        return msgpack.packb([keys, [1] * len(keys)])

    # --- the pieces (each returns the words it handled) ---------------------------------------------

    def dict_loop(self) -> int:
        counts: dict[str, int] = {}
        get = counts.get
        for chunk in self.chunks:
            for line in chunk:
                for word in line.split():
                    counts[word] = get(word, 0) + 1
        return self.words

    def split(self) -> int:
        for chunk in self.chunks:
            for line in chunk:
                line.split()
        return self.words

    def route_lookup(self, fresh: list[list[str]]) -> int:
        get = self.route._cache.get
        for words in fresh:
            list(map(get, words))
        return sum(map(len, fresh))

    def emit_per_word(self, fresh: list[list[str]]) -> int:
        emit = self.emit
        for words in fresh:
            for word in words:
                emit(word, 1)
            self._drain()
        return sum(map(len, fresh))

    def wire(self, batches: list[list]) -> int:
        n = 0
        for keys, values in batches:
            msgpack.unpackb(msgpack.packb([keys, values]))
            n += len(keys)
        return n

    def pe_lookup(self, decoded: list[list[str]]) -> int:
        get = self.pes.get
        for keys in decoded:
            list(map(get, keys))
        return sum(map(len, decoded))

    def process_per_word(self, found: list[tuple[list, list]]) -> int:
        view = Tuple()
        n = 0
        for pes, keys in found:
            for pe, key in zip(pes, keys):
                view.key = key
                view.value = 1
                pe.process(view)
            n += len(keys)
        return n


def fresh_words(pieces: Pieces) -> list[list[str]]:
    """Each chunk's words as new str objects (their hashes not computed yet), as a split makes them."""
    return [" ".join(chunk).split() for chunk in pieces.chunks]


def decoded_keys(pieces: Pieces) -> list[list[str]]:
    """Each frame's keys as the count side decodes them: new str objects."""
    return [msgpack.unpackb(frame)[0] for frame in pieces.frames]


IN_THE_JOB = ("split lines into words (a new str per word)",
              "emit() per word (the runtime's closure, 2-SPU key route)",
              "frame: msgpack pack and unpack of keys and values",
              "PE table lookup per decoded word (C-level map, one SPU's keys)",
              "process() per word on its PE (a Python call, count += 1)")
"""The pieces a word passes through in the job (the route cache lookup is inside emit)."""


def steps(pieces: Pieces) -> dict[str, Callable[[], tuple[float, int]]]:
    """name -> a timed run (seconds, words); inputs that must be fresh are made outside the timer."""
    def timed(fn: Callable[..., int], make: Callable[[], Any] | None = None) -> Callable[[], tuple[float, int]]:
        def run() -> tuple[float, int]:
            arg = make() if make is not None else None
            started = time.perf_counter()
            n = fn(arg) if make is not None else fn()
            return time.perf_counter() - started, n
        return run

    def found() -> list[tuple[list, list]]:
        return [(list(map(pieces.pes.get, keys)), keys) for keys in decoded_keys(pieces)]

    return {
        "plain dict loop: split and count (one core)": timed(pieces.dict_loop),
        "split lines into words (a new str per word)": timed(pieces.split),
        "route cache lookup per word (C-level map over the vocabulary)": timed(pieces.route_lookup,
                                                                           lambda: fresh_words(pieces)),
        "emit() per word (the runtime's closure, 2-SPU key route)": timed(pieces.emit_per_word,
                                                                         lambda: fresh_words(pieces)),
        "frame: msgpack pack and unpack of keys and values": timed(pieces.wire, lambda: [
            msgpack.unpackb(frame) for frame in pieces.frames]),
        "PE table lookup per decoded word (C-level map, one SPU's keys)": timed(pieces.pe_lookup,
                                                                               lambda: decoded_keys(pieces)),
        "process() per word on its PE (a Python call, count += 1)": timed(pieces.process_per_word, found),
    }


def deep_size(table: dict[str, Any], values: bool) -> int:
    """Bytes of a dict, its key strings and (if `values`) its values and their attributes' own objects."""
    size = sys.getsizeof(table) + sum(map(sys.getsizeof, table))
    if values:
        for pe in table.values():
            size += sys.getsizeof(pe) + sys.getsizeof(pe.count)
    return size


def job_cpu_per_word(path: Path, expected: collections.Counter) -> tuple[float, float, bool]:
    """The throughput bench's word count on 2 workers, default guarantee (throughput.run_esault): (words/s,
    the workers' CPU us per word, exact)."""
    with LocalCluster(workers=2) as cluster:
        run = run_esault(cluster, "esault", path, expected)
    if run.rate is None:
        raise RuntimeError(f"the word count did not finish: {run.note}")
    workers = sum(share for process, share in (run.cpu or {}).items() if process != "driver")  # cores, over the run
    return run.rate, workers / run.rate * 1e6, bool(run.exact)


def last_level_cache() -> str:
    caches = sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"))
    return (caches[-1] / "size").read_text().strip() if caches else "unknown"


@dataclass
class Measured:
    """One vocabulary's figures: each piece's ns per word (median round), the job's, and the tables' memory."""

    vocabulary: int
    words: int
    pieces: dict[str, float]
    floor: float
    job_rates: list[float]
    job_ns: list[float]
    """Each job run's words/s and workers' CPU ns per word."""
    exact: bool
    route_mib: float
    pes_mib: float


def measure_pieces(path: Path, vocabulary: int, rounds: int) -> Measured:
    """The pieces on one input, taking turns a round at a time (the job's figures are filled in later)."""
    pieces = Pieces(path.read_text().splitlines())
    runs = steps(pieces)
    per_word: dict[str, list[float]] = {name: [] for name in runs}
    for round_ in range(rounds):
        for name in (list(runs) if round_ % 2 == 0 else list(runs)[::-1]):
            seconds, n = runs[name]()
            per_word[name].append(seconds / n * 1e9)
    medians = {name: statistics.median(times) for name, times in per_word.items()}
    return Measured(vocabulary, pieces.words, medians, sum(medians[name] for name in IN_THE_JOB), [], [], True,
                    deep_size(pieces.route._cache, values=False) / 2**20, deep_size(pieces.pes, values=True) / 2**20)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--words", type=int, default=2_000_000)
    ap.add_argument("--vocabularies", default="5000,100000",
                    help="distinct words of each input, comma-separated (the throughput bench's: 100000)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--job-runs", type=int, default=3, help="job runs per input, the inputs taking turns")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    vocabularies = [int(v) for v in args.vocabularies.split(",")]
    with tempfile.TemporaryDirectory(prefix="esault-word-costs-") as tmp:
        paths = [make_input(Path(tmp) / f"words-{v}.txt", words=args.words, vocabulary=v) for v in vocabularies]
        results = [measure_pieces(path, v, args.rounds) for path, v in zip(paths, vocabularies)]
        expected = [oracle(path) for path in paths]
        for run in range(args.job_runs):  # the job's speed swings more between runs than between inputs
            order = list(range(len(paths))) if run % 2 == 0 else list(range(len(paths)))[::-1]
            for i in order:
                rate, job_us, exact = job_cpu_per_word(paths[i], expected[i])
                results[i].job_rates.append(rate)
                results[i].job_ns.append(job_us * 1e3)
                results[i].exact = results[i].exact and exact
    def row(label: str, cell: Callable[[Measured], str]) -> str:
        return f"| {label} | " + " | ".join(cell(m) for m in results) + " |"

    head = " | ".join(f"{m.vocabulary:,} words" for m in results)
    rows = [row(name, lambda m, name=name: f"{m.pieces[name]:.0f}") for name in results[0].pieces] + [
        row("**the pieces a word passes through in the job** (split, emit, frame, PE lookup, process)",
            lambda m: f"**{m.floor:.0f}**"),
        row("the job: workers' CPU per word (2 workers, exactly_once; median run)",
            lambda m: f"{statistics.median(m.job_ns):.0f}"),
        row("the job / its pieces", lambda m: f"{statistics.median(m.job_ns) / m.floor:.2f}x"),
        row("the job's words/s (median run); counts exact in every run",
            lambda m: f"{statistics.median(m.job_rates):,.0f}; {m.exact}"),
        row("memory: route cache (dict and key strings) per worker", lambda m: f"{m.route_mib:.1f} MiB"),
        row("memory: one count SPU's PE table (dict, keys, PEs, counts)", lambda m: f"{m.pes_mib:.1f} MiB"),
    ]
    text = (
        f"### What a word's pieces cost on their own\n\n`python bench/word_costs.py` on {time.strftime('%Y-%m-%d')}: "
        f"{results[0].words:,} Zipf(1.1) words per input, the pieces in one thread (median of {args.rounds} rounds "
        f"taking turns, ns per word), then the job on the same input; Python {platform.python_version()}, "
        f"last-level cache {last_level_cache()} (both workers share it).\n\n"
        f"| piece | {head} |\n| --- |" + " ---: |" * len(results) + "\n" + "\n".join(rows)
        + "\n\nEvery job run, CPU ns per word: " + "; ".join(
            f"{m.vocabulary:,} words " + ", ".join(f"{ns:.0f}" for ns in m.job_ns) for m in results) + ".")
    publish("word-costs", text, write=not args.no_write)


if __name__ == "__main__":
    main()
