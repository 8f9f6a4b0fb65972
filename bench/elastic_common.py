"""Shared by bench/elastic.py (the paper's Fig. 6) and bench/necessity.py (Fig. 7).

The topology is the paper's word count cut to its bottleneck:

    words (ProfileSpout) --key--> counter (LookupCounter) --global--> meter (LatencyMeter)

- ProfileSpout emits one word per tuple (key = a word from a seeded Zipf-like
  vocabulary, value = the emit time) at the rate a staged `Profile` asks for at
  that moment: rise in steps, hold at the peak, fall in steps, hold at the
  trough, repeated. Time counts from the job's start. When backpressure
  (max_spout_pending) holds it back it falls behind the profile and catches up
  later, like a consumer of a retained log; how far behind it is, is recorded
  (`lag_s`), and whatever is still owed when the profile ends is never emitted.
- LookupCounter keeps one count per word (key grouping, one PE per word, the
  state moves with the key on split/merge) and pays a per-tuple "lookup" of
  `cost` seconds as time.sleep(cost) (like threading.Event().wait(cost)): the GIL is released, so
  more SPUs (threads, in this single-process run) really add capacity.
- LatencyMeter (global grouping, one SPU, cheap) records now - emit time per
  tuple: the end-to-end latency.

A plain `Sampler` thread (in the bench, not in the runtime) writes one row per
second: offered and input rate, processed rate, mean/p99/max latency of the
tuples that finished in that second, the counter's SPU count, the process RSS,
the spout's lag and the trees in flight; it also time-stamps every split and
merge as it appears in job.scaling_history.

Everything here runs in one process (LocalCluster); the spout and the meter
reach the bench through the module-level RUNS registry, which will need a
different path (e.g. a results file) once SPUs run in worker processes.
"""

from __future__ import annotations

import csv
import itertools
import os
import random
import statistics
import tempfile
import threading
import time
from bisect import bisect_right
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from esault import Bolt, JobConfig, LocalCluster, Spout, TopologyBuilder

WORKERS = 2
"""Worker processes hosting the counter's SPUs (spout and meter stay in the driver); 0 = threads."""


def placement_text() -> str:
    """How the counter's SPUs ran, for titles and tables."""
    return f"counter SPUs in {WORKERS} worker processes" if WORKERS else "SPUs = threads of one process"

ROOT = Path(__file__).resolve().parent.parent
FIGURES = ROOT / "docs" / "figures"
DOC = ROOT / "docs" / "ELASTICITY.md"
COUNTER = "counter"

# --- the load profile ------------------------------------------------------------

PAPER_SHAPE = (30.0, 70.0, 60.0, 70.0)
"""The paper's cycle in seconds: rise, hold at the peak, fall, hold at the trough (PAPER_NOTES §6)."""


@dataclass(frozen=True)
class Segment:
    start: float
    end: float
    rate: float
    phase: str  # warmup, rise, peak, fall, trough
    cycle: int


