"""The `esault` command: run a topology, start a worker, ask a driver for status."""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import logging
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Sequence

from esault.config import SPU_STOP_TIMEOUT, JobConfig, check_cluster
from esault.errors import ConfigError, DriverUnreachable, EsaultError
from esault.job.outcome import ExitCode, judge_run
from esault.metrics.partition_status import describe, rows_of_dicts

log = logging.getLogger("esault.cli")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="esault", description="Elastic stream processing that feeds Spark.")
    parser.add_argument("--log-level", default="WARNING", help="DEBUG, INFO, WARNING (default) or ERROR")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run a topology file until its spouts are exhausted (or --duration)")
    run.add_argument("path", help="a .py file exposing `topology` or `build_topology()`")
    run.add_argument("--duration", type=float, default=None, help="stop after S seconds instead of at completion")
    run.add_argument("--config", default=None, help="a TOML file of job settings ([job] table)")
    run.add_argument("--data-dir", default=None, help="where results, dead letters and tables go")
    run.add_argument("--checkpoint-storage", default=None, metavar="URL",
                     help="where exactly_once checkpoints live: a local path, or s3://bucket/prefix (endpoint and "
                          "credentials the usual AWS way); default: the data dir")
    run.add_argument("--metrics-port", type=int, default=None, help="serve Prometheus /metrics on this port")
    run.add_argument("--metrics-host", default=None, help="address for /metrics (default 127.0.0.1)")
    run.add_argument("--cluster", default=None, metavar="{processes,threads,static,ray://HOST:PORT,ray://auto}",
                     help="where bolt SPUs run: processes = --workers local worker processes (the default), "
                          "threads = all in this process, static = workers started elsewhere join --listen, "
                          "ray://HOST:PORT or ray://auto = Ray actors on a Ray cluster, asked for as splits need "
                          "them (--max-workers caps them); default: the job config's cluster")
    run.add_argument("--workers", type=int, default=None,
                     help="local worker processes to spawn (default: max_workers of the job config)")
    run.add_argument("--max-workers", type=int, default=None,
                     help="let the local pool grow to this many processes when a split finds no worker with room "
                          "(default: --workers, a fixed pool); idle ones above --workers are given back")
    run.add_argument("--spus-per-worker", type=int, default=None,
                     help="SPUs a worker takes before a split needs another worker (default: no budget for a fixed "
                          "pool, 2 for one that can grow)")
    run.add_argument("--release-after", type=float, default=30.0,
                     help="seconds a worker above the floor may host no SPU before it is given back (default 30)")
    run.add_argument("--worker-wait", type=float, default=30.0,
                     help="seconds a split waits for a new worker to join before it is declined (default 30)")
    run.add_argument("--ray-head-timeout", type=float, default=None,
                     help="ray:// clusters: seconds the Ray head may stay silent before the jobs on it fail, with "
                          "their checkpoints kept (default 30; keep it under Ray's own 60 s, after which Ray ends "
                          "this process)")
    run.add_argument("--listen", default=None, help="HOST:PORT the driver listens on for workers and status")
    run.add_argument("--advertise", default=None, metavar="HOST[:PORT]",
                     help="the address workers and status clients are told to use, if not the --listen one")
    run.add_argument("--min-workers", type=int, default=1,
                     help="static cluster: start the topology once this many workers joined")
    run.add_argument("--timeout", type=float, default=None, help="give up waiting for completion after S seconds")
    run.add_argument("--secret-key", default=os.environ.get("ESAULT_SECRET_KEY"),
                     help="static cluster: the driver's driver.key_secret (from `esault keys generate`; "
                          "env ESAULT_SECRET_KEY). Local clusters make fresh keys per run")
    run.add_argument("--worker-keys", default=os.environ.get("ESAULT_WORKER_KEYS"),
                     help="static cluster: the workers' public keys: a .key file or a folder of them "
                          "(env ESAULT_WORKER_KEYS); only these may join")
    run.add_argument("--enroll-key", default=os.environ.get("ESAULT_ENROLL_KEY"),
                     help="static cluster: the public enroll.key replica workers share (env ESAULT_ENROLL_KEY); "
                          "each that presents it is given a name and key pair of its own")
    run.add_argument("--client-keys", default=os.environ.get("ESAULT_CLIENT_KEYS"),
                     help="public keys of `esault status` clients allowed to read status (env ESAULT_CLIENT_KEYS)")

    run.add_argument("--guarantee", choices=["exactly_once", "at_least_once", "none"], default=None,
                     help="delivery guarantee (default exactly_once; docs/GUARANTEES.md)")
    run.add_argument("--checkpoint-interval", type=float, default=None, help="seconds between checkpoints")
    run.add_argument("--restore-from", type=int, default=None,
                     help="start from this checkpoint or savepoint epoch (default: the latest, if any)")
    run.add_argument("--fresh", action="store_true",
                     help="discard the checkpoints an earlier run left in the data dir instead of resuming")
    run.add_argument("--api-port", type=int, default=None,
                     help="serve the control plane's REST API and web page on this port (0: any free port)")
    run.add_argument("--api-host", default="127.0.0.1", help="address for the API (non-loopback needs --api-token)")
    run.add_argument("--api-token", default=os.environ.get("ESAULT_API_TOKEN"),
                     help="a token every API request must send (Authorization: Bearer ...); env ESAULT_API_TOKEN")
    for name, what in (("rescale", "run a key-grouped unit on N SPUs (one atomic reconfiguration)"),
                       ("move", "move an SPU, with its state, to another worker process"),
                       ("assign", "give each SPU of a unit the hash ranges a JSON object lists"),
                       ("swap", "run a bolt on another version of its code, keeping each key's state")):
        op = sub.add_parser(name, help=what)
        op.add_argument("api", help="the driver's API URL, e.g. http://127.0.0.1:8088 (esault run --api-port)")
        op.add_argument("job", help="the job (topology) name")
        op.add_argument("unit", help="the unit")
        if name == "rescale":
            op.add_argument("spus", type=int, help="how many SPUs")
        elif name == "move":
            op.add_argument("spu", type=int, help="the SPU id")
            op.add_argument("worker", help="the worker process, e.g. w2")
        elif name == "swap":
            op.add_argument("version", help="a version the topology declares (set_bolt(..., versions={...}))")
        else:
            op.add_argument("assignment", help='JSON: {"<spu>": [[lo, hi], ...]}; a negative id starts an SPU')
        op.add_argument("--token", default=os.environ.get("ESAULT_API_TOKEN"), help="the API token, if it has one")
    savepoint = sub.add_parser("savepoint", help="take a savepoint of a running job (and stop it with --stop)")
    savepoint.add_argument("address", help="the driver's HOST:PORT")
    savepoint.add_argument("job", help="the job (topology) name")
    savepoint.add_argument("--stop", action="store_true", help="end the job's spouts at the savepoint")
    savepoint.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for it")
    savepoint.add_argument("--secret-key", default=os.environ.get("ESAULT_CLIENT_SECRET_KEY"),
                           help="a client-N.key_secret (default: the local driver's status key)")
    savepoint.add_argument("--advertise", default=None, metavar="HOST[:PORT]",
                        help="where the driver sends its reply, if the route toward it is not reachable back "
                             "(NAT); listens on all interfaces at PORT (default any)")
    savepoint.add_argument("--driver-key", default=os.environ.get("ESAULT_DRIVER_KEY"),
                           help="the driver's public driver.key")
    status = sub.add_parser("status", help="print units, SPUs and rates of a running driver")
    status.add_argument("address", help="the driver's HOST:PORT")
    status.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the driver (default 10)")

    worker = sub.add_parser("worker", help="start a worker process that hosts SPUs for a driver")
    worker.add_argument("--driver", required=True, help="the driver's HOST:PORT")
    worker.add_argument("--name", default=None, help="this worker's process name (default w<pid>)")
    worker.add_argument("--metrics-port", type=int, default=None, help="serve this worker's /metrics here")
    worker.add_argument("--metrics-host", default="127.0.0.1", help="address for /metrics (default 127.0.0.1)")
    worker.add_argument("--bind-host", default=None,
                        help="interface to listen on for the driver and peers (default: the one that routes to "
                             "the driver, 127.0.0.1 for a local driver; 0.0.0.0 for all)")
    worker.add_argument("--port", type=int, default=0, help="port to listen on (default 0: any free port)")
    worker.add_argument("--advertise", default=None, metavar="HOST[:PORT]",
                        help="the address the driver and peers connect to, if not the bound one (NAT, port "
                             "forwarding, a DNS name); PORT defaults to the bound port")
    worker.add_argument("--secret-key", default=os.environ.get("ESAULT_SECRET_KEY"),
                        help="this worker's worker-N.key_secret (env ESAULT_SECRET_KEY)")
    worker.add_argument("--driver-key", default=os.environ.get("ESAULT_DRIVER_KEY"),
                        help="the driver's public driver.key (env ESAULT_DRIVER_KEY)")
    worker.add_argument("--enroll-key", default=os.environ.get("ESAULT_ENROLL_SECRET_KEY"),
                        help="a replica: the shared enroll.key_secret (env ESAULT_ENROLL_SECRET_KEY) instead of a "
                             "key of its own; the driver names it and makes its key pair")
    worker.add_argument("--driver-timeout", type=float, default=30.0,
                        help="exit after this many seconds without word from the driver (default 30)")
    worker.add_argument("--connect-timeout", type=float, default=60.0,
                        help="exit (code 3) if the driver has not answered within this many seconds (default 60)")
    worker.add_argument("--stop-timeout", type=float, default=SPU_STOP_TIMEOUT,
                        help="an SPU that has not stopped after this many seconds is stuck: the worker logs every "
                             f"thread's stack and exits (code 4) so its SPUs are replaced (default {SPU_STOP_TIMEOUT:g})")
    worker.add_argument("--keys-stdin", action="store_true",
                        help="read this worker's keys from stdin (how a local driver hands out fresh ones)")

    status.add_argument("--secret-key", default=os.environ.get("ESAULT_CLIENT_SECRET_KEY"),
                        help="a status client's client-N.key_secret (default: the key a local driver left for "
                             "this user)")
    status.add_argument("--advertise", default=None, metavar="HOST[:PORT]",
                        help="where the driver sends its reply, if the route toward it is not reachable back "
                             "(NAT); listens on all interfaces at PORT (default any)")
    status.add_argument("--driver-key", default=os.environ.get("ESAULT_DRIVER_KEY"), help="the driver's public driver.key")

    keys = sub.add_parser("keys", help="make CurveZMQ keys for a static cluster")
    keys_sub = keys.add_subparsers(dest="keys_command", required=True)
    generate = keys_sub.add_parser("generate", help="write driver, worker-N and client-N key files into DIR")
    generate.add_argument("directory", help="where to write them (created if missing; existing keys are kept)")
    generate.add_argument("--workers", type=int, required=True, help="how many worker key pairs")
    generate.add_argument("--clients", type=int, default=1, help="how many status client key pairs (default 1)")
    generate.add_argument("--enroll", action="store_true",
                          help="also an enroll.key pair, shared by replica workers (`esault worker --enroll-key`)")

    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=getattr(logging, str(args.log_level).upper(), logging.WARNING),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.command in ("run", "worker") and hasattr(signal, "SIGUSR1"):
        # `kill -USR1 PID` prints every thread's stack to stderr: what a stalled driver or worker waits on.
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    try:
        if args.command == "run":
            return _run(args)
        if args.command == "worker":
            return _worker(args)
        if args.command == "keys":
            return _keys(args)
        if args.command == "savepoint":
            return _savepoint(args)
        if args.command in ("rescale", "move", "assign", "swap"):
            return _operation(args)
        return _status(args)
    except DriverUnreachable as exc:
        print(f"esault: error: {exc}", file=sys.stderr)
        return int(ExitCode.NO_DRIVER)
    except EsaultError as exc:
        print(f"esault: error: {exc}", file=sys.stderr)
        return int(ExitCode.NOT_STARTED)
    except KeyboardInterrupt:
        return int(ExitCode.INTERRUPTED)


