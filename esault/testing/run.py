"""run_to_completion: run a topology on a finite input until every tuple is done, and return its outputs.

Like Bytewax's `bytewax.testing.run_main` with `TestingSource`/`TestingSink`:
ListSpout is the finite source, CollectorBolt the sink. The run is judged as
`esault run` judges one (esault.job.outcome): a run that timed out, lost
a spout or dead-lettered tuples is not a success, and says why.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from esault.config import JobConfig
from esault.dsl.topology import Topology, TopologyBuilder
from esault.errors import ConfigError, RunIncomplete, TopologyError
from esault.reliability.dead_letters import read_dead_letters
from esault.job.outcome import RunOutcome, judge_run
from esault.testing.collect import CollectorBolt, collected, reset_collected

if TYPE_CHECKING:
    from esault.cluster.local import LocalCluster

__all__ = ["IN_PROCESS", "RunResult", "run_to_completion"]

IN_PROCESS = "in-process"
"""run_to_completion(workers=IN_PROCESS): every actor is a thread of the calling process."""

DEFAULT_WORKERS = 2


@dataclass(frozen=True)
class RunResult:
    """What a run produced: each collector's tuples, the verdict, the final counts and the dead letters.

    outputs: per CollectorBolt unit, its (key, value) pairs in arrival order
    (per key, the order they were emitted in; across keys, any order).
    status: Job.status() at the end (per-unit emitted/processed/acked/failed/
    dead_letters, checkpoints). dead_letters: the records of dead_letters.jsonl.
    """

    topology: str
    outputs: dict[str, list[tuple[Any, Any]]]
    outcome: RunOutcome
    status: dict[str, Any]
    dead_letters: list[dict[str, Any]]
    completed: bool
    """Job.wait() returned True: the spouts were exhausted and every tuple done within the timeout."""

    @property
    def ok(self) -> bool:
        """Completed with nothing lost, given up or dead-lettered (`esault run` would exit 0)."""
        return self.outcome.ok

    def __getitem__(self, collector: str) -> list[tuple[Any, Any]]:
        try:
            return self.outputs[collector]
        except KeyError:
            raise KeyError(f"topology {self.topology!r} has no CollectorBolt unit {collector!r}; its collectors: "
                           f"{', '.join(map(repr, self.outputs)) or 'none'}") from None

    def by_key(self, collector: str) -> dict[Any, list[Any]]:
        """The values `collector` got, grouped per key, each key's in arrival order."""
        grouped: dict[Any, list[Any]] = {}
        for key, value in self[collector]:
            grouped.setdefault(key, []).append(value)
        return grouped

    def count(self, unit: str, what: str = "processed") -> int:
        """A unit's final count: "processed", "emitted", "acked", "failed", "replayed", "dead_letters"..."""
        units = self.status.get("units", {})
        if unit not in units:
            raise KeyError(f"topology {self.topology!r} has no unit {unit!r}; units: {', '.join(map(repr, units))}")
        return units[unit][what]