@dataclass(frozen=True)
class Profile:
    """A staged input rate in tuples/s as a function of seconds since the job started.

    Per cycle (lengths in the paper's proportions 30:70:60:70): `steps` rises of
    (peak - trough) / steps each, the last of which reaches the peak; a hold at
    the peak; `steps` falls of the same size, the last of which reaches the
    trough; a hold at the trough. A warm-up at the trough rate comes first.
    """

    cycle_seconds: float = 80.0
    cycles: int = 2
    peak_rate: float = 3000.0
    trough_rate: float = 300.0
    steps: int = 3
    warmup_seconds: float = 5.0

    def __post_init__(self) -> None:
        if self.cycle_seconds <= 0 or self.cycles < 1 or self.steps < 1:
            raise ValueError("cycle_seconds > 0, cycles >= 1 and steps >= 1 are required")
        if not 0 <= self.trough_rate <= self.peak_rate or self.peak_rate <= 0:
            raise ValueError(f"need 0 <= trough_rate ({self.trough_rate}) <= peak_rate ({self.peak_rate}), peak > 0")
        segs = self._build()
        object.__setattr__(self, "_segments", segs)
        object.__setattr__(self, "_starts", [s.start for s in segs])
        cums = [0.0]
        for s in segs:
            cums.append(cums[-1] + s.rate * (s.end - s.start))
        object.__setattr__(self, "_cums", cums)

    @property
    def phase_seconds(self) -> tuple[float, float, float, float]:
        total = sum(PAPER_SHAPE)
        return tuple(self.cycle_seconds * p / total for p in PAPER_SHAPE)  # type: ignore[return-value]

    def _build(self) -> list[Segment]:
        segs: list[Segment] = []
        t = 0.0

        def add(length: float, rate: float, phase: str, cycle: int) -> None:
            nonlocal t
            if length > 0:
                segs.append(Segment(t, t + length, rate, phase, cycle))
                t += length

        add(self.warmup_seconds, self.trough_rate, "warmup", 0)
        rise, hold, fall, trough = self.phase_seconds
        delta = (self.peak_rate - self.trough_rate) / self.steps
        for c in range(1, self.cycles + 1):
            for k in range(1, self.steps + 1):
                add(rise / self.steps, self.trough_rate + k * delta, "rise", c)
            add(hold, self.peak_rate, "peak", c)
            for k in range(1, self.steps + 1):
                add(fall / self.steps, self.peak_rate - k * delta, "fall", c)
            add(trough, self.trough_rate, "trough", c)
        return segs

    @property
    def segments(self) -> list[Segment]:
        return list(self._segments)  # type: ignore[attr-defined]

    @property
    def duration(self) -> float:
        return self._segments[-1].end  # type: ignore[attr-defined]

    @property
    def total(self) -> int:
        return int(self._cums[-1])  # type: ignore[attr-defined]

    def rate_at(self, t: float) -> float:
        if t < 0 or t >= self.duration:
            return 0.0
        return self._segments[bisect_right(self._starts, t) - 1].rate  # type: ignore[attr-defined]

    def phase_at(self, t: float) -> Segment | None:
        if t < 0 or t >= self.duration:
            return None
        return self._segments[bisect_right(self._starts, t) - 1]  # type: ignore[attr-defined]

    def due(self, t: float) -> float:
        """Tuples the profile has asked for by time t (the integral of the rate). O(log segments)."""
        if t <= 0:
            return 0.0
        if t >= self.duration:
            return self._cums[-1]  # type: ignore[attr-defined]
        i = bisect_right(self._starts, t) - 1  # type: ignore[attr-defined]
        s = self._segments[i]  # type: ignore[attr-defined]
        return self._cums[i] + s.rate * (t - s.start)  # type: ignore[attr-defined]

    def time_of(self, n: float) -> float:
        """When the profile asks for tuple number n (0-based): the inverse of due(). O(log segments)."""
        cums = self._cums  # type: ignore[attr-defined]
        if n >= cums[-1]:
            return self.duration
        i = min(bisect_right(cums, n) - 1, len(self._segments) - 1)  # type: ignore[attr-defined]
        s = self._segments[i]  # type: ignore[attr-defined]
        return s.start + (n - cums[i]) / s.rate if s.rate > 0 else s.end

    def describe(self) -> str:
        rise, hold, fall, trough = self.phase_seconds
        return (
            f"{self.warmup_seconds:g} s warm-up at {self.trough_rate:,.0f}/s, then {self.cycles} cycle(s) of "
            f"{self.cycle_seconds:g} s: rise {self.trough_rate:,.0f} -> {self.peak_rate:,.0f} tuples/s in "
            f"{self.steps} steps of {rise / self.steps:.1f} s, hold {hold:.1f} s, fall in {self.steps} steps of "
            f"{fall / self.steps:.1f} s, hold {trough:.1f} s at the trough "
            f"({self.total:,} tuples offered in {self.duration:.0f} s)"
        )


# --- the workload -------------------------------------------------------------------

