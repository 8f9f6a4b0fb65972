"""The driver's REST API: read a running job's layout, metrics and history; apply control-plane operations.

Loopback by default. Bound to any other address it refuses to start without a
token, and then every request must carry ``Authorization: Bearer <token>``
(compared in constant time). Nothing in a request is trusted: bodies are
capped, parsed as JSON and checked field by field; no request names code to
load. Errors come back as JSON ``{"error": ...}`` with 400 (bad request), 401
(no or wrong token), 404 (no such job, unit or path), 409 (the operation was
refused or aborted) or 500. Routes: docs/CONTROL_PLANE.md ("REST API").
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Mapping
from urllib.parse import unquote

from esault.control.runner import decisions_as_dicts, take_snapshot
from esault.control.snapshot import SnapshotBuilder
from esault.errors import ConfigError, EsaultError, ScalingError

log = logging.getLogger("esault.api")

MAX_BODY_BYTES = 1 << 20
"""A request body larger than this is refused unread (413): an assignment of many ranges fits easily."""

WEB_PAGE = Path(__file__).with_name("web") / "index.html"


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class ControlApi:
    """Serves the jobs `jobs()` returns (name -> Job) over HTTP on a daemon thread."""

    def __init__(self, jobs: Callable[[], Mapping[str, Any]], host: str = "127.0.0.1", port: int = 0,
                 token: str | None = None) -> None:
        if not _is_loopback(host) and not token:
            raise ConfigError(f"the REST API would listen on {host}, which is not loopback, without a token: "
                              "give a token (--api-token) or bind to 127.0.0.1")
        self.jobs = jobs
        self.token = token
        self._builders: dict[str, SnapshotBuilder] = {}
        self._lock = threading.Lock()
        api = self

        class Handler(BaseHTTPRequestHandler):
            server_version = "esault"

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                api._handle(self, "GET")

            def do_POST(self) -> None:  # noqa: N802
                api._handle(self, "POST")

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                log.debug("api %s " + format, self.client_address[0], *args)

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self.host, self.port = self._server.server_address[:2]
        self._thread = threading.Thread(target=self._server.serve_forever, name="esault-api", daemon=True)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> "ControlApi":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    # --- plumbing --------------------------------------------------------------------

    def _handle(self, request: BaseHTTPRequestHandler, method: str) -> None:
        try:
            self._check_token(request)
            path = request.path.split("?", 1)[0]
            if method == "GET" and path in ("/", "/index.html"):
                return self._send(request, 200, WEB_PAGE.read_bytes(), "text/html; charset=utf-8")
            body = self._read_json(request) if method == "POST" else {}
            payload = self._route(method, path, body)
            self._send(request, 200, json.dumps(payload, default=_plain).encode(), "application/json")
        except ApiError as exc:
            self._send_error(request, exc.status, str(exc))
        except ScalingError as exc:
            self._send_error(request, 409, str(exc))
        except EsaultError as exc:
            self._send_error(request, 400, str(exc))
        except Exception as exc:  # noqa: BLE001 - one bad request never stops the API
            log.exception("api: %s %s failed", method, request.path)
            self._send_error(request, 500, f"{type(exc).__name__}: {exc}")

    def _check_token(self, request: BaseHTTPRequestHandler) -> None:
        if self.token is None:
            return
        given = request.headers.get("Authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {self.token}".encode()):
            raise ApiError(401, "missing or wrong token: send 'Authorization: Bearer <token>'")

    @staticmethod
    def _read_json(request: BaseHTTPRequestHandler) -> dict[str, Any]:
        try:
            length = int(request.headers.get("Content-Length", "0"))
        except ValueError:
            raise ApiError(400, "Content-Length is not a number") from None
        if length > MAX_BODY_BYTES:
            raise ApiError(413, f"the body is {length} bytes; at most {MAX_BODY_BYTES} are accepted")
        raw = request.rfile.read(length) if length > 0 else b"{}"
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ApiError(400, f"the body is not JSON ({exc}); send an object such as {{\"spus\": 3}}") from None
        if not isinstance(body, dict):
            raise ApiError(400, f"the body must be a JSON object, got {type(body).__name__}")
        return body

    @staticmethod
    def _send(request: BaseHTTPRequestHandler, status: int, data: bytes, kind: str) -> None:
        request.send_response(status)
        request.send_header("Content-Type", kind)
        request.send_header("Content-Length", str(len(data)))
        request.send_header("Cache-Control", "no-store")
        request.end_headers()
        request.wfile.write(data)

    def _send_error(self, request: BaseHTTPRequestHandler, status: int, message: str) -> None:
        try:
            self._send(request, status, json.dumps({"error": message}).encode(), "application/json")
        except OSError:
            pass  # the client went away

    # --- routes ----------------------------------------------------------------------

    _ROUTES = [
        ("GET", re.compile(r"/api/jobs"), "list_jobs"),
        ("GET", re.compile(r"/api/jobs/(?P<job>[^/]+)"), "show_job"),
        ("GET", re.compile(r"/api/jobs/(?P<job>[^/]+)/units"), "units"),
        ("GET", re.compile(r"/api/jobs/(?P<job>[^/]+)/history"), "history"),
        ("POST", re.compile(r"/api/jobs/(?P<job>[^/]+)/units/(?P<unit>[^/]+)/rescale"), "rescale"),
        ("POST", re.compile(r"/api/jobs/(?P<job>[^/]+)/units/(?P<unit>[^/]+)/workload"), "workload"),
        ("POST", re.compile(r"/api/jobs/(?P<job>[^/]+)/units/(?P<unit>[^/]+)/swap"), "swap"),
        ("POST", re.compile(r"/api/jobs/(?P<job>[^/]+)/units/(?P<unit>[^/]+)/spus/(?P<spu>\d+)/move"), "move"),
        ("POST", re.compile(r"/api/jobs/(?P<job>[^/]+)/units/(?P<unit>[^/]+)/spus/(?P<spu>\d+)/split"), "split"),
        ("POST", re.compile(r"/api/jobs/(?P<job>[^/]+)/units/(?P<unit>[^/]+)/spus/(?P<spu>\d+)/merge"), "merge"),
        ("POST", re.compile(r"/api/jobs/(?P<job>[^/]+)/savepoint"), "savepoint"),
    ]

    def _route(self, method: str, path: str, body: dict[str, Any]) -> Any:
        allowed = []
        for verb, pattern, name in self._ROUTES:
            match = pattern.fullmatch(path)
            if not match:
                continue
            if verb != method:
                allowed.append(verb)
                continue
            args = {name: unquote(value) for name, value in match.groupdict().items()}  # names may be %-quoted
            job = self._find_job(args.pop("job")) if "job" in args else None
            return getattr(self, f"_{name}")(job, body, **args)
        if allowed:
            raise ApiError(405, f"{method} is not served at {path}; use {' or '.join(sorted(set(allowed)))}")
        raise ApiError(404, f"no route {path}; start at GET /api/jobs")

    def _find_job(self, name: str) -> Any:
        jobs = self.jobs()
        if name not in jobs:
            raise ApiError(404, f"no job {name!r}; jobs: {', '.join(sorted(jobs)) or 'none'}")
        return jobs[name]

    # --- reads -----------------------------------------------------------------------

    def _list_jobs(self, _job: None, _body: dict) -> Any:
        return {"jobs": sorted(self.jobs())}

    def _show_job(self, job: Any, _body: dict) -> Any:
        status = job.status()
        topology = job.topology
        edges = [{"from": i.source, "to": spec.name, "grouping": i.grouping.value}
                 for spec in topology.units for i in spec.inputs]
        return {"name": job.name, "guarantee": status["guarantee"], "checkpoints": status["checkpoints"],
                "pending_trees": status["pending_trees"], "spouts_finished": status["spouts_finished"],
                "units": [spec.name for spec in topology.units], "edges": edges,
                "workers": job.workers()}

    def _units(self, job: Any, _body: dict) -> Any:
        units = {}
        for name, unit in job.status()["units"].items():
            spec = job.topology.unit(name)
            units[name] = {"kind": unit["kind"], "key_grouped": spec.per_key,
                           "chained_into": unit.get("chained_into"),
                           "versions": sorted(spec.versions), "version": job.logic_version(name),
                           "totals": {k: unit[k] for k in ("emitted", "processed", "failed", "pes") if k in unit},
                           "spus": {str(spu): _spu_row(row) for spu, row in unit["spus"].items()}}
        return {"units": units, "rates": self._rates(job)}

    def _rates(self, job: Any) -> dict[str, dict[str, float | None]]:
        """Per unit and SPU, tuples/s since this API's previous read of the job (None on the first)."""
        with self._lock:
            builder = self._builders.setdefault(job.name, SnapshotBuilder())
            snapshot = take_snapshot(job, builder)
        return {name: {str(spu): (m.processed_rate if unit.kind == "bolt" else m.emitted_rate)
                       for spu, m in unit.spus.items()} for name, unit in snapshot.units.items()}

    def _history(self, job: Any, _body: dict) -> Any:
        return {"reconfigurations": [_result(r) for r in job.scaling_history],
                "controllers": [d for runner in job.controllers for d in decisions_as_dicts(runner.decisions)]}

    # --- operations ------------------------------------------------------------------

    def _rescale(self, job: Any, body: dict, unit: str) -> Any:
        spus = _field(body, "spus", int, "a whole number of SPUs, e.g. {\"spus\": 3}")
        return _result(job.rescale(unit, spus, reason="manual"))

    def _workload(self, job: Any, body: dict, unit: str) -> Any:
        raw = _field(body, "assignment", dict, 'an object {"<spu>": [[lo, hi], ...]}')
        assignment: dict[int, list[tuple[int, int]]] = {}
        for spu, ranges in raw.items():
            try:
                spu_id = int(spu)
                assignment[spu_id] = [(int(lo), int(hi)) for lo, hi in ranges]
            except (TypeError, ValueError):
                raise ApiError(400, f"assignment[{spu!r}] must map an SPU id to [[lo, hi], ...] (a negative id "
                                    f"starts a new SPU), got {ranges!r:.100}") from None
        return _result(job.assign_workload(unit, assignment))

    def _swap(self, job: Any, body: dict, unit: str) -> Any:
        version = _field(body, "version", str, 'the name of a version the topology declares, e.g. {"version": "v2"}')
        job.topology.unit(unit).version(version)  # an unknown unit or version is the client's mistake: 400
        return _result(job.swap(unit, version))

    def _move(self, job: Any, body: dict, unit: str, spu: str) -> Any:
        worker = _field(body, "worker", str, 'a worker name, e.g. {"worker": "w2"}')
        return _result(job.assign_resource(unit, int(spu), worker))

    def _split(self, job: Any, body: dict, unit: str, spu: str) -> Any:
        at = _field(body, "at", int, "a hash, or leave it out", required=False)
        return _result(job.split(unit, int(spu), at))

    def _merge(self, job: Any, body: dict, unit: str, spu: str) -> Any:
        into = _field(body, "into", int, "an SPU id, or leave it out", required=False)
        return _result(job.merge(unit, int(spu), into))

    def _savepoint(self, job: Any, body: dict) -> Any:
        stop = _field(body, "stop", bool, "true or false", required=False) or False
        return {"epoch": job.savepoint(stop=stop, timeout=120)}


def _field(body: dict[str, Any], name: str, kind: type, expected: str, required: bool = True) -> Any:
    if name not in body or body[name] is None:
        if required:
            raise ApiError(400, f"the body needs {name!r}: {expected}")
        return None
    value = body[name]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ApiError(400, f"{name!r} must be {expected}; got {value!r:.100}")
    return value


def _spu_row(row: dict[str, Any]) -> dict[str, Any]:
    keep = ("worker", "pid", "interval", "intervals", "processed", "emitted", "pes", "queue_depth", "busy_us")
    return {k: row.get(k) for k in keep if k in row}


def _result(result: Any) -> dict[str, Any]:
    return {"action": result.action, "unit": result.unit, "moves": [list(m) for m in result.moves],
            "started": list(result.started), "retired": list(result.retired), "moved_keys": result.moved_keys,
            "paused_ms": result.paused_seconds * 1000, "ms": result.seconds * 1000, "reason": result.reason,
            "giver": result.giver, "receiver": result.receiver}


def _plain(value: Any) -> Any:
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)