def _run(args: argparse.Namespace) -> int:
    from esault.cluster.local import LocalCluster
    from esault.dsl.loader import load_topology

    overrides: dict[str, Any] = {}
    if args.data_dir is not None:
        overrides["data_dir"] = Path(args.data_dir)
    if args.checkpoint_storage is not None:
        overrides["checkpoint_storage"] = args.checkpoint_storage
    if args.metrics_port is not None:
        overrides["metrics_port"] = args.metrics_port
    if args.metrics_host is not None:
        overrides["metrics_host"] = args.metrics_host
    for name in ("guarantee", "checkpoint_interval", "restore_from"):
        if getattr(args, name) is not None:
            overrides[name] = getattr(args, name)
    if args.fresh:
        overrides["fresh_start"] = True
    topology, module = load_topology(args.path)
    config = JobConfig.load(args.config, defaults=getattr(module, "JOB_DEFAULTS", None), **overrides)
    server = None
    if config.metrics_port is not None:
        from esault.metrics.exporter import start_metrics_server

        server = start_metrics_server(config.metrics_host, config.metrics_port)
        print(f"metrics: {server.url}", file=sys.stderr)
    started = time.monotonic()
    check_cluster(args.cluster, "--cluster")
    args.cluster = args.cluster or config.cluster or "processes"
    if args.cluster == "static" and not args.listen:
        raise ConfigError("--cluster static needs --listen HOST:PORT for the workers to join")
    cluster_args: dict[str, Any] = {"listen": args.listen, "advertise": args.advertise}
    cluster_args.update(spus_per_worker=args.spus_per_worker, release_after=args.release_after,
                        worker_wait=args.worker_wait)
    if args.ray_head_timeout is not None and not args.cluster.startswith("ray://"):
        raise ConfigError(f"--ray-head-timeout is for a ray:// cluster, not a {args.cluster!r} one: leave it out")
    if args.cluster == "processes":
        cluster_args["workers"] = args.workers or config.max_workers
        cluster_args["max_workers"] = args.max_workers
    elif args.cluster.startswith("ray://"):
        address = args.cluster.removeprefix("ray://")
        cluster_args["ray"] = "auto" if address == "auto" else args.cluster
        cluster_args["max_workers"] = args.max_workers
        cluster_args["listen"] = args.listen or "127.0.0.1:0"
        if args.ray_head_timeout is not None:
            cluster_args["ray_options"] = {"head_timeout": args.ray_head_timeout}
    elif args.max_workers is not None:
        raise ConfigError(f"--max-workers grows the local pool (--cluster processes) or a Ray cluster's share, not "
                          f"a {args.cluster!r} cluster: leave it out")
    if args.cluster == "static" or args.secret_key or args.worker_keys:
        cluster_args["keys"] = _cluster_keys(args)
    with LocalCluster(**cluster_args) as cluster:
        if cluster.address:
            print(f"driver listening on {cluster.address}", file=sys.stderr, flush=True)
        api = None
        if args.api_port is not None:
            from esault.api import ControlApi

            api = ControlApi(lambda: cluster.jobs, args.api_host, args.api_port, args.api_token).start()
            print(f"control plane: {api.url} (web page), {api.url}/api/jobs (REST)", file=sys.stderr, flush=True)
        if args.cluster == "static":
            cluster.wait_for_workers(args.min_workers)
        print("\n".join(topology.physical_plan()), file=sys.stderr, flush=True)
        job = cluster.submit(topology, config)
        if job.restored_from is not None:
            print(_resuming(job, args.path), flush=True)
        fallback = getattr(getattr(job, "checkpoints", None), "fallback", None)
        if fallback:
            print(f"esault: {fallback}", flush=True)
        rewound = getattr(getattr(job, "checkpoints", None), "rewound", None)
        if rewound:
            print(f"esault: {rewound}", flush=True)
        print(f"topology {job.name!r} running (Ctrl-C stops it in order)", file=sys.stderr, flush=True)
        progress = _Progress(job, sys.stderr) if sys.stderr.isatty() else None
        interrupted = False
        try:
            if args.duration is not None:
                _wait_unless_failed(job, args.duration)
                complete = job.is_complete()
            else:
                complete = job.wait(args.timeout)
        except KeyboardInterrupt:
            interrupted, complete = True, False
            print("esault: interrupted: stopping the job (what is queued drains; Ctrl-C again quits at once)",
                  file=sys.stderr, flush=True)
        finally:
            if progress:
                progress.stop()
            job.stop()
            if api is not None:
                api.stop()
    status = job.final_status or {}
    elapsed = time.monotonic() - started
    _print_status(status, elapsed)
    if job.restored_from is not None and complete and not _emitted(status):
        print(f"nothing left to do: topology {job.name!r} had already finished at checkpoint "
              f"{job.restored_from.epoch}, so its spouts emitted nothing this run. Add --fresh to run it again "
              "from the start")
    if hasattr(module, "summarize"):
        print(module.summarize(job))
    if server is not None:
        server.stop()
    if interrupted:
        print(f"esault: topology {job.name!r} was interrupted after {elapsed:.1f} s; the counts above are what "
              "it processed", file=sys.stderr)
        return int(ExitCode.INTERRUPTED)
    outcome = judge_run(status, complete, timeout=args.timeout, duration=args.duration,
                        dead_letter_path=str(job.dead_letter_path))
    if not outcome.ok:
        what = "failed" if status.get("failures") else "did not process all its input"
        print(f"esault: error: topology {job.name!r} {what} (exit code {int(outcome.exit_code)}):", file=sys.stderr)
        for problem in outcome.problems:
            print(f"  - {problem}", file=sys.stderr)
    return int(outcome.exit_code)