@dataclass(frozen=True)
class Workload:
    """Everything but the profile and the parallelism: the same for every run of a bench."""

    cost: float = 0.001
    """Seconds of the counter's per-tuple lookup (time.sleep: releases the GIL)."""
    vocabulary: int = 10_000
    zipf: float = 0.9
    """Word rank r has weight 1 / r**zipf; the hottest word is ~6% of the words at 10,000 and 0.9."""
    seed: int = 7
    max_pending: int = 500
    """max_spout_pending: the backpressure bound on tuple trees in flight."""
    tick_interval: float = 0.01
    message_timeout: float = 30.0
    """JobConfig default; the ack server remembers every tree this long (see docs/ELASTICITY.md)."""
    elasticity: dict[str, Any] = field(default_factory=lambda: dict(DEFAULT_ELASTICITY))


DEFAULT_ELASTICITY: dict[str, Any] = {
    "max_latency": 0.1, "probe_period": 0.2, "overload_reaction_time": 3, "overload_reaction_factor": 0.5,
    "low_watermark": 0.3, "underload_reaction_time": 10, "underload_reaction_factor": 0.8,
    "peak_reset_factor": 1.5, "cooldown": 1.0, "min_spus": 1, "max_spus": 8,
}
"""The counter's ElasticityConfig for the scaled time base (library defaults: 1 s probes, 5 s cool-down)."""


def zipf_words(workload: Workload, n: int = 200_000) -> list[str]:
    """A seeded word sequence, cycled by the spout: the same in every run."""
    rnd = random.Random(workload.seed)
    vocab = [f"w{i}" for i in range(workload.vocabulary)]
    cum = list(itertools.accumulate(1.0 / (r + 1) ** workload.zipf for r in range(workload.vocabulary)))
    return rnd.choices(vocab, cum_weights=cum, k=n)


class RunState:
    """What the spout, the meter and the sampler of one run share (same process)."""

    def __init__(self, profile: Profile, words: list[str]) -> None:
        self.profile = profile
        self.words = words
        self.t0 = time.monotonic()
        self.emitted = 0
        self.lag = 0.0
        """Seconds the spout is behind the profile (the oldest owed tuple's age)."""
        self.unsent = 0
        """Tuples owed when the profile ended: never emitted."""
        self.latencies: deque[float] = deque()
        """End-to-end seconds per finished tuple; the meter appends, the sampler drains."""


RUNS: dict[str, RunState] = {}

_NEVER = threading.Event()
"""Never set: waiting on it with a timeout is a GIL-free sleep."""


class ProfileSpout(Spout):
    """Emits (word, emit time) at the profile's rate, msg_id = position, up to `chunk` per call.

    Tuples are released at whole `slot`s of time: emitting whatever is due at
    every call would send a message per tuple or two (the runtime pumps the
    spout on every batch of acks), and per-message costs would dominate.
    """

    def __init__(self, run: str, chunk: int = 64, slot: float = 0.02) -> None:
        self.run = run
        self.chunk = chunk
        self.slot = slot
        self.position = 0

    def open(self, context: Any) -> None:
        self.state = RUNS[self.run]
        self.words = self.state.words

    def backlog(self) -> int:
        """Tuples the profile owes and the spout has not emitted (what max_spout_pending held back)."""
        state = self.state
        elapsed = min(time.monotonic() - state.t0, state.profile.duration)
        return max(0, int(state.profile.due(elapsed)) - self.position)

    def next_tuple(self) -> None:
        state = self.state
        profile = state.profile
        now = time.monotonic()
        elapsed = now - state.t0
        if elapsed >= profile.duration:
            state.unsent = max(0, profile.total - self.position)
            state.lag = 0.0
            self.finish()
            return
        position = self.position
        slot = self.slot  # release what is due in whole slots: batches, not a message per tuple
        n = min(int(profile.due(elapsed - elapsed % slot)) - position, self.chunk)
        if n <= 0:
            state.lag = 0.0
            return
        state.lag = elapsed - profile.time_of(position)
        words, w, emit = self.words, len(self.words), self.emit
        for i in range(position, position + n):
            emit(words[i % w], now, i)
        self.position = state.emitted = position + n


