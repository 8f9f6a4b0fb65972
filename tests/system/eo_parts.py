"""Parts of the exactly-once tests: a rate-limited word count whose count bolt can be held by a gate file.

Worker processes import these by module name (tests/system is on their path).
"""

from __future__ import annotations

import collections
import os
import threading
import time
from pathlib import Path
from typing import Any

from esault import Bolt, Spout, TopologyBuilder
from spark_sink import SparkSink

import wordcount  # examples/, on sys.path in the tests and their workers

_PAUSE = threading.Event()  # never set: wait() on it is a timed pause that cannot be cut short


def hold_while(path: str) -> None:
    """Block this thread while the file `path` exists (at most a minute): a gate across processes."""
    waited = 0
    while path and os.path.exists(path) and waited < 12_000:
        _PAUSE.wait(0.005)
        waited += 1


class GatedCountBolt(Bolt):
    """Per word: its running count. While the file `gate` exists (`{spu}` in it is replaced by this SPU's
    id), process() holds its tuple there: the SPU answers nothing else meanwhile, so a split or merge
    waits at the step that needs this SPU. While `handoff_gate` exists (`{spu}` replaced by this SPU's id,
    or by "all" for a file that holds every SPU, e.g. one a split has yet to start), installing a key's
    state (restore_state(): a hand-off's chunk arriving) holds there, after touching `<that file>.reached`."""

    def __init__(self, gate: str = "", handoff_gate: str = "") -> None:
        self.gate = gate
        self.handoff_gate = handoff_gate

    def open(self, context: Any) -> None:
        self.count = 0
        self._esault_gate = self.gate.format(spu=context.spu_id) if self.gate else ""
        self._esault_handoff_gates = [self.handoff_gate.format(spu=s) for s in (context.spu_id, "all")] \
            if self.handoff_gate else []

    def process(self, tup: Any) -> None:
        hold_while(self._esault_gate)
        self.count += tup.value
        self.emit(self.key, self.count)

    def snapshot_state(self) -> dict[str, Any]:
        return {"count": self.count}

    def restore_state(self, state: dict[str, Any]) -> None:
        for gate in self._esault_handoff_gates:
            if os.path.exists(gate):
                Path(gate + ".reached").touch()
                hold_while(gate)
        self.count = state["count"]


class PlainCountBolt(Bolt):
    """Per word: its running count, with Bolt's own state methods: keys moved to an SPU of it are made into
    PEs on their first tuple or between batches (PeManager.arrived), not as their state arrives."""

    def open(self, context: Any) -> None:
        self.count = 0

    def process(self, tup: Any) -> None:
        self.count += tup.value
        self.emit(self.key, self.count)


class GatedCountBoltV2(GatedCountBolt):
    """The same count as a new version, for assign_logic: it reads GatedCountBolt's state."""