def _wait_unless_failed(job: Any, seconds: float) -> None:
    """--duration: run for `seconds`, or until the job failed (Job.failures): it cannot go on as declared."""
    deadline = time.monotonic() + seconds
    pause = threading.Event()
    while not job.failures and time.monotonic() < deadline:
        pause.wait(min(0.1, max(0.0, deadline - time.monotonic())))


def _resuming(job: Any, path: str) -> str:
    """The line that says a run resumes an earlier one's checkpoint, and how to start over instead."""
    point = job.restored_from
    return (f"resuming topology {job.name!r} from checkpoint {point.epoch} ({point.kind}) in "
            f"{job.checkpoints.store.path}: the spouts continue where the run that wrote it stopped; to start "
            f"over instead, add --fresh to this command (esault run {path} ... --fresh discards these checkpoints)")


def _emitted(status: dict[str, Any]) -> int:
    return sum(u.get("emitted", 0) for u in status.get("units", {}).values() if u.get("kind") == "spout")


def _cluster_keys(args: argparse.Namespace) -> Any:
    """The driver's keys from files; a static cluster without them cannot let any worker in."""
    from esault.cluster.credentials import ClusterKeys

    if not (args.secret_key and (args.worker_keys or args.enroll_key)):
        raise ConfigError("a static cluster needs --secret-key DIR/driver.key_secret and --worker-keys DIR or "
                          "--enroll-key DIR/enroll.key (make them with `esault keys generate DIR --workers N "
                          "[--enroll]`): without keys no worker can join")
    return ClusterKeys.from_files(args.secret_key, args.worker_keys, args.client_keys, args.enroll_key)