class LookupCounter(Bolt):
    """One PE per word: counts it after a per-tuple lookup of `cost` seconds that releases the GIL."""

    def __init__(self, cost: float) -> None:
        self.cost = cost
        self.count = 0

    def process(self, tup: Any) -> None:
        if self.cost > 0:
            time.sleep(self.cost)  # releases the GIL (like Event().wait(cost), at less CPU per call)
        self.count += 1
        self.emit(self.key, tup.value)  # the emit time travels on

    def snapshot_state(self) -> dict[str, Any]:
        return {"count": self.count}

    def restore_state(self, state: dict[str, Any]) -> None:
        self.count = state["count"]


class LatencyMeter(Bolt):
    """The end of the line (global grouping, one SPU): records now - emit time per tuple.

    It runs in the driver (like the spout), so emit and arrival times come from one clock
    and the sampler reads the latencies in memory.
    """

    esault_placement = "driver"

    def __init__(self, run: str) -> None:
        self.run = run

    def open(self, context: Any) -> None:
        self._append = RUNS[self.run].latencies.append

    def process(self, tup: Any) -> None:
        self._append(time.monotonic() - tup.value)


def build_topology(run: str, workload: Workload, parallelism: int, elastic: bool):
    builder = TopologyBuilder(f"elastic-{run}")
    builder.set_spout("words", ProfileSpout, params={"run": run}, max_pending=workload.max_pending)
    options = dict(workload.elasticity)
    options["elastic"] = elastic
    builder.set_bolt(COUNTER, LookupCounter, parallelism, params={"cost": workload.cost},
                     **options).key_grouping("words")
    builder.set_bolt("meter", LatencyMeter, params={"run": run}, elastic=False).global_grouping(COUNTER)
    return builder.build()


# --- measuring ----------------------------------------------------------------------

def rss_mb() -> float:
    """Resident set size of this process now, in MB (Linux /proc/self/statm)."""
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


@dataclass
class ScalingEvent:
    """One split or merge from job.scaling_history, with the time the sampler saw it finish."""

    t_done: float
    t_start: float
    action: str
    giver: int
    receiver: int
    moved_keys: int
    paused_ms: float
    reconfig_ms: float
    reason: str
    spus_after: int


ROW_FIELDS = ["t", "offered_rate", "input_rate", "processed_rate", "latency_mean_ms", "latency_p99_ms",
              "latency_max_ms", "spus", "max_spu_share", "rss_mb", "lag_s", "pending_trees", "cpu_pct", "steal_pct",
              "phase"]


def cpu_steal() -> tuple[float, float]:
    """(all CPU time, stolen time) of the machine so far, in clock ticks (Linux /proc/stat)."""
    with open("/proc/stat") as fh:
        fields = [int(x) for x in fh.readline().split()[1:]]
    return float(sum(fields)), float(fields[7]) if len(fields) > 7 else 0.0


