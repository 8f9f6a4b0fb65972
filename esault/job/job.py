"""Job: the framework driver of one submitted topology (start, status, scale, wait, stop)."""

from __future__ import annotations

import logging
import os
import shutil
import threading
from concurrent.futures import Future, TimeoutError as FutureTimeout
from typing import Any, Callable, Iterable, Iterator, Mapping

from esault.clock import Clock, SystemClock
from esault.config import JobConfig
from esault.dsl.topology import Topology
from esault.reliability.dead_letters import DeadLetterWriter
from esault.job import gc_policy
from esault.datapath.acker import AckServerActor
from esault.checkpoint.backends import delete_checkpoints
from esault.datapath.context import JobContext, job_actor
from esault.job.completion_watch import CompletionWatch
from esault.job.final_checkpoint import end_at_final_checkpoint
from esault.job.coordinator import ReconfigurationCoordinator, ScaleRequest
from esault.control.controller import Controller
from esault.control.events import ControlEvents
from esault.control.latency import LatencyController
from esault.control.runner import ControllerRunner
from esault.job.lost_spus import replace_lost as replace_lost_spus
from esault.messages.control import GetLayout, GetRoutes, GetSpus, ScaleResult
from esault.messages.data import Drain
from esault.job.probing import JobProbes
from esault.job.spout_rescale import LiveSpoutRescale, SpoutRescale, spout_rescale_refusal
from esault.job.status_view import job_status
from esault.job.requests import (
    logic_request, merge_request, operation_request, rescale_request, split_request, spu_limit, version_of,
    workload_request,
)
from esault.control.operations import Operation, Rescale
from esault.datapath.ticker import Ticker
from esault.metrics import registry as metrics
from esault.metrics.stats import SpuStats
from esault.job.spu_start import SpuLauncher
from esault.job.unit import UnitActor
from esault.job.unit_messages import GetOperation, LaunchSpus
from esault.checkpoint.coordinator import AckCollector, CheckpointAcksActor, CheckpointCoordinator
from esault.errors import ConfigError, EsaultError, ScalingError
from esault.dsl.topology import DECLARED_VERSION

log = logging.getLogger("esault")