def _savepoint(args: argparse.Namespace) -> int:
    from esault.cluster.credentials import WorkerKeys
    from esault.cluster.status import request_savepoint

    keys = WorkerKeys.from_files(args.secret_key, args.driver_key) if args.secret_key and args.driver_key else None
    reply = request_savepoint(args.address, args.job, args.stop, args.timeout, keys, advertise=args.advertise)
    if reply.error:
        print(f"esault: error: {reply.error}", file=sys.stderr)
        return 1
    print(f"savepoint {reply.epoch} of {args.job!r} taken{' and the job stopped' if args.stop else ''}; "
          f"start from it with `esault run ... --restore-from {reply.epoch}`")
    return 0


def _operation(args: argparse.Namespace) -> int:
    from esault.api.client import call, describe

    from urllib.parse import quote

    base = f"/api/jobs/{quote(args.job, safe='')}/units/{quote(args.unit, safe='')}"
    if args.command == "rescale":
        result = call(args.api, f"{base}/rescale", {"spus": args.spus}, args.token)
    elif args.command == "move":
        result = call(args.api, f"{base}/spus/{args.spu}/move", {"worker": args.worker}, args.token)
    elif args.command == "swap":
        result = call(args.api, f"{base}/swap", {"version": args.version}, args.token)
    else:
        try:
            assignment = json.loads(args.assignment)
        except ValueError as exc:
            raise ConfigError(f"the assignment is not JSON ({exc}): give {{\"<spu>\": [[lo, hi], ...]}}") from None
        result = call(args.api, f"{base}/workload", {"assignment": assignment}, args.token)
    print(describe(result))
    return 0