class Sampler(threading.Thread):
    """Per second: one row of rates, latencies, SPU count, RSS; every 0.1 s: new scaling events."""

    def __init__(self, job: Any, state: RunState, period: float = 1.0,
                 sample: Callable[[], dict[str, Any]] | None = None) -> None:
        super().__init__(name="bench-sampler", daemon=True)
        self.job = job
        self.sample = sample
        self.state = state
        self.period = period
        self.rows: list[dict[str, Any]] = []
        self.events: list[ScalingEvent] = []
        self.all_latencies: list[np.ndarray] = []
        self.errors: list[str] = []
        self._stop_event = threading.Event()
        self._seen = 0
        self._spus = 0
        self._spu_processed: dict[int, int] = {}
        self._cpu = time.process_time()
        self._wall = time.monotonic()
        self._machine = cpu_steal()

    def stop(self) -> None:
        self._stop_event.set()
        self.join()

    def run(self) -> None:
        state = self.state
        t0 = state.t0
        next_row = self.period
        last_emitted = 0
        self._spus = len(self.job.spus(COUNTER))
        while not self._stop_event.wait(0.1):
            now = time.monotonic() - t0
            try:
                self._poll_history(now)
                if now >= next_row:
                    last_emitted = self._row(next_row, last_emitted)
                    next_row += self.period
            except Exception as exc:  # noqa: BLE001 - keep sampling: one failed status read is one missing row
                self.errors.append(f"t={now:.1f}: {exc!r}")

    def _poll_history(self, now: float) -> None:
        history = self.job.scaling_history
        for r in history[self._seen:]:
            # split +1, merge -1, a rescale or assign_workload by what it started and retired, "replace" 0
            self._spus += {"split": 1, "merge": -1}.get(r.action, len(r.started) - len(r.retired))
            self.events.append(ScalingEvent(
                t_done=now, t_start=max(0.0, now - r.seconds), action=r.action, giver=r.giver,
                receiver=r.receiver, moved_keys=r.moved_keys, paused_ms=r.paused_seconds * 1000,
                reconfig_ms=r.seconds * 1000, reason=r.reason, spus_after=self._spus,
            ))
        self._seen = len(history)

    def _row(self, t: float, last_emitted: int) -> int:
        state = self.state
        lat = state.latencies
        taken = []
        pop = lat.popleft
        try:
            for _ in range(len(lat)):
                taken.append(pop())
        except IndexError:
            pass
        arr = np.asarray(taken, dtype=float)
        self.all_latencies.append(arr)
        status = self.job.status()
        spus = status["units"][COUNTER]["spus"]
        deltas = [st.get("processed", 0) - self._spu_processed.get(spu, 0) for spu, st in spus.items()]
        self._spu_processed = {spu: st.get("processed", 0) for spu, st in spus.items()}
        emitted = state.emitted
        seg = state.profile.phase_at(t - 0.5 * self.period)
        cpu, wall, machine = time.process_time(), time.monotonic(), cpu_steal()
        cpu_pct = 100 * (cpu - self._cpu) / max(wall - self._wall, 1e-9)
        total = machine[0] - self._machine[0]
        steal_pct = 100 * (machine[1] - self._machine[1]) / total if total > 0 else 0.0
        self._cpu, self._wall, self._machine = cpu, wall, machine
        row = {
            "t": round(t, 1),
            "offered_rate": round(state.profile.due(t) - state.profile.due(t - self.period)),
            "input_rate": emitted - last_emitted,
            "processed_rate": len(arr),
            "latency_mean_ms": round(float(arr.mean()) * 1000, 2) if len(arr) else "",
            "latency_p99_ms": round(float(np.percentile(arr, 99)) * 1000, 2) if len(arr) else "",
            "latency_max_ms": round(float(arr.max()) * 1000, 2) if len(arr) else "",
            "spus": len(spus),
            "max_spu_share": round(max(deltas) / sum(deltas), 3) if sum(deltas) > 0 else "",
            "rss_mb": round(rss_mb(), 1),
            "lag_s": round(state.lag, 3),
            "pending_trees": status["pending_trees"],
            "cpu_pct": round(cpu_pct, 1),
            "steal_pct": round(steal_pct, 1),
            "phase": f"{seg.phase}{seg.cycle or ''}" if seg else "end",
        }
        if self.sample is not None:
            row.update(self.sample())
        self.rows.append(row)
        return emitted


@dataclass
class RunResult:
    """One run of the profile at one setting."""

    setting: str
    profile: Profile
    workload: Workload
    rows: list[dict[str, Any]]
    events: list[ScalingEvent]
    per_second: list[np.ndarray]
    """End-to-end latencies (seconds) of the tuples that finished in each row's second."""
    tail: np.ndarray
    """Latencies of the tuples that finished after the profile ended (the drain before stopping)."""
    decisions: list[tuple[str, int, str]]
    """The latency monitor's decisions (action, SPU, evidence); empty for fixed runs."""
    final: dict[str, Any]
    """Counts at the end: emitted, processed, acked, failed, unsent, rss_mb, peak_rss_mb."""
    sampler_errors: list[str]
    wall_seconds: float

    @property
    def latencies(self) -> np.ndarray:
        """Every finished tuple's end-to-end latency, seconds, in finishing order."""
        return np.concatenate([*self.per_second, self.tail])

    def latency_summary(self) -> dict[str, float]:
        return latency_summary(self.latencies)