class Job:
    """A running topology. Thread-safe; call from the driver's thread, never from an actor."""

    def __init__(self, topology: Topology, config: JobConfig, launcher: SpuLauncher,
                 clock: Clock | None = None, postman: Any = None,
                 remote_stats: Callable[[str], list[SpuStats]] | None = None,
                 fresh_reports: Callable[[float], bool] | None = None, ids: Iterator[int] | None = None) -> None:
        self.topology = topology
        self.config = config
        self.clock = clock or SystemClock()
        data_dir = config.data_dir / topology.name
        data_dir.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(data_dir / "state", ignore_errors=True)  # parked PE state of an earlier run is not this job's
        self.dead_letter_path = data_dir / "dead_letters.jsonl"
        self.ctx = JobContext(topology, config, self.clock, data_dir,
                              dead_letters=DeadLetterWriter(self.dead_letter_path))
        self.ctx.dead_letters.ships = self.ctx.checkpoint_location is not None  # copied to the object store
        if ids is not None:
            self.ctx._ids = ids  # the cluster's: SPU ids unique among its jobs
        self._named: list[str] = []
        """The names this job's driver actors are registered under (the postman's): unregistered at its stop."""
        self._check_guarantee()  # before anything that must be undone when the job cannot start
        check = getattr(launcher, "check_topology", None)
        if check is not None:
            check(topology)  # e.g. params that cannot reach a worker, or no worker at all
        self.ctx.stats.forget_topology(topology.name)
        gc_policy.enter(config.gc_gen0_threshold)
        self.ctx.ticker = Ticker(self.clock, config.tick_interval)
        self.postman = postman
        if postman is not None:
            self.ctx.worker_host = lambda process: postman.remote(process, "host")
        self.launcher = launcher
        self._capacity_keeper = getattr(launcher, "capacity", None)
        """The cluster's capacity keeper (esault.cluster.capacity), or None: SPUs go where there is room."""
        self.remote_stats = remote_stats
        self.fresh_reports = fresh_reports
        self.lost_spus: set[int] = set()
        self.completion = CompletionWatch(self)
        """Whether the job processed all of its input (wait(), is_complete()): esault.job.completion_watch."""
        if config.fresh_start:
            delete_checkpoints(self.ctx)
        self.units: dict[str, Any] = {}
        self._stopped = False
        self._recovering = 0  # rollbacks queued or running: the job is not complete meanwhile
        self._complete_at_rollback = False
        """A rollback found the job complete: its spouts replay to the same end, and stop() waits for that."""
        self._recovery_lock = threading.Lock()
        self.rescale_step: Callable[[str, str], None] = lambda unit, step: None
        """Called at each step of a spout rescale (esault.job.spout_rescale.STEPS), on the control thread:
        the seam where tests cut a rescale (kill -9 a worker there)."""
        self._failures: list[str] = []
        """Why the job cannot go on (a lost SPU no worker could take back): wait() is False at once while any."""
        self._lock = threading.Lock()
        self.final_status: dict[str, Any] | None = None
        self._final_failure: str | None = None
        self.ctx.acker = self._start_named("acker", lambda: AckServerActor.start(self.ctx))
        collector = AckCollector()
        self.ctx.checkpoints = self._start_named("checkpoints", lambda: CheckpointAcksActor.start(collector))
        try:
            self.checkpoints = CheckpointCoordinator(self, collector)
            if self.ctx.exactly_once:
                metrics.init_checkpoint_series(self.name)
            self.restored_from = self.checkpoints.restore_point(config.restore_from) if self.ctx.exactly_once else None
            if self.ctx.exactly_once:  # before any SPU starts: each worker checks it sees this store
                self.ctx.store_id = self.checkpoints.store.mark_identity()
            if self.restored_from is not None:
                log.warning("topology %r: resuming from checkpoint %d (%s) in %s", self.name,
                            self.restored_from.epoch, self.restored_from.kind, self.checkpoints.store.path)
        except BaseException:  # a Ctrl-C during the start too: no actor thread of it may keep the process up
            self._stop_actors()
            gc_policy.leave(config.gc_gen0_threshold)
            raise
        point = self.restored_from
        try:
            self.wait_for_room(self._worker_spus_at_start(point), "the start")
            # Downstream units first, so every SPU starts knowing its output routes. A chained bolt
            # has no SPUs of its own: its head's SPUs run it and send to its downstream units.
            for spec in reversed(topology.units):
                chained = topology.chained(spec.name)
                downstream = () if chained else tuple(
                    self.units[d.name].ask(GetRoutes(g.value))
                    for d, g in topology.downstream(topology.output_unit(spec.name))
                )
                unit = self._start_named(f"unit-{spec.name}",
                                         lambda: UnitActor.start(spec, self.ctx, launcher, downstream))
                self.units[spec.name] = unit  # before launching: a failed launch must stop it too
                if not chained:
                    failed = unit.ask(LaunchSpus(
                        None if point is None else point.epoch,
                        None if point is None else point.positions.get(spec.name, {}),
                        None if point is None or point.instances is None else point.instances.get(spec.name)))
                    if isinstance(failed, Exception):
                        raise failed
            self.coordinator = ReconfigurationCoordinator(topology, self.units,
                                                          capacity=self._capacity_keeper)
            self.coordinator.between = self.checkpoints.due_in
            self.coordinator.run_task(lambda: None)  # wakes the control thread to time the first checkpoint
            self._logic_versions: dict[str, str | None] = {}
            self.events = ControlEvents()
            self.probes = JobProbes(self)
            """The prober actors and the built-in latency policy: esault.job.probing."""
            self.coordinator.listeners.append(self.probes.record_change)
            self.controllers: list[ControllerRunner] = []
            if config.elasticity:
                self.probes.start_latency_control()
        except BaseException:  # a Ctrl-C during the start too: no actor thread of it may keep the process up
            self._stop_actors()
            gc_policy.leave(config.gc_gen0_threshold)
            raise
        self.ctx.ticker.start()

    @property
    def name(self) -> str:
        return self.topology.name

    def _worker_spus_at_start(self, point: Any) -> int:
        """SPUs the job starts on worker processes (a restored unit: as many as the checkpoint holds)."""
        spus = 0
        for spec in self.topology.units:
            if self.topology.chained(spec.name) or spec.where != "worker":
                continue
            instances = None if point is None or point.instances is None else point.instances.get(spec.name)
            spus += len(instances) if instances else spec.parallelism
        return spus

    def wait_for_room(self, spus: int, what: str) -> None:
        """Workers for `spus` new SPUs, if the cluster can grow (the start; a lost worker's SPUs, a Ray node
        for the lost one), waited for up to the keeper's worker_wait; short of room they pack onto the workers
        there are, and the log says so. Nothing waits on a fixed pool (no budget: room everywhere)."""
        keeper = self._capacity_keeper
        if keeper is None:
            return
        try:
            keeper.reserve(spus, f"{what} of {self.name}").result(keeper.worker_wait + 5.0)
        except Exception as exc:  # noqa: BLE001 - declined or late: the SPUs pack onto the workers there are
            log.warning("topology %r: %s packs onto the workers there are: %s", self.name, what, exc)

    def await_a_worker(self, what: str) -> bool:
        """With every worker lost: block until the cluster started one in their place (False when it cannot,
        or none joined within the keeper's worker_wait)."""
        keeper = self._capacity_keeper
        return keeper is not None and keeper.await_a_worker(f"{what} of {self.name}")

    def _check_guarantee(self) -> None:
        """exactly_once rolls sources back: every spout must be able to rewind. A join chain across SPUs
        emits pairs outside any input's tree, which at_least_once cannot replay."""
        chains = [s.name for s in self.topology.units if getattr(s.cls, "esault_chain", False)]
        if chains and self.config.guarantee == "at_least_once":
            raise ConfigError(
                f"join {chains[0]!r} runs as a chain of SPUs (mode='chain'), whose pairs are made where tuples cross "
                "and so belong to no input's tree: at_least_once could lose them. Run the job with "
                "guarantee='exactly_once' (checkpoints cover the chain) or 'none', or declare the join with "
                "mode='keyed'")
        if not self.ctx.exactly_once:
            return
        for spec in self.topology.units:
            if spec.is_spout and not spec.cls.can_rewind():
                raise ConfigError(
                    f"spout {spec.name!r} ({spec.cls.__name__}) cannot rewind, so the job cannot be exactly-once: "
                    "implement snapshot_position() and restore_position() on it, or run the job with "
                    "guarantee='at_least_once' (replays failed tuples) or 'none'")

    # --- checkpoints ---------------------------------------------------------

    def checkpoint(self, timeout: float | None = None) -> int | None:
        """Take a checkpoint now (exactly_once); its epoch once complete, None if it failed."""
        return self.coordinator.run_task(self.checkpoints.checkpoint).result(timeout)

    def savepoint(self, stop: bool = False, timeout: float | None = None) -> int | None:
        """A checkpoint kept for good (never compacted away); `stop` ends the spouts at its barrier.
        Start from it with JobConfig(restore_from=epoch), with any parallelism of the bolts."""
        if not self.ctx.exactly_once:
            raise ConfigError(f"savepoints need guarantee='exactly_once'; job {self.name!r} runs "
                              f"{self.config.guarantee!r}")
        return self.coordinator.run_task(lambda: self.checkpoints.checkpoint("savepoint", final=stop)).result(timeout)

    def roll_back_now(self, lost: frozenset[int], reason: str, abandoned: Callable[[], None] | None = None) -> Any:
        """A rollback started on the control thread itself (a checkpoint timed out, a spout rescale): the job is
        not complete while it runs, as for a queued one (esault.job.lost_spus.queue_rollback). Every rollback goes through _roll_back."""
        with self._recovery_lock:
            self._recovering += 1
        try:
            return self._roll_back(lost, reason, abandoned)
        finally:
            with self._recovery_lock:
                self._recovering -= 1

    def _roll_back(self, lost: frozenset[int], reason: str, abandoned: Callable[[], None] | None = None) -> Any:
        """The rollback itself (control thread), with the job's bookkeeping around it: whether the job had
        completed (then stop() lets it complete again), which SPUs completion counts from, what the probers probe."""
        if self.completion.claimed or (not self.checkpoints.ended and self._input_done()):
            self._complete_at_rollback = True
        first_new = self.ctx.next_id()  # every SPU the rollback relaunches has a larger id
        recovered = self.checkpoints.recover(lost, reason, abandoned)
        self.completion.count_from(first_new)
        self.probes.refresh(set())  # the rollback relaunched every SPU under new ids
        return recovered

    @property
    def stopped(self) -> bool:
        """True once stop() began (or the job failed and stopped): nothing more may start for it."""
        return self._stopped

    @property
    def recovering(self) -> bool:
        """True while a rollback or a replacement of lost SPUs is queued or running: the job is not complete,
        and a checkpoint now could record a broken layout."""
        return self._recovering > 0

    def tell_listeners(self, result: ScaleResult) -> None:
        """Tell the scaling listeners (controllers, the API's history) of `result`, one failing not the rest."""
        for listener in list(self.coordinator.listeners):
            try:
                listener(result)
            except Exception:
                log.exception("listener failed")

    def _start_named(self, name: str, start: Callable[[], Any]) -> Any:
        """Start an actor; with worker processes, register it under a name of this job's (job_actor) so
        messages can name it and no other job's actor of the same kind is replaced."""
        if self.postman is None:
            return start()
        named = job_actor(self.name, name)
        self._named.append(named)
        return self.postman.start_and_register(named, start)

    def _all_stats(self) -> list[SpuStats]:
        # totals(): live SPUs plus each unit's retired total, so merged-away SPUs still count.
        local = [s for s in self.ctx.stats.totals() if s.topology == self.name]
        return local + (self.remote_stats(self.name) if self.remote_stats else [])

    @property
    def probers(self) -> dict[str, Any]:
        """Per bolt probed, its prober actor (esault.job.probing)."""
        return self.probes.probers

    @property
    def latency_controllers(self) -> dict[str, LatencyController]:
        """The built-in policy's LatencyController per elastic bolt (esault.job.probing)."""
        return self.probes.latency_controllers

    @property
    def data_dir(self):
        return self.ctx.data_dir

    # --- scaling -------------------------------------------------------------

    def split(self, unit: str, spu: int, at: int | None = None, timeout: float | None = 60.0,
              reason: str = "manual") -> ScaleResult:
        """Split `spu` of `unit` onto a new SPU (paper steps 1-7); its upper keys move with their state."""
        return _await(self.split_async(unit, spu, at, reason), timeout, f"split of {unit!r} SPU {spu}")

    def merge(self, unit: str, spu: int, into: int | None = None, timeout: float | None = 60.0,
              reason: str = "manual") -> ScaleResult:
        """Merge `spu` into an adjacent SPU; its keys move with their state and its slot is released."""
        return _await(self.merge_async(unit, spu, into, reason), timeout, f"merge of {unit!r} SPU {spu}")

    def _submit(self, build: Callable[[], ScaleRequest]) -> Future:
        """Submit the request `build` makes; a refusal it raises comes back as the future's exception."""
        try:
            request = build()
        except ScalingError as exc:
            return _failed(exc)
        return self.coordinator.submit(request)

    def split_async(self, unit: str, spu: int, at: int | None = None, reason: str = "manual") -> Future:
        return self._submit(lambda: split_request(unit, spu, at, reason))

    def merge_async(self, unit: str, spu: int, into: int | None = None, reason: str = "manual") -> Future:
        return self._submit(lambda: merge_request(unit, spu, into, reason))

    def add_controller(self, controller: Controller) -> ControllerRunner:
        """Run `controller` against this job: every controller.interval seconds it gets a MetricsSnapshot and
        its operations are applied (esault.control). Stopped with the job. Turn the built-in
        LatencyController off (elasticity=False, or elastic=False on the bolt) for the units it drives,
        or the two policies fight. Every scalable bolt is probed from then on (each SPU every probe_period,
        in band), so snapshots carry probe latencies and key samples for all of them."""
        for spec in self.probes.scalable_bolts():
            self.probes.probe(spec)
        runner = ControllerRunner(self, controller)
        self.controllers.append(runner)
        return runner.start()

    def assign_workload(self, unit: str, assignment: Mapping[int, Iterable[tuple[int, int]]],
                        timeout: float | None = 60.0, reason: str = "manual") -> ScaleResult:
        """Give each SPU of key-grouped `unit` the hash ranges `assignment` lists ({spu: [(lo, hi), ...]},
        covering [0, KEY_SPACE_MAX] once), in one atomic reconfiguration. An id the unit does not have
        starts a new SPU (scale out); an SPU left out retires (scale in). Only the moved keys pause, and
        their state moves with them. The result's `moves`, `started` and `retired` say what happened."""
        return _await(self.assign_workload_async(unit, assignment, reason), timeout, f"assign_workload of {unit!r}")

    def assign_workload_async(self, unit: str, assignment: Mapping[int, Iterable[tuple[int, int]]],
                              reason: str = "manual") -> Future:
        return self._submit(lambda: workload_request(unit, assignment, reason, spu_limit(self.topology, unit)))

    def assign_resource(self, unit: str, spu: int, worker: str, timeout: float | None = 60.0,
                        reason: str = "manual") -> ScaleResult:
        """Move SPU `spu` of key-grouped `unit` to worker process `worker`: a new SPU there takes its ranges
        and their state (the result's `receiver`), the old one retires. Only its keys pause."""
        return _await(self.assign_resource_async(unit, spu, worker, reason), timeout,
                      f"assign_resource of {unit!r} SPU {spu}")

    def assign_resource_async(self, unit: str, spu: int, worker: str, reason: str = "manual") -> Future:
        return self.coordinator.submit(ScaleRequest("assign_resource", unit, spu, None, None, reason, worker=worker))

    def assign_logic(self, unit: str, bolt: type, params: Mapping[str, Any] | None = None,
                     timeout: float | None = 60.0, reason: str = "manual") -> ScaleResult:
        """Swap the code of key-grouped `unit` while it runs: every SPU is replaced, in one reconfiguration,
        by one running `bolt(**params)` on the same worker and ranges; each key's state moves to it through
        restore_state(), so the new bolt must read what the old one's snapshot_state() wrote."""
        return _await(self.assign_logic_async(unit, bolt, params, reason), timeout, f"assign_logic of {unit!r}")

    def assign_logic_async(self, unit: str, bolt: type, params: Mapping[str, Any] | None = None,
                           reason: str = "manual") -> Future:
        try:
            request = logic_request(self.topology, unit, bolt, params, reason)
        except ScalingError as exc:
            return _failed(exc)
        submitted = self.coordinator.submit(request)
        submitted.add_done_callback(lambda done: done.exception() or self._ran_logic(request))
        return submitted

    def _ran_logic(self, request: ScaleRequest) -> None:
        self._logic_versions[request.unit] = version_of(request)

    def swap(self, unit: str, version: str, timeout: float | None = 60.0, reason: str = "manual") -> ScaleResult:
        """assign_logic to a version the topology declared (set_bolt(..., versions={...})): what the REST API
        and `esault swap` use, so a client names code the operator deployed and never a class."""
        return _await(self.swap_async(unit, version, reason), timeout, f"swap of {unit!r}")

    def swap_async(self, unit: str, version: str, reason: str = "manual") -> Future:
        try:
            bolt, params = self.topology.unit(unit).version(version)
        except EsaultError as exc:
            return _failed(ScalingError(str(exc)))
        return self.assign_logic_async(unit, bolt, params, reason)

    def logic_version(self, unit: str) -> str | None:
        """The declared version `unit` runs now (None: code given to assign_logic that no version names)."""
        self.topology.unit(unit)  # TopologyError for a unit that is not there
        return self._logic_versions.get(unit, DECLARED_VERSION)

    def workload(self, unit: str) -> dict[int, list[tuple[int, int]]]:
        """{spu: [(lo, hi), ...]} of key-grouped `unit` now: the form assign_workload takes."""
        layout = self.units[self.topology.host_of(unit)].ask(GetLayout())
        return {spu: list(owned) for spu, owned in layout.items() if owned is not None}

    def rescale(self, unit: str, spus: int, timeout: float | None = 60.0, reason: str = "manual") -> ScaleResult:
        """Run `unit` on `spus` SPUs in one atomic reconfiguration. Key grouped: equal shares of the key
        space; the existing SPUs, in key order, take the first slices (so most keep part of their range),
        new ones start for the rest, surplus ones retire with their state handed over. Otherwise (shuffle
        grouping): SPUs start, or the newest retire once their queued tuples are processed. A spout whose
        class has an esault_merge_positions hook (KafkaSource), under exactly_once: a checkpoint, then a
        rollback to it with `spus` instances, which take their shares of its merged position; under
        at_least_once, live: the shares move at their acked watermarks, nothing rolls back
        (esault.job.spout_rescale)."""
        if self.topology.unit(unit).is_spout:
            return _await(self.rescale_spout_async(unit, spus, reason), timeout, f"rescale of spout {unit!r}")
        request = rescale_request(unit, spus, self.workload(unit), reason, spu_limit(self.topology, unit))
        return _await(self.coordinator.submit(request), timeout, f"rescale of {unit!r}")

    def rescale_spout_async(self, unit: str, spus: int, reason: str = "manual") -> Future:
        """Job.rescale of a spout, its future; refused at once (ScalingError) when it cannot be done."""
        spec = self.topology.unit(unit)
        problem = spout_rescale_refusal(spec, self.config.guarantee, spus, spu_limit(self.topology, unit))
        if problem is not None:
            return _failed(ScalingError(problem))
        kind = LiveSpoutRescale if self.config.guarantee == "at_least_once" else SpoutRescale
        rescale = kind(self, unit, spus, reason, self.rescale_step)
        return self.coordinator.run_task(rescale.run)

    def apply(self, operations: Iterable[Operation], timeout: float | None = 120.0,
              reason: str | None = "manual") -> list[ScaleResult]:
        """Apply several operations (esault.control: AssignWorkload, Rescale, AssignResource, AssignLogic,
        Split, Merge), at most one per unit, atomically: all of them, or none if any is refused or fails
        before the group is decided (docs/CONTROL_PLANE.md, "Atomic groups"). Results in the given order.
        `reason` labels them all (None: each operation's own)."""
        return _await(self.apply_async(operations, reason), timeout, "atomic group of operations")

    def apply_async(self, operations: Iterable[Operation], reason: str | None = None) -> Future:
        try:
            requests = [operation_request(self.topology, op, self.workload(op.unit) if isinstance(op, Rescale) else {},
                                          reason) for op in operations]
        except (ScalingError, EsaultError) as exc:
            return _failed(ScalingError(str(exc)))
        submitted = self.coordinator.submit_group(requests)

        def ran(done: Future) -> None:
            if done.exception() is None:
                for request in requests:
                    if request.logic is not None:
                        self._ran_logic(request)

        submitted.add_done_callback(ran)
        return submitted

    def replace_lost(self, lost_spus: set[int]) -> list[Future]:
        """SPUs died with their worker: exactly_once rolls the job back to its last checkpoint; otherwise
        each one's interval goes to a fresh SPU (no state moves) and trees in flight fail
        (esault.job.lost_spus). Never blocks: the futures say when each is done."""
        return replace_lost_spus(self, lost_spus)

    @property
    def scaling_history(self) -> list[ScaleResult]:
        return list(self.coordinator.history)

    # --- status --------------------------------------------------------------

    def spus(self, unit: str) -> list[int]:
        """The live SPU ids of `unit`, in key order for key-grouped bolts."""
        layout = self.units[self.topology.host_of(unit)].ask(GetLayout())
        return sorted(layout, key=lambda s: (layout[s] or ((s, s),))[0][0]) if layout else []

    def reconfiguring(self, unit: str) -> str | None:
        """The split, merge or assignment `unit` is running now, as a line of text (e.g. "merge of 'count'
        SPU 2: preparing"), or None: an operation asked for is queued until its unit starts it.
        TopologyError for a name the topology does not have."""
        unit = self.topology.host_of(unit)
        if self._stopped:
            return None
        return self.units[unit].ask(GetOperation(), timeout=10)

    def status(self) -> dict[str, Any]:
        """Per unit: SPUs with interval, PE count and counts (a partitioned source's SPU: its partitions, and
        the unit all of them with their SPU); totals; trees in flight. docs/OBSERVABILITY.md."""
        if self._stopped and self.final_status is not None:
            return self.final_status
        return job_status(self)

    def spu_counters(self) -> list[SpuStats]:
        """Every SPU's counters now, wherever it runs (worker rows are their last heartbeat's), plus each
        unit's retired total (spu == RETIRED_SPU)."""
        return self._all_stats()

    def workers(self) -> list[str]:
        """The worker processes SPUs can be placed on (none for a one-process cluster)."""
        registry = getattr(self.launcher, "registry", None)
        return sorted(registry.workers) if registry is not None else []

    def capacity(self) -> dict[str, Any] | None:
        """The cluster's workers with their provider, node, age and SPUs, pending requests for workers and the
        latest declined one (esault.cluster.capacity); None for a one-process cluster."""
        view = getattr(self.launcher, "cluster_view", None)
        return view() if view is not None else None

    def worker_of(self, spu_id: int) -> str | None:
        """The worker process hosting an SPU (None: the driver)."""
        worker = (self.process_of(spu_id) or {}).get("worker")
        return None if worker in (None, "driver") else worker

    def layout(self, unit: str) -> dict[int, tuple[tuple[int, int], ...] | None]:
        """Each live SPU of `unit` and its hash intervals (None for a unit that is not key grouped)."""
        return self.units[self.topology.host_of(unit)].ask(GetLayout(), timeout=10)

    def process_of(self, spu_id: int) -> dict[str, Any]:
        """Which process runs an SPU: {"worker", "pid", "address"}."""
        host_of = getattr(self.launcher, "host_of", None)
        if host_of is not None:
            return host_of(spu_id)
        return {"worker": "driver", "pid": os.getpid(), "address": None}

    def fail(self, reason: str) -> None:
        """The job cannot go on (`reason` says why and what to do): wait() returns False from now on, and the
        run's summary leads with it. Any thread; the job keeps running until stopped."""
        if reason not in self._failures:
            log.error("topology %r failed: %s", self.name, reason)
            self._failures.append(reason)

    @property
    def failures(self) -> list[str]:
        """Why the job cannot go on as declared, first cause first: a lost SPU no worker could take back, or
        under exactly_once a state it had to keep that could not be saved (the error names the bolt, key,
        attribute and type, and the fix), checkpoints that could not be made durable past
        tolerable_checkpoint_failures, or a final checkpoint that failed (these say what is committed and how
        to resume). Non-empty: wait() returns False at once, no checkpoint completes any more, and `esault
        run` exits 2."""
        found = [*self._failures, self.checkpoints.collector.fatal, self.checkpoints.failure, self._final_failure]
        return list(dict.fromkeys(reason for reason in found if reason))

    @property
    def failure(self) -> str | None:
        """The first of `failures`, or None while the job can go on."""
        failures = self.failures
        return failures[0] if failures else None

    def is_complete(self) -> bool:
        """Spouts exhausted, no tree in flight, every emitted tuple processed (esault.job.completion_watch).

        After a worker died, tuples it held never count as processed; with acking
        on, completed trees (they were replayed) are then the whole truth.
        """
        return self.completion.is_complete()

    def _input_done(self) -> bool:
        """is_complete() as the SPUs report it, whether or not a rollback is queued."""
        return self.completion.input_done()

    def spouts_finished(self) -> bool:
        """Every live spout SPU has reported the end of its input; its trees may still be in flight, so this
        is not is_complete()."""
        return self.completion.spouts_finished()

    @property
    def unaccounted(self) -> int:
        """Guarantee "none": tuples emitted but never processed once a dead worker's loss settled."""
        return self.completion.unaccounted

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the spouts are exhausted and every tuple is processed; False on timeout, or at once when
        a spout stopped by errors (spout_errors() says why) or the job failed (`failures` says why: a lost
        SPU that no worker could take back, so its tuples were never processed)."""
        return self.completion.wait(timeout)

    def spout_errors(self) -> list[str]:
        """Why spouts stopped early, one line each (open() raised, next_tuple() raised max_spout_errors times in
        a row); empty while none did. A job with any is failed: wait() returns False at once."""
        reports = list(self.ctx.spout_progress.values())
        return sorted({p.error for p in reports if p is not None and p.error})

    def drain(self) -> None:
        """A barrier: every SPU has processed and flushed what it received before this call.

        Only for SPUs in this process (`LocalCluster()` with no workers): an SPU in a worker process has no
        reply to wait on, and a request there could overtake data still on its way from another worker.
        With worker processes, wait for what the job produced instead (esault.testing.wait_until)."""
        spus = {spec.name: self.units[spec.name].ask(GetSpus()) for spec in self.topology.units}
        remote = sorted(f"{unit} SPU {spu}" for unit, mailboxes in spus.items()
                        for spu, mailbox in mailboxes.items() if not hasattr(mailbox, "ask"))
        if remote:
            raise EsaultError(
                f"topology {self.name!r}: drain() waits only on SPUs in the driver process, and "
                f"{', '.join(remote[:5])}{' ...' if len(remote) > 5 else ''} run in worker processes; wait for "
                "what the job produced instead (esault.testing.wait_until), or run it on LocalCluster() alone")
        for mailboxes in spus.values():
            for mailbox in mailboxes.values():
                mailbox.ask(Drain())

    # --- stop ----------------------------------------------------------------

    def stop(self) -> None:
        """Stop spouts, then bolts in topological order (queued tuples drain), then the ack server.

        exactly_once: a final checkpoint first ends the spouts at its barrier and
        publishes everything before it, so a restart resumes exactly there."""
        for runner in list(getattr(self, "controllers", ())):  # no reconfiguration starts during the shutdown
            runner.stop()
        with self._lock:
            if self._stopped:
                return
            if self.ctx.exactly_once and self.failure is None:  # failed: no checkpoint can complete
                failure = end_at_final_checkpoint(self)  # esault.job.final_checkpoint
                if failure is not None:
                    self._final_failure = failure
            try:
                self.completion.let_counts_settle()
                self.final_status = self.status()
            except Exception as exc:  # status is best effort at shutdown
                log.warning("could not take final status of %r: %r", self.name, exc)
            self._stopped = True
        if hasattr(self, "probes"):
            self.probes.stop()
        self.coordinator.stop()
        self.ctx.ticker.stop()
        self._stop_actors()
        self._note_close_errors()
        self.checkpoints.close()
        self.ctx.stats.forget_topology(self.name)
        gc_policy.leave(self.config.gc_gen0_threshold)
        if self.ctx.dead_letters is not None:
            self.ctx.dead_letters.close()

    def _note_close_errors(self) -> None:
        """The SPUs closed their bolts after the final status was taken: add to it, per unit, how many close()
        calls raised (what they emit or write at the end may be missing), so the run's verdict says so."""
        if self.final_status is None:
            return
        try:
            if self.fresh_reports is not None:
                self.fresh_reports(2.0)  # the workers' rows after their SPUs closed
            errors: dict[str, int] = {}
            missing: dict[str, int] = {}
            for s in self._all_stats():
                if s.close_errors:
                    errors[s.unit] = errors.get(s.unit, 0) + s.close_errors
                if s.output_missing:
                    missing[s.unit] = missing.get(s.unit, 0) + s.output_missing
        except Exception as exc:  # noqa: BLE001 - best effort at shutdown, like the status itself
            log.warning("could not count the close() errors of %r: %r", self.name, exc)
            return
        if errors:
            self.final_status["close_errors"] = errors
        if missing:
            self.final_status["output_missing"] = missing

    def _stop_actors(self) -> None:
        for spec in self.topology.units:
            unit = self.units.get(spec.name)
            if unit is not None:
                try:
                    unit.stop(block=True)
                except Exception as exc:
                    log.warning("stopping unit %r: %r", spec.name, exc)
        try:
            self.ctx.acker.stop(block=True)
        except Exception:
            pass
        try:
            self.ctx.checkpoints.stop(block=True)
        except Exception:
            pass
        for name in self._named:  # only this job's names: another job's actors stay reachable
            self.postman.unregister(name)

    @property
    def dead_letters(self) -> int:
        return self.ctx.dead_letters.count if self.ctx.dead_letters else 0

    def __enter__(self) -> "Job":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _await(future: Future, timeout: float | None, what: str) -> Any:
    """The operation's result. One that has not started within `timeout` is withdrawn (it would run later,
    unasked) and one still running is left to finish; either way ScalingError says which and why."""
    try:
        return future.result(timeout)
    except FutureTimeout:
        if future.cancel():
            raise ScalingError(
                f"{what} did not start within {timeout:g} s: the job's control thread was busy (a checkpoint, "
                "a rollback or an earlier operation; the log says which). It was withdrawn and changed nothing; "
                "retry, or pass a longer timeout") from None
        raise ScalingError(f"{what} is still running after {timeout:g} s; it completes or is refused on its own "
                           "(the job's log and Job.status() say which)") from None


def _failed(exc: Exception) -> Future:
    future: Future = Future()
    future.set_exception(exc)
    return future