def _keys(args: argparse.Namespace) -> int:
    from esault.transport.keys import generate_key_files

    written = generate_key_files(args.directory, args.workers, args.clients, enroll=args.enroll)
    print(f"wrote {len(written)} key files to {args.directory}: give driver.key_secret to the driver only, "
          "worker-N.key_secret to worker N only, driver.key to every worker; *.key files are public")
    return 0


def _worker(args: argparse.Namespace) -> int:
    from esault.cluster.credentials import WorkerKeys
    from esault.cluster.worker import run_worker

    if args.enroll_key:
        from esault.cluster.enrollment import enroll

        if args.keys_stdin or args.secret_key or args.name:
            raise ConfigError("--enroll-key makes this worker a replica, named and keyed by the driver: leave out "
                              "--keys-stdin, --secret-key and --name")
        if not args.driver_key:
            raise ConfigError("--enroll-key needs --driver-key driver.key: the driver it enrolls with")
        args.name, keys = enroll(args.driver, WorkerKeys.from_files(args.enroll_key, args.driver_key),
                                 timeout=args.connect_timeout, advertise=args.advertise and args.advertise.split(":")[0])
        print(f"enrolled with the driver at {args.driver} as {args.name}", file=sys.stderr, flush=True)
    elif args.keys_stdin:
        keys = WorkerKeys.read(sys.stdin)
    elif args.secret_key and args.driver_key:
        keys = WorkerKeys.from_files(args.secret_key, args.driver_key)
    else:
        raise ConfigError("a worker needs its keys: --secret-key worker-N.key_secret and --driver-key driver.key "
                          "(from `esault keys generate`), or --keys-stdin when a local driver spawns it")

    server = None
    if args.metrics_port is not None:
        from esault.metrics.exporter import start_metrics_server

        # Its SPUs' series and its own esault metrics reach the driver's /metrics in heartbeats: served here
        # too, they would count twice. This /metrics has the worker's process_* and python_gc_*.
        server = start_metrics_server(args.metrics_host, args.metrics_port, worker=True)
    try:
        return run_worker(args.driver, keys, args.name, args.bind_host, driver_timeout=args.driver_timeout,
                          connect_timeout=args.connect_timeout, port=args.port, advertise=args.advertise,
                          stop_timeout=args.stop_timeout)
    finally:
        if server is not None:
            server.stop()