class GatedSentenceSpout(wordcount.SentenceSpout):
    """SentenceSpout whose next_tuple() blocks while the file `gate` exists: the spout's SPU then cannot
    switch routes, so a split or merge waits for its EpochMarker (after the prepare step)."""

    def __init__(self, gate: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.gate = gate

    def next_tuple(self) -> None:
        hold_while(self.gate)
        super().next_tuple()


class SlowSink(SparkSink):
    """SparkSink made slow by gate files, as a busy host makes it. While `snapshot_gate` exists its snapshots
    (the pre-commit: staging an epoch) wait, as a Spark write does: a checkpoint waits for them; a rollback that
    abandons the sink ends the wait at that step's boundary, as a real stage's. While `start_gate` exists its
    engine's start (Spark's session; for pyarrow, nothing) waits, as a JVM slow to start does."""

    def __init__(self, snapshot_gate: str = "", start_gate: str = "", **params: Any) -> None:
        super().__init__(**params)
        self.snapshot_gate = snapshot_gate
        self.start_gate = start_gate

    def on_checkpoint(self, epoch: int) -> Any:
        epochs = self._epochs
        if epochs is not None and self.snapshot_gate and os.path.exists(self.snapshot_gate):
            epochs._submit(self._hold, epochs)
        return super().on_checkpoint(epoch)

    def _hold(self, epochs: Any) -> None:
        waited = 0
        while os.path.exists(self.snapshot_gate) and not epochs._stop.is_set() and waited < 24_000:
            _PAUSE.wait(0.005)
            waited += 1

    def _set_up_engine(self) -> Any:
        engine = super()._set_up_engine()
        if not self.start_gate:
            return engine

        def set_up() -> None:
            hold_while(self.start_gate)
            if engine is not None:
                engine()

        return set_up


def build(name: str, total: int, rate: float, gate: str = "", sink: str | None = None,
          count_parallelism: int = 2, table: str = "eo_counts", spouts: int = 1, spout_gate: str = "",
          max_pending: int = 4000, handoff_gate: str = "", split_unit: bool = False, plain_count: bool = False,
          sink_gates: dict[str, str] | None = None):
    """sentences (rate-limited, rewindable) -> split (chained) -> count -> latest [-> Spark table].

    Each of the `spouts` instances emits the same `total` sentences, so every count SPU aligns barriers
    from `spouts` channels (the oracle multiplies). `sink_gates`: {"snapshot_gate" or "start_gate": a file}, the
    sink is a SlowSink held by them."""
    builder = TopologyBuilder(name)
    builder.set_spout("sentences", GatedSentenceSpout, spouts,
                      params={"total": total, "seed": 5, "rate": rate, "gate": spout_gate}, max_pending=max_pending)
    # split_unit: the splitter gets SPUs of its own on the workers (not chained into the spout's), so it can
    # be reconfigured too, e.g. in an atomic group with the counter it feeds.
    builder.set_bolt("split", wordcount.SplitBolt, spouts, chain=not split_unit,
                     elastic=False).shuffle_grouping("sentences")
    count = (PlainCountBolt, {}) if plain_count else (GatedCountBolt, {"gate": gate, "handoff_gate": handoff_gate})
    builder.set_bolt("count", count[0], count_parallelism, params=count[1], elastic=False,
                     pe_idle_timeout=None).key_grouping("split")
    builder.set_bolt("latest", wordcount.LatestCountsBolt, elastic=False).global_grouping("count")
    if sink is not None:
        gated = sink_gates or {}
        builder.set_bolt("sink", SlowSink if gated else SparkSink, elastic=False, params={
            "table": table, "schema": "word STRING, count BIGINT", "key_column": "word",
            "value_column": "count", "batch_rows": 2000, "batch_seconds": 1.0, "engine": sink, **gated,
        }).shuffle_grouping("count")
    return builder.build()


def oracle(total: int, spouts: int = 1) -> dict[str, int]:
    return {w: n * spouts for w, n in wordcount.oracle(total, seed=5).items()}


def final_counts(data_dir: Path) -> dict[str, int]:
    import json

    return json.loads((Path(data_dir) / "wordcount.json").read_text())


def table_rows(warehouse: Path, table: str) -> dict[str, list[int]]:
    """word -> the counts of its rows in the sink's table, sorted (read with pyarrow, no JVM)."""
    import pyarrow.dataset as ds

    root = Path(warehouse) / table
    files = [str(p) for p in root.rglob("*.parquet") if "_esault" not in p.parts]
    if not files:
        return {}
    data = ds.dataset(files, format="parquet").to_table(columns=["word", "count"]).to_pydict()
    rows: dict[str, list[int]] = collections.defaultdict(list)
    for word, count in zip(data["word"], data["count"]):
        rows[word].append(count)
    return {w: sorted(c) for w, c in rows.items()}


def exact_rows(expected: dict[str, int]) -> dict[str, list[int]]:
    """A run without failures writes one row per running count: 1, 2, ..., n for a word seen n times."""
    return {w: list(range(1, n + 1)) for w, n in expected.items()}


def kill_driver_after_checkpoints(script: str, store_path: Path, epochs: int = 3, storage: str | None = None) -> None:
    """Run `script` (a driver printing its workers' pids on its first line) in a process of its own, kill -9 it
    once its store at `store_path` (or its job's folder at the object-store URL `storage`) has checkpoint
    `epochs`, and wait for its orphaned workers to exit (their driver timeout)."""
    import signal
    import subprocess
    import sys

    from esault.checkpoint.object_store import ObjectCheckpointStore
    from esault.checkpoint.store import CheckpointStore
    from esault.storage import ObjectStore, StorageLocation
    from esault.testing import wait_until

    def latest() -> int:
        if storage is not None:
            point = ObjectCheckpointStore(ObjectStore(StorageLocation.parse(storage).child(store_path.parent.name))
                                          ).latest()
        else:
            point = CheckpointStore(store_path).latest() if store_path.exists() else None
        return 0 if point is None else point.epoch

    driver = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        workers = [int(p) for p in driver.stdout.readline().split()]
        wait_until(lambda: latest() >= epochs, 60, message=f"{epochs} checkpoints")
        driver.send_signal(signal.SIGKILL)
        driver.wait(10)
    finally:
        if driver.poll() is None:
            driver.kill()
        driver.stdout.close()
    for pid in workers:
        wait_until(lambda: not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split(")")[-1]
                   .split()[0] == "Z", 60, message="orphan workers gone")


from esault.testing import ListSpout  # noqa: E402


class HoldingListSpout(ListSpout):
    """Emits items[:2], then the rest once the file `gate` exists (rewindable, as every ListSpout)."""

    def __init__(self, items: list, gate: str) -> None:
        super().__init__(items)
        self.gate = gate

    def limit(self) -> int:
        return len(self.items) if os.path.exists(self.gate) else 2


LatestBolt = wordcount.LatestCountsBolt


class TallyBolt(Bolt):
    """Not key grouped, with a state: counts the words its instance saw and hands the tally on when it
    closes (a merge retires it, or the job ends). Its state lives in one checkpoint slot per instance."""

    def open(self, context: Any) -> None:
        self.seen = 0

    def process(self, tup: Any) -> None:
        self.seen += 1

    def close(self) -> None:
        self.emit("seen", self.seen)


class OnesTallyBolt(TallyBolt):
    """TallyBolt that hands its tally on as that many 1s: a close() whose output takes a while to cross
    between processes, so a checkpoint right after a merge or rescale would overtake it were the operation
    to end before every downstream SPU has it (docs/PROTOCOLS.md, "Non-keyed bolts")."""

    def close(self) -> None:
        for _ in range(self.seen):
            self.emit("seen", 1)


class TallySum(Bolt):
    """In the driver: the sum of every tally, written to <data_dir>/tally.json when the job ends."""

    esault_placement = "driver"

    def open(self, context: Any) -> None:
        self.total = 0
        self.path = str(Path(context.data_dir) / "tally.json")

    def process(self, tup: Any) -> None:
        self.total += tup.value

    def close(self) -> None:
        Path(self.path).write_text(str(self.total))


class WorkerTallySum(TallySum):
    """TallySum on a worker: what reaches it from a tally SPU crosses between two workers."""

    esault_placement = "worker"


def build_tally(name: str, total: int, rate: float, tally_parallelism: int = 2, ones: bool = False):
    """sentences -> split (chained) -> tally (shuffle grouped, stateful, on its own SPUs) -> sum.
    ones: the tally hands its count on as that many 1s (OnesTallyBolt), to a sum on a worker."""
    builder = TopologyBuilder(name)
    builder.set_spout("sentences", GatedSentenceSpout, 1, params={"total": total, "seed": 5, "rate": rate},
                      max_pending=4000)
    builder.set_bolt("split", wordcount.SplitBolt, 1, elastic=False).shuffle_grouping("sentences")
    builder.set_bolt("tally", OnesTallyBolt if ones else TallyBolt, tally_parallelism,
                     elastic=False).shuffle_grouping("split")
    builder.set_bolt("sum", WorkerTallySum if ones else TallySum, elastic=False).global_grouping("tally")
    return builder.build()


def tally_total(data_dir: Path) -> int:
    return int((Path(data_dir) / "tally.json").read_text())


def words_in(total: int) -> int:
    return sum(wordcount.oracle(total, seed=5).values())


class ShardedSpout(Spout):
    """`shards` fixed shards of `per_shard` numbered words each; instance i of n reads the shards s with
    s % n == i, at most `rate` words per second in all. Its position is {shard: next offset}, and positions
    merge (esault_merge_positions), so it can be rescaled on a running job like a KafkaSource."""

    def __init__(self, shards: int = 4, per_shard: int = 2000, rate: float = 2000.0) -> None:
        self.shards, self.per_shard, self.rate = shards, per_shard, rate

    def open(self, context: Any) -> None:
        mine = [s for s in range(self.shards) if s % context.instances == context.instance]
        self.next = {s: 0 for s in mine}
        self.started = time.monotonic()
        self.sent = 0
        self.share = self.rate * len(mine) / self.shards

    @staticmethod
    def esault_merge_positions(positions: list) -> dict:
        merged: dict = {}
        for position in positions:
            merged.update({int(s): int(o) for s, o in (position or {}).items()})
        return merged

    def snapshot_position(self) -> dict:
        return dict(self.next)

    def restore_position(self, position: Any) -> None:
        self.next.update({int(s): int(o) for s, o in position.items() if int(s) in self.next})

    def next_tuple(self) -> None:
        if self.sent > (time.monotonic() - self.started) * self.share:
            return
        for shard, offset in self.next.items():
            end = min(offset + 16, self.per_shard)
            for i in range(offset, end):
                self.emit(f"s{shard}", i, msg_id=(shard, i))
            self.next[shard] = end
            self.sent += end - offset
        if all(o >= self.per_shard for o in self.next.values()):
            self.finish()


def build_sharded_tally(name: str, spouts: int, per_shard: int = 2000, rate: float = 2000.0):
    """sharded spout -> tally (chained into it: one state per spout instance) -> sum."""
    builder = TopologyBuilder(name)
    builder.set_spout("shards", ShardedSpout, spouts, params={"per_shard": per_shard, "rate": rate},
                      max_pending=2000)
    builder.set_bolt("tally", TallyBolt, spouts, elastic=False).shuffle_grouping("shards")
    builder.set_bolt("sum", TallySum, elastic=False).global_grouping("tally")
    return builder.build()


def build_keyed_tally(name: str, total: int, rate: float):
    """sentences -> split (chained) -> count (key grouped, 2 SPUs) -> tally (shuffle grouped, stateful) -> sum.
    tally has count's parallelism and is count's only reader, yet runs on SPUs of its own: a bolt fused into
    a key-grouped unit would keep per-SPU state that no key range carries across count's splits and merges."""
    builder = TopologyBuilder(name)
    builder.set_spout("sentences", GatedSentenceSpout, 1, params={"total": total, "seed": 5, "rate": rate},
                      max_pending=4000)
    builder.set_bolt("split", wordcount.SplitBolt, 1, elastic=False).shuffle_grouping("sentences")
    builder.set_bolt("count", GatedCountBolt, 2, elastic=False).key_grouping("split")
    builder.set_bolt("tally", TallyBolt, 2, elastic=False).shuffle_grouping("count")
    builder.set_bolt("sum", TallySum, elastic=False).global_grouping("tally")
    return builder.build()


def run_restored(topology: Any, config: Any, epoch: int, unit: str, spus: int) -> Any:
    """Run `topology` to its end on 2 fresh workers, restored from checkpoint `epoch`, after checking that it
    restored from it and that `unit` started on `spus` SPUs; returns the stopped job."""
    from esault import LocalCluster

    with LocalCluster(workers=2) as cluster:
        job = cluster.submit(topology, config.replace(restore_from=epoch))
        assert job.restored_from.epoch == epoch and len(job.spus(unit)) == spus
        assert job.wait(120), job.status()
        job.stop()
    return job


def build_finals(name: str, total: int, rate: float):
    """sentences -> split (chained) -> count (key grouped, 2 SPUs, emitting only from finish()) -> Spark table
    `finals` (pyarrow); split -> tally (not key grouped, 2 SPUs of its own, finish() too) -> sum.
    Needs tests/integration on sys.path (topology_parts)."""
    from topology_parts import CountOnFinish, TallyOnFinish

    builder = TopologyBuilder(name)
    builder.set_spout("sentences", GatedSentenceSpout, 1, params={"total": total, "seed": 5, "rate": rate},
                      max_pending=4000)
    builder.set_bolt("split", wordcount.SplitBolt, 1, elastic=False).shuffle_grouping("sentences")
    builder.set_bolt("count", CountOnFinish, 2, elastic=False).key_grouping("split")
    builder.set_bolt("sink", SparkSink, elastic=False, params={
        "table": "finals", "schema": "word STRING, count BIGINT", "key_column": "word", "value_column": "count",
        "engine": "pyarrow"}).shuffle_grouping("count")
    builder.set_bolt("tally", TallyOnFinish, 2, elastic=False, chain=False).shuffle_grouping("split")
    builder.set_bolt("sum", TallySum, elastic=False).global_grouping("tally")
    return builder.build()


class FailOnValue(Bolt):
    """Raises on a tuple whose value is `bad` (a user error: retried, then dead-lettered); counts the rest."""

    def __init__(self, bad: Any = "bad") -> None:
        self.bad = bad

    def open(self, context: Any) -> None:
        self.n = 0

    def process(self, tup: Any) -> None:
        if tup.value == self.bad:
            raise ValueError(f"a bad value for {tup.key!r}")
        self.n += 1