def run_profile(setting: str, profile: Profile, workload: Workload, *, parallelism: int, elastic: bool,
                log: Callable[[str], None] = print, drain_timeout: float = 60.0,
                controller: Callable[[], Any] | None = None, cluster: Callable[[], Any] | None = None,
                sample: Callable[[], dict[str, Any]] | None = None) -> RunResult:
    """Run the profile once against `parallelism` counter SPUs (elastic: from there on, the built-in
    LatencyController on; `controller`: a factory of a user controller added to the job instead). `cluster`
    makes the LocalCluster it runs on (default: WORKERS local worker processes); `sample`'s fields join each
    per-second row (e.g. a Ray cluster's node count)."""
    run = f"{setting}-{os.getpid()}-{time.monotonic_ns()}"
    state = RunState(profile, zipf_words(workload))
    RUNS[run] = state
    topology = build_topology(run, workload, parallelism, elastic)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="esault-elastic-") as data_dir:
        config = JobConfig(data_dir=Path(data_dir), elasticity=elastic, tick_interval=workload.tick_interval,
                           max_spout_pending=workload.max_pending,
                           message_timeout=workload.message_timeout,
                           guarantee="at_least_once")  # ProfileSpout cannot rewind; elasticity is measured
        with (cluster() if cluster is not None else LocalCluster(workers=WORKERS)) as running:
            state.t0 = time.monotonic()
            job = running.submit(topology, config)
            if controller is not None:
                job.add_controller(controller())
            sampler = Sampler(job, state, sample=sample)
            sampler.start()
            deadline = state.t0 + profile.duration + 0.15
            last_log = 0.0
            while (left := deadline - time.monotonic()) > 0:
                _NEVER.wait(min(left, 1.0))
                if sampler.rows and time.monotonic() - last_log >= 10:
                    last_log = time.monotonic()
                    r = sampler.rows[-1]
                    log(f"  [{setting}] t={r['t']:>5.0f}s offered {r['offered_rate']:>5}/s input "
                        f"{r['input_rate']:>5}/s done {r['processed_rate']:>5}/s p99 "
                        f"{r['latency_p99_ms'] or '-':>8} ms SPUs {r['spus']} RSS {r['rss_mb']} MB "
                        f"lag {r['lag_s']:.1f} s")
            sampler.stop()
            decisions = list(job.latency_controllers[COUNTER].decisions) if COUNTER in job.latency_controllers else []
            # Let the trees in flight finish before stopping: Job.stop() stops the spout first, and
            # the ack server then logs an ActorDeadError for every tree that completes afterwards.
            drained = job.wait(drain_timeout)
            tail = np.asarray(list(state.latencies), dtype=float)
            status = job.status()
            job.stop()
    wall = time.monotonic() - started
    RUNS.pop(run, None)
    units = status["units"]
    rows = sampler.rows
    final = {
        "emitted": units["words"]["emitted"],
        "finished": sum(len(a) for a in sampler.all_latencies) + len(tail),  # reached the meter
        "acked": units["words"]["acked"],
        "failed": units["words"]["failed"],
        "unsent": state.unsent,
        "rss_mb": rows[-1]["rss_mb"] if rows else rss_mb(),
        "peak_rss_mb": max((r["rss_mb"] for r in rows), default=rss_mb()),
        "spus_end": len(units[COUNTER]["spus"]),
        "drained": drained,
    }
    return RunResult(setting, profile, workload, rows, sampler.events, sampler.all_latencies, tail, decisions,
                     final, sampler.errors, wall)


# --- summaries ----------------------------------------------------------------------