def _status(args: argparse.Namespace) -> int:
    from esault.cluster.status import fetch_status

    from esault.cluster.credentials import WorkerKeys

    keys = None
    if args.secret_key or args.driver_key:
        if not (args.secret_key and args.driver_key):
            raise ConfigError("esault status needs both --secret-key (a client key) and --driver-key, or neither")
        keys = WorkerKeys.from_files(args.secret_key, args.driver_key)
    first = fetch_status(args.address, timeout=args.timeout, keys=keys, advertise=args.advertise)
    threading.Event().wait(1.0)  # two snapshots a second apart give the rates
    reply = fetch_status(args.address, timeout=args.timeout, keys=keys, advertise=args.advertise)
    print(f"driver {args.address}: {len(reply.workers)} worker(s): {', '.join(sorted(reply.workers)) or '-'}")
    if not reply.jobs:
        print("no job running")
    for name, status in reply.jobs.items():
        failures = status.get("failures") or []
        print(f"job {name!r}: {'FAILED, ' if failures else ''}{status['pending_trees']} trees in flight, "
              f"spouts finished: {status['spouts_finished']}, scaling events: {status['scaling_events']}")
        for failure in failures:  # why it cannot go on: first, before the rates that no longer matter
            print(f"  FAILED: {failure}")
        for line in capacity_lines(status.get("capacity")):
            print(f"  {line}")
        before = first.jobs.get(name, {}).get("units", {})
        for unit, info in status["units"].items():
            field = "emitted" if info["kind"] == "spout" else "processed"
            rate = info[field] - before.get(unit, {}).get(field, info[field])
            print(f"  {unit:<12} {len(info['spus'])} SPU(s), {field} {info[field]} ({rate}/s), PEs {info['pes']}")
            for waiting in info.get("waiting", []):  # a source stalled outside esault: why the rate is 0
                print(f"    {waiting}")
            for line in partition_lines(info):
                print(f"    {line}")
    return 0