def run_to_completion(topology: Topology | TopologyBuilder, *, workers: int | str | None = None,
                      config: JobConfig | None = None, timeout: float = 60.0, cluster: LocalCluster | None = None,
                      check: bool = True) -> RunResult:
    """Run `topology` until its spouts are exhausted and every tuple is done; what each CollectorBolt got.

    Where: `workers` fresh `esault worker` processes (default 2), started and
    shut down by this call; workers="in-process" runs every actor as a thread
    of this process; or `cluster`, a LocalCluster you keep (faster when many
    tests share one; its other jobs go on). CollectorBolts run in this
    process either way, so their tuples are here.

    It waits on the job's own completion (Job.wait: the spouts say they are
    exhausted and the ack server that every tree is done; no sleeping) for at
    most `timeout` seconds, stops the job, and judges the run as `esault run`
    does. With check=True (default) a run that is not a full success (timed
    out, a spout stopped by errors, tuples dead-lettered) raises RunIncomplete
    naming the problems; its `.result` holds what the run did produce.

    config: default JobConfig.load() with data_dir a temporary directory
    removed afterwards. A given config always starts fresh (an earlier run's
    checkpoints in its data_dir are discarded) unless it sets restore_from.
    Each collector's list (collected(name)) is emptied before the run and
    after it (the result has it).
    """
    if isinstance(topology, TopologyBuilder):
        topology = topology.build()
    if not isinstance(topology, Topology):
        raise TopologyError(f"run_to_completion() takes a Topology or a TopologyBuilder, got "
                            f"{type(topology).__name__}")
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or timeout <= 0:
        raise ConfigError(f"run_to_completion(timeout=...) must be a positive number of seconds, got {timeout!r}")
    if cluster is not None and workers is not None:
        raise ConfigError("run_to_completion(): give workers= (a cluster this call starts) or cluster= (one you "
                          "started), not both")
    if workers is None and cluster is None:
        workers = DEFAULT_WORKERS
    if workers is not None and workers != IN_PROCESS and (
            not isinstance(workers, int) or isinstance(workers, bool) or workers < 1):
        raise ConfigError(f"run_to_completion(workers=...) must be a number of worker processes (1 or more) or "
                          f"{IN_PROCESS!r}, got {workers!r}")
    on_workers = (cluster.registry is not None) if cluster is not None else workers != IN_PROCESS
    collectors = _collectors(topology, on_workers)
    for name in set(collectors.values()):
        reset_collected(name)

    scratch = None
    if config is None:
        scratch = Path(tempfile.mkdtemp(prefix="esault-run-"))
        config = JobConfig.load(data_dir=scratch)
    if config.restore_from is None:
        config = config.replace(fresh_start=True)
    own = None
    try:
        if cluster is None:
            from esault.cluster.local import LocalCluster

            cluster = own = LocalCluster() if workers == IN_PROCESS else LocalCluster(workers=workers)
        earlier = len(read_dead_letters(config.data_dir / topology.name / "dead_letters.jsonl"))  # other runs'
        job = cluster.submit(topology, config)
        try:
            completed = job.wait(timeout)
        finally:
            job.stop()
        status = job.final_status or {}
        dead_letter_path = (str(job.dead_letter_path) if scratch is None
                            else "RunResult.dead_letters (the run's temporary data dir is removed)")
        outcome = judge_run(status, completed, timeout=timeout, duration=None, dead_letter_path=dead_letter_path,
                            timeout_option="run_to_completion(timeout=)")
        result = RunResult(topology.name, {unit: collected(name) for unit, name in collectors.items()}, outcome,
                           status, read_dead_letters(job.dead_letter_path)[earlier:], completed)
    finally:
        for name in set(collectors.values()):
            reset_collected(name)  # the result holds them: nothing lingers for the next run or test
        if own is not None:
            own.shutdown()
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    if check and not result.ok:
        where = (f"{workers} worker process(es)" if own is not None and workers != IN_PROCESS
                 else "one process" if own is not None else "the given cluster")
        got = ", ".join(f"{unit} {len(pairs)}" for unit, pairs in result.outputs.items()) or "no collectors"
        raise RunIncomplete(
            f"topology {topology.name!r} did not run to completion on {where}:\n"
            + "".join(f"  - {problem}\n" for problem in outcome.problems)
            + f"tuples collected: {got}; the RunIncomplete's .result has them, the counts and the dead letters "
              "(or pass check=False to get the result back)", result)
    return result


def _collectors(topology: Topology, on_workers: bool) -> dict[str, str]:
    """Each CollectorBolt unit and the name it collects under; ConfigError for one the test could not read."""
    names: dict[str, str] = {}
    for spec in topology.units:
        if spec.is_spout or not issubclass(spec.cls, CollectorBolt):
            continue
        if on_workers and spec.where != "driver":
            raise ConfigError(
                f"collector {spec.name!r} is placed in the worker processes (placement={spec.placement!r}), where "
                "what it collects stays: drop the placement (a CollectorBolt runs in the driver, this process)")
        name = spec.params.get("name") or spec.name
        other = next((unit for unit, n in names.items() if n == name), None)
        if other is not None:
            raise ConfigError(f"collectors {other!r} and {spec.name!r} both collect under the name {name!r}, so "
                              "their outputs would mix: give each its own params={'name': ...} (or none: the unit's "
                              "name)")
        names[spec.name] = name
    return names