def latency_summary(lat: np.ndarray) -> dict[str, float]:
    """Mean, variance, p50/p99/max of end-to-end latency in ms (variance in ms²)."""
    if len(lat) == 0:
        return {"n": 0, "mean_ms": float("nan"), "var_ms2": float("nan"), "p50_ms": float("nan"),
                "p99_ms": float("nan"), "max_ms": float("nan")}
    ms = lat * 1000
    return {"n": len(ms), "mean_ms": float(ms.mean()), "var_ms2": float(ms.var()),
            "p50_ms": float(np.percentile(ms, 50)), "p99_ms": float(np.percentile(ms, 99)),
            "max_ms": float(ms.max())}


def pause_table(events: Iterable[ScalingEvent]) -> list[dict[str, Any]]:
    """Per action: how many, the pause moved keys saw and the whole reconfiguration (ms: min/median/max)."""
    out = []
    events = list(events)
    for action in ("split", "merge"):
        evs = [e for e in events if e.action == action]
        if not evs:
            continue
        p = [e.paused_ms for e in evs]
        r = [e.reconfig_ms for e in evs]
        k = [e.moved_keys for e in evs]
        out.append({
            "action": action, "count": len(evs),
            "pause_min": min(p), "pause_median": statistics.median(p), "pause_max": max(p),
            "reconf_min": min(r), "reconf_median": statistics.median(r), "reconf_max": max(r),
            "keys_median": statistics.median(k), "keys_max": max(k),
        })
    return out


def pause_markdown(events: Iterable[ScalingEvent]) -> str:
    rows = pause_table(events)
    if not rows:
        return "_No split or merge happened._"
    lines = [
        ("| action | count | keys paused, ms (min / median / max) | reconfiguration, ms (min / median / max) "
         "| keys moved (median / max) |"),
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r['action']} | {r['count']} | {r['pause_min']:.1f} / {r['pause_median']:.1f} / "
            f"{r['pause_max']:.1f} | {r['reconf_min']:.1f} / {r['reconf_median']:.1f} / {r['reconf_max']:.1f} "
            f"| {r['keys_median']:.0f} / {r['keys_max']} |"
        )
    return "\n".join(lines)


def events_markdown(events: Iterable[ScalingEvent]) -> str:
    lines = [("| done at (s) | action | SPU -> SPU | SPUs after | keys moved | keys paused (ms) "
              "| reconfiguration (ms) |"),
             "| ---: | --- | --- | ---: | ---: | ---: | ---: |"]
    for e in events:
        arrow = f"{e.giver} -> {e.receiver}"
        lines.append(f"| {e.t_done:.1f} | {e.action} | {arrow} | {e.spus_after} | {e.moved_keys} | "
                     f"{e.paused_ms:.1f} | {e.reconfig_ms:.1f} |")
    return "\n".join(lines)


def write_csv(path: Path, rows: list[dict[str, Any]], fields: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)


def elasticity_markdown(workload: Workload) -> str:
    e = workload.elasticity
    return ", ".join(f"`{k}={v}`" for k, v in e.items())


def workload_markdown(workload: Workload) -> str:
    return (f"cost {workload.cost * 1000:g} ms per tuple (time.sleep, GIL released), vocabulary "
            f"{workload.vocabulary:,} words with Zipf exponent {workload.zipf}, seed {workload.seed}, "
            f"max_spout_pending {workload.max_pending:,}, tick_interval {workload.tick_interval} s")


def machine_line() -> str:
    import importlib.metadata
    import platform

    return (f"{os.cpu_count()} CPUs, Python {platform.python_version()}, "
            f"pykka {importlib.metadata.version('pykka')}, "
            f"{time.strftime('%Y-%m-%d')}")


def shade_phases(ax: Any, profile: Profile) -> None:
    """Grey bands behind the peak holds, light bands behind the trough holds."""
    for s in profile.segments:
        if s.phase == "peak":
            ax.axvspan(s.start, s.end, color="0.85", alpha=0.5, lw=0)
        elif s.phase == "trough":
            ax.axvspan(s.start, s.end, color="#dfe9f5", alpha=0.5, lw=0)


def as_dict(obj: Any) -> dict[str, Any]:
    return asdict(obj)