def capacity_lines(capacity: Any) -> list[str]:
    """The workers' provider, node, age and SPUs, then pending requests and the latest declined one; a status
    that crossed a socket, so a field of the wrong shape shows as '?' rather than failing the command."""
    if not isinstance(capacity, dict):
        return []
    def shown(value: Any) -> str:
        return str(value) if isinstance(value, (str, int, float)) and not isinstance(value, bool) else "?"
    budget = capacity.get("spus_per_worker")
    lines = [f"workers from the {shown(capacity.get('provider'))} provider"
             + (f", {shown(budget)} SPUs a worker" if budget is not None else ", no SPU budget")]
    for row in capacity.get("workers") or []:
        if isinstance(row, dict):
            lines.append(f"  {shown(row.get('worker')):<10} {shown(row.get('provider'))} on {shown(row.get('node'))}, "
                         f"up {shown(row.get('age_s'))} s, {shown(row.get('spus'))} SPU(s)")
    for row in capacity.get("pending") or []:
        if isinstance(row, dict):
            lines.append(f"  pending: {shown(row.get('worker'))} for {shown(row.get('reason'))}, "
                         f"waiting {shown(row.get('waiting_s'))} s")
    if capacity.get("declined"):
        lines.append(f"  last declined: {shown(capacity.get('declined'))}")
    return lines


def partition_lines(unit: dict[str, Any]) -> list[str]:
    """A partitioned source's rows of a unit's status, one line per partition ('SPU 3 orders[2] offset 120,
    end 200, lag 80'), checked again (a status that crossed a socket), and each SPU that reads none."""
    lines = []
    spus = unit.get("spus")
    ids = sorted(spu for spu in spus if type(spu) is int) if isinstance(spus, dict) else []
    for spu in ids:
        row = spus[spu]
        if not isinstance(row, dict) or "partitions" not in row:
            continue
        rows = rows_of_dicts(row["partitions"])
        lines.extend(f"SPU {spu} {describe(part)}" for part in rows)
        if not rows:
            lines.append(f"SPU {spu} reads no partition")
    return lines


def _print_status(status: dict[str, Any], elapsed: float) -> None:
    print(f"topology {status.get('topology')!r} ran {elapsed:.1f}s")
    for name, unit in status.get("units", {}).items():
        count = unit["processed"] if unit["kind"] == "bolt" else unit["emitted"]
        verb = "processed" if unit["kind"] == "bolt" else "emitted"
        extra = f", acked {unit['acked']}, failed {unit['failed']}, replayed {unit['replayed']}" \
            if unit["kind"] == "spout" else f", {unit['pes']} PEs"
        if unit.get("shed"):  # load shedding (a stream join's) is never silent
            extra += f", shed {unit['shed']} under overload"
        print(f"  {name:<12} {len(unit['spus'])} SPU(s), {verb} {count}{extra}")
        for waiting in unit.get("waiting", []):
            print(f"    {waiting}")
        for line in partition_lines(unit):
            print(f"    {line}")
    ckpt = status.get("checkpoints")
    if ckpt and status.get("guarantee") == "exactly_once":
        print(f"  {status['guarantee']}: {ckpt['completed']} checkpoint(s), last epoch {ckpt['last_epoch']}, "
              f"{ckpt['failed']} failed, {ckpt['recoveries']} rollback(s)")


def _latency_totals(histogram: Any, topology: str) -> tuple[float, float]:
    """Sum and count of end-to-end latencies observed so far for `topology` (all spouts)."""
    total = count = 0.0
    for metric in histogram.collect():
        for sample in metric.samples:
            if sample.labels.get("topology") != topology:
                continue
            if sample.name.endswith("_sum"):
                total += sample.value
            elif sample.name.endswith("_count"):
                count += sample.value
    return total, count


class _Progress:
    """A one-line live view on a terminal: rate, SPUs per unit."""

    def __init__(self, job: Any, stream: Any) -> None:
        self.job = job
        self.stream = stream
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        from esault.metrics.registry import TUPLE_LATENCY

        last = 0
        last_sum = last_count = 0.0
        while not self._stop.wait(1.0):
            try:
                status = self.job.status()
            except Exception:
                return
            units = status["units"]
            processed = sum(u["processed"] for u in units.values())
            total, count = _latency_totals(TUPLE_LATENCY, self.job.name)
            mean_ms = (total - last_sum) / (count - last_count) * 1000 if count > last_count else 0.0
            spus = " ".join(f"{n}:{len(u['spus'])}" for n, u in units.items() if u["kind"] == "bolt")
            self.stream.write(f"\r{processed - last:>9,} tuples/s  latency {mean_ms:7.1f} ms  "
                              f"in flight {status['pending_trees']:>6}  SPUs {spus}  ")
            self.stream.flush()
            last, last_sum, last_count = processed, total, count

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self.stream.write("\n")


if __name__ == "__main__":
    raise SystemExit(main())