# --- command line -----------------------------------------------------------------

def add_common_args(parser: Any, *, cycle_seconds: float, cycles: int, quick_cycle: float, quick_cycles: int,
                    quick_warmup: float) -> None:
    """The options both benches share; resolve them with resolve_args()."""
    parser.set_defaults(_quick=(quick_cycle, quick_cycles, quick_warmup))
    parser.add_argument("--workers", type=int, default=WORKERS,
                        help=f"worker processes for the counter SPUs; 0 = threads of this process (default {WORKERS})")
    parser.add_argument("--quick", action="store_true",
                        help=f"a ~1 minute smoke run ({quick_cycles} x {quick_cycle:g} s cycles); writes figures to "
                             "a temporary folder (or --out) and leaves docs/ELASTICITY.md alone unless --write")
    parser.add_argument("--cycle-seconds", type=float, default=None,
                        help=f"length of one rise/hold/fall/hold cycle (default {cycle_seconds:g})")
    parser.set_defaults(_cycle_default=cycle_seconds, _cycles_default=cycles)
    parser.add_argument("--cycles", type=int, default=None, help=f"cycles (default {cycles})")
    parser.add_argument("--warmup", type=float, default=None, help="seconds at the trough rate first (default 5)")
    parser.add_argument("--peak-rate", type=float, default=Profile.peak_rate,
                        help=f"tuples/s at the peak (default {Profile.peak_rate:g})")
    parser.add_argument("--trough-rate", type=float, default=Profile.trough_rate,
                        help=f"tuples/s at the trough (default {Profile.trough_rate:g})")
    parser.add_argument("--steps", type=int, default=Profile.steps, help="rise and fall steps per cycle (default 3)")
    parser.add_argument("--cost", type=float, default=Workload.cost,
                        help=f"seconds of the counter's per-tuple lookup (default {Workload.cost:g})")
    parser.add_argument("--max-pending", type=int, default=Workload.max_pending,
                        help=f"max_spout_pending (default {Workload.max_pending})")
    parser.add_argument("--seed", type=int, default=Workload.seed, help="word sequence seed")
    for name, value in DEFAULT_ELASTICITY.items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=type(value), default=value, dest=f"el_{name}",
                            help=f"counter ElasticityConfig.{name} (default {value})")
    parser.add_argument("--out", type=Path, default=None, help=f"figures folder (default {FIGURES.relative_to(ROOT)})")
    parser.add_argument("--write", action="store_true", help="with --quick: still update docs/ELASTICITY.md")
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/ELASTICITY.md alone")


def resolve_args(args: Any) -> tuple[Profile, Workload, Path, bool]:
    """(profile, workload, figures folder, whether to write the doc section) from parsed options."""
    quick_cycle, quick_cycles, quick_warmup = args._quick
    if args.quick:
        cycle = args.cycle_seconds or quick_cycle
        cycles = args.cycles or quick_cycles
        warmup = quick_warmup if args.warmup is None else args.warmup
    else:
        cycle = args.cycle_seconds or args._cycle_default
        cycles = args.cycles or args._cycles_default
        warmup = 5.0 if args.warmup is None else args.warmup
    profile = Profile(cycle_seconds=cycle, cycles=cycles, peak_rate=args.peak_rate, trough_rate=args.trough_rate,
                      steps=args.steps, warmup_seconds=warmup)
    elasticity = {name: getattr(args, f"el_{name}") for name in DEFAULT_ELASTICITY}
    global WORKERS
    WORKERS = args.workers
    workload = Workload(cost=args.cost, seed=args.seed, max_pending=args.max_pending, elasticity=elasticity)
    if args.out is not None:
        out = args.out
    elif args.quick:
        out = Path(tempfile.mkdtemp(prefix="esault-elastic-quick-"))
    else:
        out = FIGURES
    write = not args.no_write and (not args.quick or args.write)
    return profile, workload, out, write


def command_line(argv: list[str], script: str) -> str:
    return " ".join(["python", f"bench/{script}", *argv])
